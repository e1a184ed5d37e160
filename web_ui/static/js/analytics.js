// The Spark statistics: a topic's section (charts, top keys, producers, lag,
// subscriptions' lag, Key_Shared prediction, "Run now" with a progress bar), the
// overview's analytics card, and shared run helpers. Data: /admin/v2/analytics/….
import { api, enc, explain, fmt, poll } from "./core.js";
import { TimeChart } from "./charts.js";

const RUN = "/admin/v2/analytics/run";
const BANDS = { planning: [2, 5], reading: [5, 90], writing: [90, 100], done: [100, 100] };
const UNITS = { reading: "entries", writing: "topics" };

export function runView(r) {
  if (!r) return { text: "", pct: 0, running: false };
  const p = r.progress || {};
  const running = r.state === "running" || r.queued;
  // one bar over the whole run: planning, then reading (entries of the finished Spark tasks), then writing
  const [low, high] = BANDS[p.phase] || [2, 2];
  const pct = r.state === "running" ? Math.round(low + ((high - low) * (p.total ? p.done / p.total : 0))) : 0;
  let text = "";
  if (r.state === "running") text = `run ${r.runId} ${p.phase || "starting"}${p.total ? ` ${p.done}/${p.total} ${UNITS[p.phase] || ""}` : ""}`;
  else if (r.queued) text = r.leader ? "run requested: waiting for the analytics service" : "run requested: no analytics service is running";
  else if (r.error) text = `last run failed: ${r.error}`;
  else if (r.last && r.last.finishedMs) text = `last run ${fmt.time(r.last.finishedMs)} · ${fmt.num(r.last.messagesRead)} messages read in ${fmt.rate(r.last.durationMs / 1000)} s`;
  if (r.queued && r.state === "running") text += " · another run queued";
  return { text, pct, running };
}

function bars(pairs, label) {
  const max = Math.max(1, ...pairs.map((p) => p[1]));
  return pairs.map(([k, n]) => ({ key: String(k), label: label(k), n, width: `${Math.max(1, (100 * n) / max)}%` }));
}

function ms(v) {
  if (v === null || v === undefined) return "–";
  if (v < 1000) return `${fmt.num(v)} ms`;
  if (v < 120e3) return `${fmt.rate(v / 1000)} s`;
  if (v < 7200e3) return `${fmt.rate(v / 60e3)} min`;
  return `${fmt.rate(v / 3600e3)} h`;
}

export const duration = ms;

// "Nov 27, 14:03" (fits a tile; the full time is its title), or just "14:03" today
function shortTime(v) {
  if (v === undefined || v === null) return "–";
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) return String(v);
  const time = d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", hour12: false });
  if (d.toDateString() === new Date().toDateString()) return time;
  return `${d.toLocaleDateString(undefined, { month: "short", day: "numeric" })}, ${time}`;
}

export function sparkStats() {
  return {
    has: false,
    missing: "",
    error: "",
    run: { text: "", pct: 0, running: false },
    atMs: 0,
    computedText() { return `computed ${new Date(this.atMs).toLocaleString(undefined, { hour12: false })}`; },
    tiles: [],
    sizeBars: [],
    lagBars: [],
    keys: [],
    producers: [],
    lag: [],
    subs: [],
    keyShared: [],
    warnings: [],
    fields: [],
    fieldsNote: "",
    historyNote: "",
    init() {
      const d = this.$el.closest("[data-tenant]").dataset;
      this.path = `/admin/v2/analytics/topics/persistent/${enc(d.tenant)}/${enc(d.namespace)}/${enc(d.topic)}`;
      this.chart = new TimeChart(this.$refs.history, [{ label: "msg/min", color: "--chart-in" }], 180, 3600);
      this.stop = poll(() => this.refresh(), 700);
    },
    destroy() { this.stop(); },
    async refresh() {
      try {
        const record = await api(RUN);
        const wasRunning = this.run.running;
        this.run = runView(record);
        if (!this.has || wasRunning !== this.run.running || (record.last && record.last.finishedMs > this.atMs)) await this.load();
      } catch (e) {
        this.error = explain(e, "Analytics");
      }
    },
    async load() {
      try {
        const got = await api(this.path);
        if (!got.results) {
          this.missing = "No statistics for this topic yet: run them now, or wait for the schedule.";
          return;
        }
        this.show(got);
        this.has = true;
        this.missing = "";
      } catch (e) {
        this.error = explain(e, "Analytics");
      }
    },
    show(got) {
      const r = got.results;
      this.atMs = got.atMs;
      const sz = r.sizes || {};
      this.tiles = [
        ["Messages", fmt.num(r.messages)], ["Bytes", fmt.bytes(r.bytes)],
        ["Distinct keys ≈", fmt.num(r.distinctKeys)], ["Size p50", fmt.bytes(sz.p50)],
        ["Size p99", fmt.bytes(sz.p99)], ["Size max", fmt.bytes(sz.max)],
        ["Msg/min, last hour", fmt.rate(r.recentRatePerMinute)], ["First message", shortTime(r.firstPublishMs)],
      ].map(([label, value]) => ({ label, value, title: label === "First message" ? fmt.time(r.firstPublishMs) : "" }));
      this.chart.set(r.ratePerMinute.map((p) => p[0]), r.ratePerMinute.map((p) => p[1]));
      const minutes = r.ratePerMinute.length;
      this.historyNote = minutes < 10
        ? `${minutes} minute${minutes === 1 ? "" : "s"} with messages so far: the chart (at least an hour wide) fills in as the topic ages.`
        : "";
      this.sizeBars = bars((sz.histogram || []), (k) => `≥ ${fmt.bytes(k)}`);
      this.lagBars = bars(((r.lag || {}).histogram || []), (k) => `≥ ${ms(k)}`);
      this.keys = (r.topKeys || []).map((k) => ({ ...k, pct: `${(100 * k.share).toFixed(1)}%`, width: `${Math.max(1, 100 * k.share)}%` }));
      this.producers = (r.producers || []).map((p) => ({ ...p, pct: r.messages ? `${((100 * p.messages) / r.messages).toFixed(1)}%` : "" }));
      const lag = r.lag || {};
      this.lag = lag.count ? [["p50", ms(lag.p50)], ["p90", ms(lag.p90)], ["p99", ms(lag.p99)], ["max", ms(lag.max)],
        ["with event time", fmt.num(lag.count)], ["event after publish", fmt.num(lag.negative)]] : [];
      this.subs = Object.entries(r.subscriptions || {}).map(([name, s]) => ({
        name, type: s.type || "–", backlog: fmt.num(s.backlog), bytes: fmt.bytes(s.backlogBytes), age: ms(s.ageMs),
        rate: s.consumeRate === null ? "–" : fmt.rate(s.consumeRate),
        drain: s.drainSeconds === null ? "never at this rate" : ms(s.drainSeconds * 1000),
        active: s.activeConsumer || "",
      }));
      this.keyShared = Object.entries(r.keyShared || {}).map(([sub, rows]) => ({
        sub, rows: rows.map((c) => ({ ...c, pct: `${(100 * c.share).toFixed(1)}%` })) }));
      this.warnings = r.warnings || [];
      const fp = r.fields;
      const shown = (v) => (v === null || v === undefined ? "–" : String(v));
      this.fields = fp ? fp.fields.map((f) => ({
        path: f.path, kind: f.kind, nulls: `${(100 * f.nullFraction).toFixed(1)}%`,
        distinct: f.distinct === null ? "–" : fmt.num(f.distinct), min: shown(f.min), max: shown(f.max),
      })) : [];
      this.fieldsNote = fp ? `${fmt.num(fp.messages)} payloads read with the topic's schema${fp.undecoded ? `, ${fmt.num(fp.undecoded)} did not decode` : ""}` : "";
    },
    async runNow() {
      try {
        this.run = runView(await api(RUN, { method: "POST" }));
      } catch (e) {
        this.error = explain(e, "Run now");
      }
    },
  };
}

export function analyticsCard() {
  return {
    run: { text: "", pct: 0, running: false },
    summary: null,
    error: "",
    hottest: [], largest: [], skewed: [], behind: [],
    init() { this.stop = poll(() => this.refresh(), 2000); },
    destroy() { this.stop(); },
    async refresh() {
      try {
        const got = await api("/admin/v2/analytics/summary");
        this.run = runView(got.run);
        const s = got.summary;
        this.summary = s;
        if (!s) return;
        const link = (t) => `/ui/topics/${t.replace("://", "/").split("/").map(enc).join("/")}`;
        this.hottest = s.hottest.map((t) => ({ topic: t.topic, href: link(t.topic), value: `${fmt.rate(t.recentRatePerMinute)} msg/min` }));
        this.largest = s.largest.map((t) => ({ topic: t.topic, href: link(t.topic), value: fmt.bytes(t.bytes) }));
        this.skewed = s.skewed.map((t) => ({ topic: t.topic, href: link(t.topic), value: t.warning }));
        this.behind = s.behind.map((t) => ({ topic: t.topic, href: link(t.topic), sub: t.subscription,
          value: `${fmt.num(t.backlog)} msgs · oldest ${ms(t.ageMs)} · ${t.drainSeconds === null ? "not draining" : `drains in ${ms(t.drainSeconds * 1000)}`}` }));
      } catch (e) {
        this.error = explain(e, "Analytics");
      }
    },
    async runNow() {
      try { this.run = runView(await api(RUN, { method: "POST" })); } catch (e) { this.error = explain(e, "Run now"); }
    },
  };
}
