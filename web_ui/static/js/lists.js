// Tenants / namespaces / topics lists with rates, backlog, size and subscription
// counts, sortable (by backlog first), searchable and paged on the server
// (GET /admin/v2/cluster/{tenants,namespaces/…,topics/…}?sort=&order=&search=&offset=&limit=,
// total in X-Total-Count). A role that may not read the cluster views (or an older
// gateway) gets the plain name list instead (…?search=&offset=&limit=); a gateway
// that answers the whole list (no header) is filtered and paged here. Each row can
// be deleted after a confirmation by a role that may (tenants: superuser; namespaces and
// topics: tenant admin). A partitioned topic is a row of its own (the sums
// over its partitions) beside its partitions' rows.
import { ApiError, api, confirmDialog, enc, explain, fmt, poll } from "./core.js";
import { pageHref } from "./paths.js";

const LIMIT = 20;

function lastPart(name) {
  const s = String(name);
  return s.slice(s.lastIndexOf("/") + 1);
}

const RATE = (v) => fmt.rate(v);
const GROUP_COLUMNS = [
  { key: "topics", label: "Topics", show: fmt.num },
  { key: "msgRateIn", label: "In msg/s", show: RATE },
  { key: "msgRateOut", label: "Out msg/s", show: RATE },
  { key: "msgBacklog", label: "Backlog", show: fmt.num },
  { key: "storageSize", label: "Storage", show: fmt.bytes },
  { key: "subscriptionCount", label: "Subscriptions", show: fmt.num },
];
const TOPIC_COLUMNS = [
  { key: "msgRateIn", label: "In msg/s", show: RATE },
  { key: "msgRateOut", label: "Out msg/s", show: RATE },
  { key: "msgBacklog", label: "Backlog", show: fmt.num },
  { key: "storageSize", label: "Storage", show: fmt.bytes },
  { key: "subscriptionCount", label: "Subscriptions", show: fmt.num },
  { key: "producerCount", label: "Producers", show: fmt.num },
];

const KINDS = {
  tenants: (d) => ({
    path: "/admin/v2/tenants",
    deleteNeeds: "superuser", // DELETE /admin/v2/tenants/{tenant} (gateway/security/rules.py)
    stats: "/admin/v2/cluster/tenants",
    columns: GROUP_COLUMNS,
    item: (t) => ({ name: t, label: t, href: pageHref.namespaces(t) }),
    remove: (item) => ({ path: `/admin/v2/tenants/${enc(item.name)}`,
      question: `Delete tenant ${item.name}? It must have no namespaces left.` }),
  }),
  namespaces: (d) => ({
    path: `/admin/v2/namespaces/${enc(d.tenant)}`,
    deleteNeeds: "admin", // DELETE a namespace: tenant admin
    stats: `/admin/v2/cluster/namespaces/${enc(d.tenant)}`,
    columns: GROUP_COLUMNS,
    item: (n) => ({ name: lastPart(n), label: lastPart(n), href: pageHref.topics(d.tenant, lastPart(n)) }),
    remove: (item) => ({ path: `/admin/v2/namespaces/${enc(d.tenant)}/${enc(item.name)}`,
      question: `Delete namespace ${d.tenant}/${item.name}? It must have no topics left.` }),
  }),
  topics: (d) => ({
    path: `/admin/v2/persistent/${enc(d.tenant)}/${enc(d.namespace)}`,
    deleteNeeds: "admin", // DELETE a topic or a partitioned topic: tenant admin
    stats: `/admin/v2/cluster/topics/${enc(d.tenant)}/${enc(d.namespace)}`,
    columns: TOPIC_COLUMNS,
    item: (t, row) => {
      const local = lastPart(t);
      const part = /-partition-(\d+)$/.exec(local);
      const partitions = row && row.partitions;
      return {
        name: local, label: local, deletable: !part, partitions,
        badge: part ? "partition" : partitions ? `partitioned · ${partitions}` : "",
        href: pageHref.topic(d.tenant, d.namespace, local),
      };
    },
    remove: (item) => {
      const base = `/admin/v2/persistent/${enc(d.tenant)}/${enc(d.namespace)}/${enc(item.name)}`;
      return item.partitions
        ? { path: `${base}/partitions?force=true`,
          question: `Delete partitioned topic ${item.name} and its ${item.partitions} partitions? Their messages and subscriptions are lost.` }
        : { path: `${base}?force=true`, question: `Delete topic ${item.name}? Its messages and subscriptions are lost.` };
    },
  }),
};

// A topic row's figures: "live" (a gateway has it loaded) or "stored" (from its etcd
// records: ledger list and persisted cursors, docs/decisions/0016) as of a time.
export function freshness(row) {
  if (!row || !row.figures) return { fresh: "", freshTitle: "" };
  if (row.figures === "live") return { fresh: "", freshTitle: "" }; // the usual case: no badge
  const estimate = row.exact === false ? " (estimate: an open ledger was not fully read)" : "";
  return {
    fresh: `stored · ${fmt.ago(row.asOfMs)}`,
    freshTitle: `No gateway has this topic loaded: figures from its stored ledger list and cursors, as of ${fmt.time(row.asOfMs)}${estimate}.`,
  };
}

export function listView(kind) {
  return {
    search: "",
    offset: 0,
    limit: LIMIT,
    total: 0,
    items: [],
    columns: [],
    partitioned: [],
    sort: "msgBacklog",
    desc: true,
    withStats: true,
    loaded: false,
    error: "",
    result: "",
    resultOk: true,
    init() {
      this.d = this.$el.dataset; // $el is the clicked element inside handlers: keep the list's own
      this.spec = KINDS[kind](this.d);
      this.columns = this.spec.columns;
      this.$watch("search", () => this.refresh());
      this.$el.addEventListener("refresh-list", () => this.refresh());
      poll(() => this.refresh(), 5000);
    },
    countText() {
      if (!this.loaded) return "Loading…";
      if (!this.total) return "0 items";
      return `${this.offset + 1}–${Math.min(this.offset + this.limit, this.total)} of ${this.total}`;
    },
    // the role may delete this list's rows (the Delete buttons are hidden otherwise)
    mayDelete() {
      return this.$store.auth.can(this.spec.deleteNeeds, this.d.tenant, this.d.namespace);
    },
    page(dir) {
      this.offset = Math.max(0, this.offset + dir * this.limit);
      this.refresh();
    },
    sortBy(key) {
      if (this.sort === key) this.desc = !this.desc;
      else { this.sort = key; this.desc = key !== "name"; }
      this.offset = 0;
      this.refresh();
    },
    arrow(key) { return this.sort === key ? (this.desc ? " ▼" : " ▲") : ""; },
    sortState(key) { return this.sort === key ? (this.desc ? "descending" : "ascending") : "none"; },
    async refresh() {
      if (this.withStats) {
        try {
          await this.refreshStats();
          return;
        } catch (e) {
          // a role without the cluster views (401/403) or a gateway without them: names only
          if (!(e instanceof ApiError && [401, 403, 404, 405].includes(e.status))) {
            this.error = explain(e, "The list");
            this.loaded = true;
            return;
          }
          this.withStats = false;
          this.columns = [];
        }
      }
      await this.refreshNames();
    },
    async refreshStats() {
      const q = new URLSearchParams({ sort: this.sort, order: this.desc ? "desc" : "asc",
        search: this.search, offset: String(this.offset), limit: String(this.limit) });
      const { body, res } = await api(`${this.spec.stats}?${q}`, { withResponse: true });
      this.total = Number(res.headers.get("X-Total-Count") ?? (body || []).length);
      this.items = (Array.isArray(body) ? body : []).map((row) => ({
        ...this.spec.item(row.topic || row.name, row),
        cells: this.columns.map((c) => ({ key: c.key, text: c.show(row[c.key]) })),
        idle: row.loaded === false,
        ...freshness(row),
      }));
      const unreachable = res.headers.get("X-Folio-Unreachable");
      this.error = unreachable ? `No answer from gateway ${unreachable}: its topics show their stored figures.` : "";
      this.loaded = true;
    },
    async refreshNames() {
      const q = new URLSearchParams({ search: this.search, offset: String(this.offset), limit: String(this.limit) });
      try {
        const { body, res } = await api(`${this.spec.path}?${q}`, { withResponse: true });
        let list = Array.isArray(body) ? body : [];
        const header = res.headers.get("X-Total-Count");
        if (header !== null) {
          this.total = Number(header);
        } else {
          const needle = this.search.trim().toLowerCase();
          if (needle) list = list.filter((x) => String(x).toLowerCase().includes(needle));
          this.total = list.length;
          list = list.slice(this.offset, this.offset + this.limit);
        }
        this.items = list.map((x) => ({ ...this.spec.item(x), cells: [] }));
        this.error = "";
        if (kind === "topics") await this.refreshPartitioned();
      } catch (e) {
        this.items = [];
        this.error = explain(e, "The list");
      } finally {
        this.loaded = true;
      }
    },
    async refreshPartitioned() {
      const { d } = this;
      const names = await api(`/admin/v2/persistent/${enc(d.tenant)}/${enc(d.namespace)}/partitioned`);
      this.partitioned = (Array.isArray(names) ? names : []).map((n) => ({
        name: n, label: lastPart(n), href: pageHref.topic(d.tenant, d.namespace, lastPart(n)),
      }));
    },
    removePartitioned(p) {
      const { d } = this;
      return this.remove({ name: p.label }, {
        path: `/admin/v2/persistent/${enc(d.tenant)}/${enc(d.namespace)}/${enc(p.label)}/partitions?force=true`,
        question: `Delete partitioned topic ${p.label} and all its partitions? Their messages and subscriptions are lost.`,
      });
    },
    async remove(item, how) {
      const { path, question } = how || this.spec.remove(item);
      if (!(await confirmDialog(question))) return;
      try {
        await api(path, { method: "DELETE" });
        this.resultOk = true;
        this.result = `Deleted ${item.name}.`;
      } catch (e) {
        this.resultOk = false;
        this.result = `Could not delete ${item.name}: ${e.message}`;
      }
      await this.refresh();
    },
  };
}

// Create a namespace (in a tenant page) or a topic (in a namespace page).
export function createForm(kind) {
  return {
    name: "",
    partitions: 0,
    busy: false,
    ok: false,
    result: "",
    link: "",
    async submit() {
      const d = this.$el.closest("main").dataset;
      const name = this.name.trim();
      if (!name) return;
      this.busy = true;
      this.link = "";
      try {
        if (kind === "namespace") {
          await api(`/admin/v2/namespaces/${enc(d.tenant)}/${enc(name)}`, { method: "PUT" });
          this.result = `Created namespace ${d.tenant}/${name}.`;
          this.link = pageHref.topics(d.tenant, name);
        } else {
          const base = `/admin/v2/persistent/${enc(d.tenant)}/${enc(d.namespace)}/${enc(name)}`;
          const n = Number(this.partitions) || 0;
          if (n > 0) await api(`${base}/partitions`, { method: "PUT", json: n });
          else await api(base, { method: "PUT" });
          this.result = n > 0 ? `Created topic ${name} with ${n} partitions.` : `Created topic ${name}.`;
          this.link = pageHref.topic(d.tenant, d.namespace, name);
        }
        this.ok = true;
        this.name = "";
        this.$dispatch("refresh-list");
      } catch (e) {
        this.ok = false;
        this.result = `Could not create ${kind} ${name}: ${e.message}`;
      } finally {
        this.busy = false;
      }
    },
  };
}
