// Token sign-in: the bearer token this tab uses (sessionStorage, never a cookie, so no
// other site can use it), the headers and WebSocket URLs that carry it, and the rights
// the gateway reports for it (GET /admin/v2/whoami), which hide what the role cannot do:
// an element marked data-needs="superuser|admin|produce|consume" is shown only when the
// role has that right on the page's tenant / namespace (the <main> data-tenant / -namespace).
const KEY = "folio.token";

export function token() {
  return sessionStorage.getItem(KEY) || "";
}

export function authHeaders() {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

// a WebSocket or EventSource URL with the token (browsers cannot set their headers)
export function withToken(url) {
  const t = token();
  if (!t) return url;
  return `${url}${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(t)}`;
}

function allows(access, need, tenant, namespace, topic) {
  if (!access || access.superuser) return true;
  if (need === "superuser") return false;
  if (tenant && access.tenantAdmin.includes(tenant)) return true;
  if (need === "admin" || !tenant || !namespace) return false;
  if ((access.grants[`${tenant}/${namespace}`] || []).includes(need)) return true;
  // a grant on a partitioned topic covers its partitions
  const base = topic ? topic.replace(/-partition-\d+$/, "") : "";
  return Boolean(base) && ((access.topicGrants || {})[`persistent://${tenant}/${namespace}/${base}`] || []).includes(need);
}

export function install(Alpine) {
  Alpine.store("auth", {
    access: null, // the gateway's answer: {securityOn, role, superuser, tenantAdmin, grants, topicGrants}
    needed: false, // a call answered 401: ask for a token
    draft: "",
    error: "",
    get role() { return this.access && this.access.role; },
    get signedIn() { return Boolean(token()); },
    get securityOn() { return Boolean(this.access && this.access.securityOn); },
    // may see and change grants: a superuser (everyone in open mode) or a tenant admin
    get mayGrant() { const a = this.access; return Boolean(a && (a.superuser || (a.tenantAdmin || []).length)); },
    can(need, tenant, namespace, topic) { return allows(this.access, need, tenant, namespace, topic); },
    async load() {
      try {
        const res = await fetch("/admin/v2/whoami", { headers: authHeaders(), cache: "no-store" });
        this.access = res.ok ? await res.json() : null;
      } catch (e) { this.access = null; }
      if (this.access && this.access.securityOn && !this.access.role) this.needed = true;
      applyNeeds(this);
    },
    async signIn() {
      sessionStorage.setItem(KEY, this.draft.trim());
      this.draft = "";
      await this.load();
      if (this.access && this.access.role) { location.reload(); return; }
      sessionStorage.removeItem(KEY);
      this.error = "that token was not accepted";
    },
    signOut() {
      sessionStorage.removeItem(KEY);
      location.reload();
    },
    unauthorized() { this.needed = true; },
  });
  Alpine.store("auth").load();
}

function applyNeeds(auth) {
  const main = document.querySelector("main");
  const tenant = main ? main.dataset.tenant : undefined;
  const namespace = main ? main.dataset.namespace : undefined;
  const topic = main ? main.dataset.topic : undefined;
  for (const el of document.querySelectorAll("[data-needs]")) {
    el.style.display = auth.can(el.dataset.needs, tenant, namespace, topic) ? "" : "none";
  }
}
