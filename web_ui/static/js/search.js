// Message search (GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/search): by key,
// property (name=value), payload text, JSON field (dotted.path=value) and publish time.
// The server scans one bounded page per request (bytes, time and matches capped there)
// and answers what it scanned and where to resume; this page asks for the next page
// until the log ends, the budget set here is spent or Cancel is pressed (which aborts
// the request under way), showing the progress as it goes.
import { api, base64ToBytes, enc, explain, fmt } from "./core.js";
import { pageHref } from "./paths.js";

const PAGE_BYTES = 8 * 1024 * 1024; // asked per page (the server caps it)
const PAGE_MS = 2000;
const MATCHES_SHOWN = 500;
const decoder = new TextDecoder("utf-8");

// "t/ns/topic" or "persistent://t/ns/topic" -> parts (null if neither)
export function topicParts(text) {
  const m = /^(?:persistent:\/\/)?([^/\s]+)\/([^/\s]+)\/([^/\s]+)$/.exec(String(text || "").trim());
  return m ? { tenant: m[1], namespace: m[2], local: m[3] } : null;
}

function preview(b64) {
  const text = decoder.decode(base64ToBytes(b64));
  return text.length > 400 ? `${text.slice(0, 400)}…` : text;
}

function resultRow(m) {
  return {
    key: m.messageId,
    position: m.position,
    published: fmt.time(m.publishTime),
    publishTime: m.publishTime,
    msgKey: m.key ?? "",
    props: Object.entries(m.properties || {}).map(([k, v]) => `${k}=${v}`).join(", "),
    payload: preview(m.payload) + (m.payloadTruncated ? ` (first part of ${fmt.bytes(m.payloadSize)})` : ""),
  };
}

const STOPS = {
  end: "Done: the whole topic was scanned.",
  before: "Done: reached messages published after the time range.",
};

export function searchPage() {
  return {
    topic: "",
    key: "",
    property: "",
    text: "",
    json: "",
    after: "",
    before: "",
    budgetMiB: 256,
    budgetSeconds: 30,
    running: false,
    error: "",
    status: "",
    results: [],
    scannedBytes: 0,
    scannedEntries: 0,
    scannedMessages: 0,
    pages: 0,
    topicBytes: 0,
    resumeAt: null,
    controller: null,
    init() {
      const q = new URLSearchParams(location.search);
      this.topic = q.get("topic") || "";
    },
    pct() {
      return this.topicBytes ? Math.min(100, Math.round((100 * this.scannedBytes) / this.topicBytes)) : 0;
    },
    progressText() {
      if (!this.pages && !this.running) return "";
      const of = this.topicBytes ? ` of ${fmt.bytes(this.topicBytes)} (${this.pct()}%)` : "";
      return `Scanned ${fmt.bytes(this.scannedBytes)}${of} · ${fmt.num(this.scannedEntries)} entries · ` +
        `${fmt.num(this.scannedMessages)} messages · ${fmt.num(this.results.length)} found · ${this.pages} pages`;
    },
    topicHref() {
      const p = topicParts(this.topic);
      return p ? pageHref.topic(p.tenant, p.namespace, p.local) : "#";
    },
    query(start) {
      const q = new URLSearchParams({ maxBytes: String(PAGE_BYTES), timeoutMs: String(PAGE_MS), limit: "100" });
      for (const name of ["key", "property", "text", "json"]) if (this[name].trim()) q.set(name, this[name].trim());
      if (this.after) q.set("after", String(new Date(this.after).getTime()));
      if (this.before) q.set("before", String(new Date(this.before).getTime()));
      if (start) q.set("start", start);
      return q;
    },
    async run(resume = false) {
      const p = topicParts(this.topic);
      if (!p) { this.error = "Name a topic as tenant/namespace/topic (or persistent://tenant/namespace/topic)."; return; }
      const base = `/admin/v2/persistent/${enc(p.tenant)}/${enc(p.namespace)}/${enc(p.local)}`;
      this.error = "";
      this.running = true;
      this.status = "Searching…"; // at once: the last search's "Done" never stands over new results
      if (!resume) {
        this.results = [];
        this.scannedBytes = this.scannedEntries = this.scannedMessages = this.pages = 0;
        this.resumeAt = null;
        this.topicBytes = 0;
        try { this.topicBytes = Number((await api(`${base}/stats`)).storageSize || 0); } catch (e) { /* progress without a total */ }
      }
      this.controller = new AbortController();
      const budget = this.scannedBytes + this.budgetMiB * 1024 * 1024;
      const until = Date.now() + this.budgetSeconds * 1000;
      let start = resume ? this.resumeAt : null;
      try {
        for (;;) {
          const page = await api(`${base}/search?${this.query(start)}`, { signal: this.controller.signal });
          this.pages += 1;
          this.scannedBytes += page.scannedBytes;
          this.scannedEntries += page.scannedEntries;
          this.scannedMessages += page.scannedMessages;
          this.results = this.results.concat((page.messages || []).map(resultRow)).slice(0, MATCHES_SHOWN);
          start = page.next;
          this.resumeAt = start;
          if (page.done) { this.status = STOPS[page.stoppedBy] || "Done."; break; }
          if (this.results.length >= MATCHES_SHOWN) { this.status = `Stopped: ${MATCHES_SHOWN} matches shown. Narrow the filters, or go on.`; break; }
          if (this.scannedBytes >= budget) { this.status = `Stopped: ${this.budgetMiB} MiB scanned (the budget set here). Go on to scan more.`; break; }
          if (Date.now() >= until) { this.status = `Stopped: ${this.budgetSeconds} s spent (the budget set here). Go on to scan more.`; break; }
        }
      } catch (e) {
        if (e && e.name === "AbortError") this.status = "Cancelled. Go on to resume where it stopped.";
        else { this.error = explain(e, "Message search"); this.status = ""; }
      } finally {
        this.running = false;
        this.controller = null;
      }
    },
    cancel() {
      if (this.controller) this.controller.abort();
    },
  };
}
