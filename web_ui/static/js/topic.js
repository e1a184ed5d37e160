// Topic page: tiles, rate and backlog charts (GET …/stats/history), partitions,
// subscriptions (+ cursor actions), producers, storage, ledgers and cursors
// (GET …/stats or …/partitioned-stats?perPartition=true, …/internalStats), every 2 s.
import { api, confirmDialog, enc, explain, fmt, pick, poll } from "./core.js";
import { isDashboardReader, pageHref } from "./paths.js";
import { Samples, TimeChart } from "./charts.js";

export function topicBase(d) {
  return `/admin/v2/persistent/${enc(d.tenant)}/${enc(d.namespace)}/${enc(d.topic)}`;
}

function ensembleLines(e) {
  const nodes = (v) => (Array.isArray(v) ? v.join(", ") : typeof v === "object" && v ? JSON.stringify(v) : String(v));
  if (!e) return [];
  if (Array.isArray(e)) {
    return e.map((x, i) => {
      if (Array.isArray(x)) return `${i} → ${nodes(x)}`;
      if (x && typeof x === "object") {
        return `${pick(x, "firstEntry", "startEntry", "entry", "fromEntry") ?? i} → ${nodes(pick(x, "nodes", "ensemble", "bookies") ?? [])}`;
      }
      return String(x);
    });
  }
  if (typeof e === "object") return Object.entries(e).map(([k, v]) => `${k} → ${nodes(v)}`);
  return [String(e)];
}

// A cursor position ("ledger:entry", Pulsar's internal-stats form) in words: -1 entries
// mean "before the first" (of the log, or of that ledger).
export function describePosition(pos, kind) {
  const m = /^(-?\d+):(-?\d+)$/.exec(String(pos || ""));
  if (!m) return pos ? String(pos) : "–";
  const [ledger, entry] = [Number(m[1]), Number(m[2])];
  if (kind === "acked") {
    if (ledger < 0) return "nothing acknowledged yet";
    if (entry < 0) return `all before ledger ${ledger}`;
    return `up to ledger ${ledger}, entry ${entry}`;
  }
  if (ledger < 0) return "from the start";
  return `next: ledger ${ledger}, entry ${Math.max(entry, 0)}`;
}

function hookLine(h) {
  if (!h) return "";
  const counts = `${fmt.num(h.acked)} acked · ${fmt.num(h.failures)} failed`;
  return [`→ ${h.url}`, h.state, h.state === "starting" ? "" : counts, h.lastError ? `last error: ${h.lastError}` : ""]
    .filter(Boolean).join(" · ");
}

// Subscriptions and readers as the stats list them, without this dashboard's own
// readers (the live tail's): they are not the user's.
function subRows(subs, hooks) {
  return Object.entries(subs || {}).filter(([name]) => !isDashboardReader(name)).map(([name, s]) => ({
    name,
    webhook: hookLine((hooks || {})[name]),
    type: pick(s, "isDurable") === false ? `${pick(s, "type") || "Exclusive"} · reader` : pick(s, "type") || "–",
    backlog: fmt.num(pick(s, "msgBacklog")),
    backlogN: Number(pick(s, "msgBacklog") ?? 0),
    unacked: fmt.num(pick(s, "unackedMessages")),
    rateOut: fmt.rate(pick(s, "msgRateOut")),
    consumers: (pick(s, "consumers") || []).map((c, i) => ({
      key: `${i}:${pick(c, "consumerName")}`,
      name: pick(c, "consumerName") || `consumer ${i + 1}`,
      // Failover: which consumer receives; Key_Shared: the hash ranges each one owns
      role: pick(s, "type") === "Failover" ? (pick(s, "activeConsumerName") === pick(c, "consumerName") ? "active" : "standby") : "",
      ranges: (pick(c, "keyHashRanges") || []).join(" "),
      detail: [pick(c, "address"), `unacked ${fmt.num(pick(c, "unackedMessages"))}`,
        `permits ${fmt.num(pick(c, "availablePermits"))}`, `${fmt.rate(pick(c, "msgRateOut"))} msg/s`]
        .filter(Boolean).join(" · "),
    })),
  })).sort((a, b) => a.name.localeCompare(b.name));
}

export function topicPage() {
  return {
    partitions: 0,
    whole: false,
    tiles: [],
    subs: [],
    producers: [],
    storageFacts: [],
    ledgers: [],
    cursors: [],
    partitionRows: [],
    statsError: "",
    internalError: "",
    historyNote: "",
    actionSub: "",
    actionResult: "",
    hooks: {},
    hookUrl: "",
    skipN: 1,
    resetTime: "",
    resetPos: "",
    // the role has ``need`` on this topic (gateway/security/rules.py: deleting the topic needs
    // tenant admin, deleting a subscription needs consume); what it may not do is hidden
    may(need) {
      const d = this.d || {};
      return this.$store.auth.can(need, d.tenant, d.namespace, d.topic);
    },
    async init() {
      this.d = this.$el.dataset;
      this.base = topicBase(this.d);
      this.whole = Number(this.d.partition) < 0;
      this.rates = new TimeChart(this.$refs.rates, [
        { label: "in msg/s", color: "--chart-in" }, { label: "out msg/s", color: "--chart-out" }]);
      this.backlog = new TimeChart(this.$refs.backlog, [{ label: "backlog", color: "--chart-backlog" }]);
      this.samples = new Samples(["in", "out", "backlog"]);
      if (Number(this.d.partition) < 0) {
        try { this.partitions = Number((await api(`${this.base}/partitions`))?.partitions) || 0; } catch (e) { /* shown by stats */ }
      }
      this.$store.topic.partitions = this.partitions;
      window.dispatchEvent(new CustomEvent("topic-ready"));
      poll(() => this.refresh(), 2000);
    },
    async refresh() {
      await Promise.all([this.refreshStats(), this.partitions ? null : this.refreshInternal()]);
      await this.refreshHistory();
    },
    async refreshStats() {
      let st;
      try {
        st = this.partitions
          ? await api(`${this.base}/partitioned-stats?perPartition=true`)
          : await api(`${this.base}/stats`);
        this.statsError = "";
      } catch (e) {
        this.statsError = explain(e, "Topic stats");
        return;
      }
      this.stats = st;
      let hooks = {};
      if (!this.partitions) {
        try { hooks = await api(`${this.base}/webhooks`); } catch (e) { /* an older gateway: no webhooks */ }
      }
      this.hooks = hooks || {};
      this.subs = subRows(pick(st, "subscriptions"), this.hooks);
      this.$store.topic.subNames = this.subs.map((s) => s.name);
      const backlog = this.subs.reduce((n, s) => n + s.backlogN, 0);
      this.producers = (pick(st, "publishers") || []).map((p, i) => ({
        key: `${i}:${pick(p, "producerName")}`,
        name: pick(p, "producerName") || "–",
        rate: fmt.rate(pick(p, "msgRateIn")),
        bytes: fmt.bytes(pick(p, "msgThroughputIn")),
        address: pick(p, "address") || "–",
        since: fmt.time(pick(p, "connectedSince")),
      }));
      this.tiles = [
        ["In msg/s", fmt.rate(pick(st, "msgRateIn"))],
        ["Out msg/s", fmt.rate(pick(st, "msgRateOut"))],
        ["In bytes/s", fmt.bytes(pick(st, "msgThroughputIn"))],
        ["Out bytes/s", fmt.bytes(pick(st, "msgThroughputOut"))],
        ["Backlog (msgs)", fmt.num(backlog)],
        ["Storage", fmt.bytes(pick(st, "storageSize"))],
        ["Producers", fmt.num(this.producers.length)],
        ["Subscriptions", fmt.num(this.subs.length)],
      ].map(([label, value]) => ({ label, value }));
      this.samples.add(Date.now(), {
        in: Number(pick(st, "msgRateIn") ?? 0), out: Number(pick(st, "msgRateOut") ?? 0), backlog,
      });
      const parts = pick(st, "partitions");
      if (parts && typeof parts === "object") {
        this.partitionRows = Object.entries(parts).map(([name, p]) => {
          const local = name.slice(name.lastIndexOf("/") + 1);
          const pb = Object.entries(pick(p, "subscriptions") || {}).filter(([n]) => !isDashboardReader(n))
            .reduce((n, [, s]) => n + Number(s.msgBacklog || 0), 0);
          return {
            name: local,
            href: pageHref.topic(this.d.tenant, this.d.namespace, local),
            rateIn: fmt.rate(pick(p, "msgRateIn")), rateOut: fmt.rate(pick(p, "msgRateOut")),
            storage: fmt.bytes(pick(p, "storageSize")), backlog: fmt.num(pb),
          };
        }).sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true }));
      }
      this.facts();
    },
    async refreshInternal() {
      try {
        this.internal = await api(`${this.base}/internalStats`);
        this.internalError = "";
      } catch (e) {
        this.internalError = explain(e, "Internal stats (ledgers and cursors)");
        return;
      }
      const it = this.internal;
      this.ledgers = (pick(it, "ledgers") || []).map((l) => {
        const state = String(pick(l, "state") || "–");
        return {
          id: pick(l, "ledgerId"), entries: fmt.num(pick(l, "entries")), size: fmt.bytes(pick(l, "size")),
          state, stateClass: state.toLowerCase(), ensembles: ensembleLines(pick(l, "ensembles")),
        };
      });
      this.cursors = Object.entries(pick(it, "cursors") || {}).map(([name, c]) => {
        const markDelete = pick(c, "markDeletePosition") || "";
        const read = pick(c, "readPosition") || "";
        const holes = pick(c, "individuallyDeletedMessages") || "[]";
        return {
          name, markDelete, read, holes,
          markDeleteText: describePosition(markDelete, "acked"),
          readText: describePosition(read, "read"),
          holesText: holes === "[]" ? "none" : holes,
        };
      });
      this.facts();
    },
    facts() {
      const st = this.stats || {};
      const it = this.internal || {};
      this.storageFacts = [
        ["Storage size", fmt.bytes(pick(st, "storageSize", "totalSize") ?? pick(it, "totalSize"))],
        ["Entries", fmt.num(pick(it, "numberOfEntries"))],
        ["Ledgers", fmt.num((pick(it, "ledgers") || []).length || undefined)],
        ["Last confirmed entry", pick(it, "lastConfirmedEntry") || "–"],
        ["Messages in (total)", fmt.num(pick(st, "msgInCounter"))],
        ["Average message size", fmt.bytes(pick(st, "averageMsgSize"))],
        ["Backlog size", fmt.bytes(pick(st, "backlogSize"))],
        ["Log state", pick(it, "state") || "–"],
      ];
    },
    async refreshHistory() {
      let h = null;
      try {
        h = await api(`${this.base}/stats/history`);
      } catch (e) {
        this.historyNote = `${explain(e, "Rate history")} Charting what this page samples instead.`;
      }
      const samples = pick(h, "samples");
      if (Array.isArray(samples) && samples.length) {
        this.historyNote = "";
        const t = samples.map((s) => s.t);
        this.rates.set(t, samples.map((s) => s.msgRateIn ?? null), samples.map((s) => s.msgRateOut ?? null));
        this.backlog.set(t, samples.map((s) => s.msgBacklog ?? null));
      } else {
        const [t, vin, vout, vb] = this.samples.columns();
        this.rates.set(t, vin, vout);
        this.backlog.set(t, vb);
      }
    },
    // --- subscription actions
    openActions(name) {
      this.actionSub = name;
      this.actionResult = "";
      this.hookUrl = this.hooks[name]?.url || "";
    },
    get actionHook() {
      return this.hooks[this.actionSub] || null;
    },
    pushTo() {
      const url = this.hookUrl.trim();
      if (!/^https?:\/\/\S+$/.test(url)) { this.actionResult = "The URL must start with http:// or https://."; return null; }
      return this.act(`Push the messages of subscription ${this.actionSub} to ${url}? Each 2xx answer acknowledges them.`,
        "/webhook", { method: "PUT", json: { url } }, `Subscription ${this.actionSub} now pushes to ${url}.`);
    },
    // Removing a webhook leaves its subscription with no consumer: it keeps building a
    // backlog (and holding the log) until deleted. Say so, and offer to delete it too.
    async stopPushing() {
      const sub = this.actionSub;
      const row = this.subs.find((s) => s.name === sub);
      const backlog = row ? ` (${row.backlog} messages now)` : "";
      await this.act(`Stop pushing subscription ${sub}? The subscription stays and keeps building a backlog${backlog} ` +
        "while nobody consumes it; its messages are kept for it.", "/webhook",
      { method: "DELETE" }, `Subscription ${sub} no longer pushes: it keeps building a backlog until a consumer reads it or it is deleted.`);
      if (this.hooks[sub]) return; // not removed (cancelled or failed)
      this.actionSub = sub;
      const done = this.actionResult;
      await this.act(`Delete subscription ${sub} too? Its backlog is dropped and its messages are no longer kept for it.`, "",
        { method: "DELETE" }, `Deleted subscription ${sub}.`);
      if (this.actionSub === sub) this.actionResult = done; // kept: say what happened to the webhook
    },
    hourAgoInput() { return this.localInput(Date.now() - 3600e3); },
    localInput(ms) {
      const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
      return d.toISOString().slice(0, 19);
    },
    async act(question, path, init, done) {
      if (!(await confirmDialog(question))) return;
      try {
        await api(`${this.base}/subscription/${enc(this.actionSub)}${path}`, init);
        this.actionResult = done;
        if (init.method === "DELETE" && !path) this.actionSub = "";
      } catch (e) {
        this.actionResult = `Failed: ${e.message}`;
      }
      await this.refresh();
    },
    skip() {
      const n = Math.max(1, Number(this.skipN) || 1);
      return this.act(`Skip ${n} messages of subscription ${this.actionSub}? They will not be delivered.`,
        `/skip/${n}`, { method: "POST" }, `Skipped ${n} messages on ${this.actionSub}.`);
    },
    clearBacklog() {
      return this.act(`Clear the whole backlog of subscription ${this.actionSub}?`, "/skip_all",
        { method: "POST" }, `Cleared the backlog of ${this.actionSub}.`);
    },
    resetByTime() {
      const ms = this.resetTime ? new Date(this.resetTime).getTime() : NaN;
      if (Number.isNaN(ms)) { this.actionResult = "Pick a time first."; return null; }
      return this.act(`Reset subscription ${this.actionSub} to ${new Date(ms).toLocaleString()}?`,
        `/resetcursor/${Math.max(0, ms)}`, { method: "POST" }, `Reset ${this.actionSub} to ${new Date(ms).toLocaleString()}.`);
    },
    resetToPosition() {
      const m = /^\s*(\d+)\s*:\s*(-?\d+)\s*$/.exec(this.resetPos);
      if (!m) { this.actionResult = "Position must be ledgerId:entryId, e.g. 12:0."; return null; }
      const body = { ledgerId: Number(m[1]), entryId: Number(m[2]) };
      return this.act(`Reset subscription ${this.actionSub} to ${m[1]}:${m[2]}?`, "/resetcursor",
        { method: "POST", json: body }, `Reset ${this.actionSub} to ${m[1]}:${m[2]}.`);
    },
    async deleteTopic() {
      const d = this.d;
      const what = this.partitions ? `partitioned topic ${d.topic} and its ${this.partitions} partitions` : `topic ${d.topic}`;
      if (!(await confirmDialog(`Delete ${what}? Its messages and subscriptions are lost.`))) return;
      try {
        await api(`${this.base}${this.partitions ? "/partitions" : ""}?force=true`, { method: "DELETE" });
        location.assign(pageHref.topics(d.tenant, d.namespace));
      } catch (e) {
        this.statsError = `Could not delete ${what}: ${e.message}`;
      }
    },
    deleteSub() {
      return this.act(`Delete subscription ${this.actionSub}? Its cursor is lost.`, "", { method: "DELETE" },
        `Deleted subscription ${this.actionSub}.`);
    },
  };
}
