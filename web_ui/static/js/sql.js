// SQL over topics: a Spark SQL query answered by the analytics service
// (POST /admin/v2/analytics/sql), its rows, the recent queries and a CSV download.
import { api, explain, fmt } from "./core.js";
import { duration } from "./analytics.js";

const BASE = "/admin/v2/analytics/sql";
const EXAMPLE = 'SELECT key, count(*) AS messages, sum(length(value)) AS bytes\nFROM "public/default/demo"\nWHERE publish_time > now() - INTERVAL 1 HOUR\nGROUP BY key ORDER BY messages DESC';

export function sqlPage() {
  return {
    query: EXAMPLE,
    maxRows: 1000,
    timeoutSeconds: 30,
    running: false,
    error: "",
    answer: null,
    history: [],
    init() { this.loadHistory(); },
    async loadHistory() {
      try {
        this.history = (await api(BASE)).map((q) => ({ ...q, when: fmt.time(q.submittedMs),
          took: q.elapsedMs === null || q.elapsedMs === undefined ? "" : duration(q.elapsedMs) }));
      } catch (e) {
        this.error = explain(e, "Query history");
      }
    },
    async run() {
      this.running = true;
      this.error = "";
      this.answer = null; // a failed query must not leave the previous result under its error
      try {
        const ask = { query: this.query, maxRows: Number(this.maxRows), timeoutSeconds: Number(this.timeoutSeconds), waitSeconds: 5 };
        let got = await api(BASE, { method: "POST", json: ask });
        while (got.state === "pending" || got.state === "running") {
          await new Promise((r) => { setTimeout(r, 500); });
          got = await api(`${BASE}/${got.id}`);
        }
        if (got.state === "error") this.error = got.error;
        else this.show(got);
      } catch (e) {
        this.error = explain(e, "Query");
      } finally {
        this.running = false;
        this.loadHistory();
      }
    },
    show(got) {
      this.answer = { ...got, csv: `${BASE}/${got.id}/csv`,
        rows: got.rows.map((r, i) => ({ i, cells: r.map((v) => (v !== null && typeof v === "object" ? JSON.stringify(v) : v)) })) };
    },
    async open(q) {
      this.query = q.query;
      if (q.state === "done") {
        try { this.show(await api(`${BASE}/${q.id}`)); } catch (e) { this.error = explain(e, "Query"); }
      } else if (q.state === "error") {
        this.answer = null;
        this.error = q.error;
      }
    },
  };
}
