// Tenants / namespaces / topics lists with search and paging. The server pages
// (?search=&offset=&limit=, total in X-Total-Count); a gateway that answers the
// whole list instead (no header) is filtered and paged here.
import { api, enc, explain, poll } from "./core.js";
import { pageHref } from "./paths.js";

const LIMIT = 20;

function lastPart(name) {
  const s = String(name);
  return s.slice(s.lastIndexOf("/") + 1);
}

const KINDS = {
  tenants: (d) => ({
    path: "/admin/v2/tenants",
    item: (t) => ({ name: t, label: t, href: pageHref.namespaces(t) }),
  }),
  namespaces: (d) => ({
    path: `/admin/v2/namespaces/${enc(d.tenant)}`,
    item: (n) => ({ name: n, label: lastPart(n), href: pageHref.topics(d.tenant, lastPart(n)) }),
  }),
  topics: (d) => ({
    path: `/admin/v2/persistent/${enc(d.tenant)}/${enc(d.namespace)}`,
    item: (t) => {
      const local = lastPart(t);
      const part = /-partition-(\d+)$/.exec(local);
      return {
        name: t, label: local, badge: part ? "partition" : "",
        href: pageHref.topic(d.tenant, d.namespace, local),
      };
    },
  }),
};

export function listView(kind) {
  return {
    search: "",
    offset: 0,
    limit: LIMIT,
    total: 0,
    items: [],
    partitioned: [],
    loaded: false,
    error: "",
    init() {
      this.spec = KINDS[kind](this.$el.dataset);
      this.$watch("search", () => this.refresh());
      this.$el.addEventListener("refresh-list", () => this.refresh());
      poll(() => this.refresh(), 5000);
    },
    countText() {
      if (!this.loaded) return "Loading…";
      if (!this.total) return "0 items";
      return `${this.offset + 1}–${Math.min(this.offset + this.limit, this.total)} of ${this.total}`;
    },
    page(dir) {
      this.offset = Math.max(0, this.offset + dir * this.limit);
      this.refresh();
    },
    async refresh() {
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
        this.items = list.map(this.spec.item);
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
      const d = this.$el.dataset;
      const names = await api(`/admin/v2/persistent/${enc(d.tenant)}/${enc(d.namespace)}/partitioned`);
      this.partitioned = (Array.isArray(names) ? names : []).map((n) => ({
        name: n, label: lastPart(n), href: pageHref.topic(d.tenant, d.namespace, lastPart(n)),
      }));
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
