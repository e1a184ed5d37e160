// Live tail over a WebSocket reader (from latest, Folio's batched delivery), named
// DASHBOARD_READER_PREFIX… so no subscription list of the dashboard shows it.
// Never drops a frame: every message is counted and acked on arrival (acks only
// release the reader's flow-control credit), rows are rendered in batches on
// animation frames, and the table keeps only the newest CAP rows. A reader the
// server closes (topic unloaded, gateway gone) reconnects where it left off:
// after the last id seen, or (partitioned topics, nothing seen yet) by seeking
// to the last publish time seen / the start time; ids already shown are skipped.
import { withToken } from "./auth.js";
import { base64ToBytes, enc, fmt } from "./core.js";
import { conn } from "./conn.js";
import { renderPayload } from "./messages.js";
import { DASHBOARD_READER_PREFIX } from "./paths.js";

const CAP = 200;
const SEEN_MAX = 5000;
const PREVIEW = 200;

// The reader is named so the dashboard's lists leave it out: it is the page's own, not a user's.
function readerName() {
  const bytes = crypto.getRandomValues(new Uint8Array(4));
  return `${DASHBOARD_READER_PREFIX}tail-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function wsUrl(d, start) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const q = new URLSearchParams({
    messageId: start, batchDelivery: "true", receiverQueueSize: "1000", readerName: readerName(),
  });
  return withToken(`${scheme}://${location.host}/ws/v2/reader/persistent/${enc(d.tenant)}/${enc(d.namespace)}/${enc(d.topic)}?${q}`);
}

export function tailPanel() {
  return {
    running: false,
    state: "stopped",
    count: 0,
    cap: CAP,
    get stateClass() {
      return { live: "live", connecting: "connecting", "reconnecting…": "down" }[this.state] || "";
    },
    init() {
      this.pending = [];
      this.ws = null;
      this.lastId = null;
      this.scheduled = false;
      this.seen = new Set(); // recent ids, to skip what a resumed reader sends again
      this.resumeMs = 0;
    },
    toggle() { if (this.running) this.stop(); else this.start(); },
    clear() { this.$refs.rows.replaceChildren(); this.count = 0; },
    start() {
      this.running = true;
      this.lastId = null;
      this.resumeMs = Date.now();
      this.connect(false);
    },
    stop() {
      this.running = false;
      this.state = "stopped";
      if (this.ws) this.ws.close(1000);
      this.ws = null;
    },
    connect(resume) {
      const d = this.$el.closest("main").dataset;
      const byId = resume && this.lastId && !this.$store.topic.partitions;
      this.state = "connecting";
      const ws = new WebSocket(wsUrl(d, byId ? this.lastId : "latest"));
      this.ws = ws;
      ws.onopen = () => {
        if (resume && !byId) ws.send(JSON.stringify({ type: "seek", timestamp: this.resumeMs }));
        this.state = "live";
      };
      ws.onmessage = (ev) => this.onFrame(ws, ev.data);
      ws.onclose = () => {
        if (this.ws !== ws || !this.running) return;
        this.state = "reconnecting…";
        conn.unreachable();
        setTimeout(() => { if (this.running && this.ws === ws) this.connect(true); }, 1000);
      };
    },
    onFrame(ws, data) {
      let frame;
      try { frame = JSON.parse(data); } catch (e) { return; }
      const list = frame.type === "messages" ? frame.messages || [] : frame.messageId && frame.payload !== undefined ? [frame] : [];
      if (!list.length) return;
      const ids = list.map((m) => m.messageId);
      ws.send(JSON.stringify(ids.length === 1 ? { messageId: ids[0] } : { type: "ack", messageIds: ids }));
      this.lastId = ids[ids.length - 1];
      let fresh = 0;
      for (const m of list) {
        if (this.seen.has(m.messageId)) continue;
        this.seen.add(m.messageId);
        const t = Date.parse(m.publishTime);
        if (t > this.resumeMs) this.resumeMs = t;
        this.pending.push(m);
        fresh += 1;
      }
      if (this.seen.size > SEEN_MAX) this.seen = new Set([...this.seen].slice(-SEEN_MAX / 2));
      this.count += fresh;
      if (!this.scheduled) {
        this.scheduled = true;
        const flush = () => this.flush();
        requestAnimationFrame(flush);
        setTimeout(flush, 250); // background tabs get no animation frames
      }
    },
    flush() {
      if (!this.scheduled) return;
      this.scheduled = false;
      const batch = this.pending.slice(-CAP);
      this.pending = [];
      const tbody = this.$refs.rows;
      const frag = document.createDocumentFragment();
      for (let i = batch.length - 1; i >= 0; i -= 1) {
        const m = batch[i];
        const tr = document.createElement("tr");
        const text = renderPayload(base64ToBytes(m.payload), "text");
        for (const [cls, value] of [["", fmt.time(m.publishTime)], ["", m.key ?? ""],
          ["pl", text.length > PREVIEW ? `${text.slice(0, PREVIEW)}…` : text]]) {
          const td = document.createElement("td");
          if (cls) td.className = cls;
          td.textContent = value;
          tr.appendChild(td);
        }
        frag.appendChild(tr);
      }
      tbody.prepend(frag);
      while (tbody.childElementCount > CAP) tbody.lastElementChild.remove();
    },
  };
}
