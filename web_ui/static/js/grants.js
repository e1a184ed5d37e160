// Roles and grants page: who may do what in a namespace - the tenant's admin roles,
// the namespace's grants (GET /admin/v2/namespaces/{t}/{ns}/permissions) and its
// topics' grants (the namespace policies' auth_policies.destination_auth) - and
// granting and revoking through the admin API (POST / DELETE …/permissions/{role}
// on the namespace or on a topic). Shown to superusers and tenant admins: the
// namespaces listed are those the role administers; the gateway decides each call.
import { api, confirmDialog, enc, explain } from "./core.js";

export const ACTIONS = ["produce", "consume"];

// the namespaces the signed-in role may change grants in ("tenant/ns"), sorted
async function adminNamespaces(access) {
  let tenants = access && !access.superuser ? access.tenantAdmin || [] : await api("/admin/v2/tenants");
  tenants = [...tenants].sort();
  const lists = await Promise.all(tenants.map((t) => api(`/admin/v2/namespaces/${enc(t)}`).catch(() => [])));
  return lists.flat().sort();
}

function rows(grants) {
  return Object.entries(grants || {}).sort(([a], [b]) => a.localeCompare(b))
    .map(([role, actions]) => ({ role, actions: [...actions].sort().join(", ") }));
}

export function grantsPage() {
  return {
    namespaces: [],
    ns: "",
    admins: [],
    nsGrants: [],
    topicGrants: [],
    loaded: false,
    error: "",
    result: "",
    resultOk: true,
    draft: { role: "", topic: "", produce: true, consume: false },
    get hasNamespaces() { return this.namespaces.length > 0; },
    get securityOff() { const a = this.$store.auth.access; return Boolean(a && !a.securityOn); },
    async init() {
      await this.$store.auth.load();
      try {
        this.namespaces = await adminNamespaces(this.$store.auth.access);
        const wanted = new URLSearchParams(location.search).get("ns");
        this.ns = this.namespaces.includes(wanted) ? wanted : this.namespaces[0] || "";
        await this.refresh();
      } catch (e) {
        this.error = explain(e, "Namespaces");
      }
      this.loaded = true;
    },
    async choose() {
      history.replaceState(null, "", `?ns=${enc(this.ns)}`);
      this.result = "";
      await this.refresh();
    },
    async refresh() {
      this.error = "";
      if (!this.ns) { this.admins = []; this.nsGrants = []; this.topicGrants = []; return; }
      const [tenant, namespace] = this.ns.split("/");
      try {
        const [info, grants, policies] = await Promise.all([
          api(`/admin/v2/tenants/${enc(tenant)}`).catch(() => null),
          api(`/admin/v2/namespaces/${enc(tenant)}/${enc(namespace)}/permissions`),
          api(`/admin/v2/namespaces/${enc(tenant)}/${enc(namespace)}`),
        ]);
        this.admins = (info && info.adminRoles) || [];
        this.nsGrants = rows(grants);
        const topics = ((policies || {}).auth_policies || {}).destination_auth || {};
        this.topicGrants = Object.entries(topics).sort(([a], [b]) => a.localeCompare(b)).flatMap(([topic, roles]) =>
          rows(roles).map((r) => ({ ...r, topic, local: topic.split("/").slice(4).join("/"), key: `${topic} ${r.role}` })));
      } catch (e) {
        this.error = explain(e, `Grants of ${this.ns}`);
      }
    },
    topicPath(local) {
      const [tenant, namespace] = this.ns.split("/");
      return `/admin/v2/persistent/${enc(tenant)}/${enc(namespace)}/${enc(local)}/permissions`;
    },
    async grant() {
      const role = this.draft.role.trim();
      const local = this.draft.topic.trim();
      const actions = ACTIONS.filter((a) => this.draft[a]);
      if (!role) { this.say("Name a role (the token's role claim, e.g. its sub).", false); return; }
      if (actions.length === 0) { this.say("Choose produce, consume or both.", false); return; }
      const [tenant, namespace] = this.ns.split("/");
      const path = local ? `${this.topicPath(local)}/${enc(role)}`
        : `/admin/v2/namespaces/${enc(tenant)}/${enc(namespace)}/permissions/${enc(role)}`;
      try {
        await api(path, { method: "POST", json: actions });
        this.say(`Granted ${actions.join(" and ")} to ${role} on ${local ? `topic ${local}` : this.ns}.`, true);
        this.draft.role = "";
        this.draft.topic = "";
        await this.refresh();
      } catch (e) {
        this.say(explain(e, "Grant"), false);
      }
    },
    async revoke(row) {
      const where = row.local ? `topic ${row.local}` : this.ns;
      if (!(await confirmDialog(`Revoke every right of role ${row.role} on ${where}? Its open sessions there are closed within seconds.`))) return;
      const [tenant, namespace] = this.ns.split("/");
      const path = row.local ? `${this.topicPath(row.local)}/${enc(row.role)}`
        : `/admin/v2/namespaces/${enc(tenant)}/${enc(namespace)}/permissions/${enc(row.role)}`;
      try {
        await api(path, { method: "DELETE" });
        this.say(`Revoked ${row.role} on ${where}.`, true);
        await this.refresh();
      } catch (e) {
        this.say(explain(e, "Revoke"), false);
      }
    },
    say(text, ok) { this.result = text; this.resultOk = ok; },
  };
}
