// Overview page: problems first, totals, throughput chart, gateways, etcd members
// and storage nodes, from GET /admin/v2/cluster/overview every 2 s. The throughput
// chart draws the history the gateways keep (GET /admin/v2/cluster/throughput, every
// gateway's samples added up), so a reload shows the past hours at once; without
// that route (an older gateway) it charts what this page samples while open.
// Storage nodes can be decommissioned from their row (docs/membership.md): the row
// shows the drain's progress from GET /admin/v2/storage/decommissions.
import { api, confirmDialog, enc, explain, fmt, pick, poll } from "./core.js";
import { Samples, TimeChart } from "./charts.js";
import { conn } from "./conn.js";

const SEVERITY = { critical: 0, error: 1, warning: 2, warn: 2, info: 3 };

function problems(list) {
  return (Array.isArray(list) ? list : []).map((p, i) => {
    if (typeof p === "string") return { key: `${i}:${p}`, severity: "warning", kind: "", message: p };
    const kind = pick(p, "kind", "type", "code") || "";
    const subject = pick(p, "target", "subject", "node", "topic");
    const text = pick(p, "message", "detail", "text", "reason") || "";
    const message = subject !== undefined && !String(text).includes(String(subject)) ? `${subject}: ${text}` : text;
    return { key: `${i}:${kind}:${message}`, severity: String(pick(p, "severity", "level") || "warning").toLowerCase(), kind, message };
  }).sort((a, b) => (SEVERITY[a.severity] ?? 2) - (SEVERITY[b.severity] ?? 2));
}

function nodeRow(n) {
  const used = Number(pick(n, "diskUsedBytes", "usedBytes", "disk.usedBytes", "disk.used", "diskUsed"));
  let total = Number(pick(n, "diskTotalBytes", "totalBytes", "disk.totalBytes", "disk.total", "diskTotal"));
  const free = Number(pick(n, "diskFreeBytes", "freeBytes", "disk.freeBytes", "disk.free"));
  if (!total && used >= 0 && free >= 0) total = used + free;
  const usedBytes = used >= 0 ? used : total - free;
  const pct = total > 0 ? Math.min(100, Math.round((usedBytes / total) * 100)) : 0;
  let st = String(pick(n, "state", "status") || "unknown").toLowerCase().replace(/[_ ]/g, "-");
  if (st === "readonly") st = "read-only";
  return {
    id: pick(n, "id", "nodeId", "address") || "?",
    state: st,
    diskPct: pct,
    diskClass: pct >= 95 ? "full" : pct >= 80 ? "high" : "",
    diskText: total > 0 ? `${fmt.bytes(usedBytes)} of ${fmt.bytes(total)} (${pct}%)` : "disk unknown",
    ledgers: fmt.num(pick(n, "ledgers", "ledgerCount", "ledgersCount", "numLedgers")),
  };
}

// "draining: 3/7 ledgers, 1.2 MB of 3.4 MB" for a node's decommission record (or "").
function drainText(d) {
  if (!d) return "";
  const ledgers = `${fmt.num(d.ledgersDone)}/${fmt.num(d.ledgersTotal)} ledgers`;
  const bytes = `${fmt.bytes(d.bytesDone)} of ${fmt.bytes(d.bytesTotal)}`;
  if (d.state === "left") return "left: its data dir may be deleted";
  return `${d.state}: ${ledgers}, ${bytes}`;
}

function gatewayRow(g) {
  const url = pick(g, "httpUrl", "url") || "";
  return {
    id: pick(g, "id", "gatewayId") || url,
    httpUrl: url,
    ok: !["gone", "down", "dead"].includes(String(pick(g, "state", "status") || "").toLowerCase()),
    self: pick(g, "self") ?? (url && new URL(url, location.href).origin === location.origin),
    topics: fmt.num(pick(g, "topics", "topicCount", "load.topics")),
    sessions: fmt.num(pick(g, "sessions", "load.sessions")),
    rate: fmt.rate(pick(g, "msgRateIn", "publishRate", "load.publishRate", "load.msgRateIn")),
    cpu: pick(g, "cpu") === undefined ? "–" : `${Math.round(100 * Number(pick(g, "cpu")))}%`,
    memory: pick(g, "rssBytes") ? fmt.bytes(pick(g, "rssBytes")) : "–",
    version: pick(g, "version") || "–",
    uptime: pick(g, "startedMs") ? fmt.ago(pick(g, "startedMs")).replace(" ago", "") : "–",
    started: pick(g, "startedMs") ? `started ${fmt.time(pick(g, "startedMs"))}` : "",
  };
}

function etcdRow(m) {
  const urls = pick(m, "clientURLs", "clientUrls", "endpoint", "endpoints", "peerURLs") || "";
  const leader = pick(m, "isLeader", "leader");
  return {
    name: String(pick(m, "name", "id") || "etcd"),
    endpoint: Array.isArray(urls) ? urls.join(", ") : String(urls),
    role: leader === true ? "leader" : leader === false ? "follower" : String(pick(m, "role") || "member"),
    healthy: pick(m, "healthy", "alive") !== false,
  };
}

export function overviewPage() {
  return {
    loaded: false,
    unavailable: "",
    problems: [],
    tiles: [],
    figuresNote: "",
    gateways: [],
    nodes: [],
    drains: {},
    nodeError: "",
    etcd: [],
    etcdAt: 0,
    historySource: "",
    historyPoints: 0,
    historyText: "",
    init() {
      this.chart = new TimeChart(this.$refs.chart, [
        { label: "in msg/s", color: "--chart-in" }, { label: "out msg/s", color: "--chart-out" }]);
      this.samples = new Samples(["in", "out"]);
      this.serverHistory = true;
      poll(() => this.refreshHistory(), 5000);
      poll(() => this.refresh(), 2000);
    },
    async refreshHistory() {
      if (!this.serverHistory) return;
      let h;
      try {
        h = await api("/admin/v2/cluster/throughput");
      } catch (e) {
        this.serverHistory = false; // sampled by this page from now on (refresh)
        this.historySource = "page";
        this.historyText = "sampled every 2 s while this page is open";
        return;
      }
      const samples = Array.isArray(h?.samples) ? h.samples : [];
      this.historySource = "server";
      this.historyPoints = samples.length;
      const span = samples.length ? (Date.now() - samples[0].t) / 1000 : 0;
      const since = span >= 5400 ? `${Math.round(span / 3600)} h` : span >= 90 ? `${Math.round(span / 60)} min` : `${Math.round(span)} s`;
      this.historyText = `kept by the gateways, every 5 s: the last ${since}`;
      this.chart.set(samples.map((s) => s.t), samples.map((s) => s.msgRateIn), samples.map((s) => s.msgRateOut));
    },
    async refreshDrains() {
      let list = [];
      try { list = (await api("/admin/v2/storage/decommissions")) || []; } catch (e) { list = []; }
      this.drains = Object.fromEntries(list.map((d) => [d.nodeId, d]));
      for (const n of this.nodes) n.drain = drainText(this.drains[n.id]);
    },
    async decommission(n) {
      const ok = await confirmDialog(
        `Decommission storage node ${n.id}? It takes no new ledgers, its ledgers are copied to the other nodes, then it stops by itself.`);
      if (!ok) return;
      this.nodeError = "";
      try {
        await api(`/admin/v2/storage/nodes/${enc(n.id)}/decommission`, { method: "POST" });
      } catch (e) {
        this.nodeError = explain(e, `Decommissioning ${n.id}`);
      }
      await this.refreshDrains();
    },
    async refresh() {
      let ov;
      try {
        ov = await api("/admin/v2/cluster/overview");
        this.unavailable = "";
      } catch (e) {
        this.loaded = true;
        this.unavailable = explain(e, "The cluster overview");
        return;
      } finally {
        this.loaded = true;
      }
      const totals = pick(ov, "totals") || {};
      this.problems = problems(pick(ov, "problems"));
      const gws = pick(ov, "gateways", "brokers") || [];
      conn.learn(gws);
      this.gateways = gws.map(gatewayRow);
      this.nodes = (pick(ov, "storageNodes", "nodes", "storage.nodes") || []).map(nodeRow);
      await this.refreshDrains();
      const etcd = pick(ov, "etcd") || {};
      if (Date.now() - this.etcdAt > 10000 || this.etcd.length !== Number(etcd.members ?? this.etcd.length)) {
        this.etcdAt = Date.now();
        try { this.etcd = ((await api("/admin/v2/etcd/members")) || []).map(etcdRow); } catch (e) { this.etcd = []; }
      }
      this.tiles = [
        ["Gateways", fmt.num(this.gateways.length)],
        ["Storage nodes", fmt.num(this.nodes.length)],
        ["Tenants", fmt.num(pick(totals, "tenants"))],
        ["Namespaces", fmt.num(pick(totals, "namespaces"))],
        ["Topics", fmt.num(pick(totals, "topics"))],
        ["In msg/s", fmt.rate(pick(totals, "msgRateIn"))],
        ["Out msg/s", fmt.rate(pick(totals, "msgRateOut"))],
        ["etcd", etcd.healthy === false ? "unhealthy" : `${fmt.num(etcd.members ?? this.etcd.length)} healthy`],
        ["Backlog", fmt.num(pick(totals, "msgBacklog", "backlog"))],
        ["Storage", fmt.bytes(pick(totals, "storageSize"))],
        ["In bytes/s", fmt.bytes(pick(totals, "msgThroughputIn"))],
        ["Out bytes/s", fmt.bytes(pick(totals, "msgThroughputOut"))],
        ["Producers", fmt.num(pick(totals, "producers"))],
        ["Consumers", fmt.num(pick(totals, "consumers"))],
        ["Connections", fmt.num(pick(totals, "connections"))],
      ].map(([label, value]) => ({ label, value }));
      const stored = Number(pick(totals, "storedTopics") ?? 0);
      this.figuresNote = stored
        ? `${fmt.num(stored)} of ${fmt.num(pick(totals, "topics"))} topics are not loaded by any gateway: their backlog, size and subscriptions come from their stored ledger lists and cursors (oldest as of ${fmt.time(pick(totals, "storedAsOfMs"))}); rates count loaded topics only.`
        : "";
      if (!this.serverHistory) {
        this.samples.add(Date.now(), { in: Number(pick(totals, "msgRateIn") ?? 0), out: Number(pick(totals, "msgRateOut") ?? 0) });
        this.chart.set(...this.samples.columns());
      }
    },
  };
}
