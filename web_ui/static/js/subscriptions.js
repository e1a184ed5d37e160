// Subscriptions across topics (GET /admin/v2/cluster/subscriptions?tenant=&namespace=
// &sort=&order=&search=&offset=&limit=): backlog, lag in time (age of the oldest
// unacknowledged message, from the log), unacked, rate, consumers and which one is
// active; sortable (backlog first), each deletable after a confirmation. The filter
// is kept in the URL (?tenant=&namespace=) so a namespace page can link here.
import { api, confirmDialog, enc, explain, fmt, poll } from "./core.js";
import { freshness } from "./lists.js";
import { pageHref } from "./paths.js";

const LIMIT = 50;

const COLUMNS = [
  { key: "topic", label: "Topic" },
  { key: "name", label: "Subscription" },
  { key: "type", label: "Type" },
  { key: "msgBacklog", label: "Backlog", num: true },
  { key: "lagMs", label: "Lag (time)", num: true },
  { key: "unackedMessages", label: "Unacked", num: true },
  { key: "msgRateOut", label: "Out msg/s", num: true },
  { key: "consumers", label: "Consumers", num: true },
];

// "3 s", "4 min 10 s", "2 h 5 min", "1 d 3 h"
export function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  let s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (d) return `${d} d ${h} h`;
  if (h) return `${h} h ${m} min`;
  return `${m} min ${s} s`;
}

function topicParts(topic) {
  const m = /^persistent:\/\/([^/]+)\/([^/]+)\/(.+)$/.exec(topic);
  return m ? { tenant: m[1], namespace: m[2], local: m[3] } : null;
}

function row(r) {
  const p = topicParts(r.topic);
  return {
    key: `${r.topic}|${r.name}`,
    name: r.name,
    topic: r.topic,
    topicLabel: p ? `${p.tenant}/${p.namespace}/${p.local}` : r.topic,
    href: p ? pageHref.topic(p.tenant, p.namespace, p.local) : "#",
    deletePath: p ? `/admin/v2/persistent/${enc(p.tenant)}/${enc(p.namespace)}/${enc(p.local)}/subscription/${enc(r.name)}` : "",
    tenant: p ? p.tenant : "",
    namespace: p ? p.namespace : "",
    local: p ? p.local : "",
    reader: r.durable === false,
    type: r.type || "–",
    backlog: fmt.num(r.msgBacklog),
    lag: r.msgBacklog === 0 ? "0 s" : duration(r.lagMs),
    lagTitle: r.oldestUnackedPublishTime ? `oldest unacknowledged message published ${fmt.time(r.oldestUnackedPublishTime)}` : "",
    unacked: fmt.num(r.unackedMessages),
    rateOut: fmt.rate(r.msgRateOut),
    consumers: fmt.num(r.consumers),
    active: r.type === "Failover" ? r.activeConsumerName || "none" : "",
    ...freshness(r),
  };
}

export function subscriptionsPage() {
  return {
    columns: COLUMNS,
    rows: [],
    tenant: "",
    namespace: "",
    search: "",
    offset: 0,
    limit: LIMIT,
    total: 0,
    sort: "msgBacklog",
    desc: true,
    loaded: false,
    error: "",
    result: "",
    resultOk: true,
    init() {
      const q = new URLSearchParams(location.search);
      this.tenant = q.get("tenant") || "";
      this.namespace = q.get("namespace") || "";
      this.$watch("search", () => this.refresh());
      poll(() => this.refresh(), 5000);
    },
    apply() {
      const q = new URLSearchParams();
      if (this.tenant.trim()) q.set("tenant", this.tenant.trim());
      if (this.namespace.trim()) q.set("namespace", this.namespace.trim());
      history.replaceState(null, "", `${pageHref.subscriptions()}${q.size ? `?${q}` : ""}`);
      this.offset = 0;
      return this.refresh();
    },
    countText() {
      if (!this.loaded) return "Loading…";
      if (!this.total) return "0 subscriptions";
      return `${this.offset + 1}–${Math.min(this.offset + this.limit, this.total)} of ${this.total}`;
    },
    page(dir) {
      this.offset = Math.max(0, this.offset + dir * this.limit);
      this.refresh();
    },
    sortBy(key) {
      if (this.sort === key) this.desc = !this.desc;
      else { this.sort = key; this.desc = !["topic", "name", "type"].includes(key); }
      this.offset = 0;
      this.refresh();
    },
    arrow(key) { return this.sort === key ? (this.desc ? " ▼" : " ▲") : ""; },
    sortState(key) { return this.sort === key ? (this.desc ? "descending" : "ascending") : "none"; },
    async refresh() {
      const q = new URLSearchParams({ sort: this.sort, order: this.desc ? "desc" : "asc",
        search: this.search, offset: String(this.offset), limit: String(this.limit) });
      if (this.tenant.trim()) q.set("tenant", this.tenant.trim());
      if (this.tenant.trim() && this.namespace.trim()) q.set("namespace", this.namespace.trim());
      try {
        const { body, res } = await api(`/admin/v2/cluster/subscriptions?${q}`, { withResponse: true });
        this.rows = (Array.isArray(body) ? body : []).map(row);
        this.total = Number(res.headers.get("X-Total-Count") ?? this.rows.length);
        const unreachable = res.headers.get("X-Folio-Unreachable");
        const truncated = res.headers.get("X-Folio-Truncated");
        this.error = [
          unreachable ? `No answer from gateway ${unreachable}: its topics' subscriptions show their stored figures.` : "",
          truncated ? `Gateway ${truncated} has more subscriptions than one answer holds: filter by tenant or namespace.` : "",
        ].filter(Boolean).join(" ");
      } catch (e) {
        this.rows = [];
        this.error = explain(e, "The subscriptions view");
      } finally {
        this.loaded = true;
      }
    },
    // DELETE a subscription needs consume on its namespace or topic (gateway/security/rules.py)
    mayDelete(r) {
      return this.$store.auth.can("consume", r.tenant, r.namespace, r.local);
    },
    async remove(r) {
      if (!(await confirmDialog(`Delete subscription ${r.name} of ${r.topicLabel}? Its cursor is lost.`))) return;
      try {
        await api(r.deletePath, { method: "DELETE" });
        this.resultOk = true;
        this.result = `Deleted subscription ${r.name} of ${r.topicLabel}.`;
      } catch (e) {
        this.resultOk = false;
        this.result = `Could not delete ${r.name}: ${e.message}`;
      }
      await this.refresh();
    },
  };
}
