// Produce (REST publish, as curl does) and browse messages (peek with paging),
// with payloads shown as text, pretty JSON, hex, or decoded by the topic's schema.
import { api, base64ToBytes, enc, explain, fmt, utf8ToBase64 } from "./core.js";

const HEX_MAX = 4096;
const decoder = new TextDecoder("utf-8");

export function renderPayload(bytes, view) {
  if (view === "hex") {
    const lines = [];
    const n = Math.min(bytes.length, HEX_MAX);
    for (let off = 0; off < n; off += 16) {
      const row = bytes.subarray(off, Math.min(off + 16, n));
      const hex = Array.from(row, (b) => b.toString(16).padStart(2, "0")).join(" ");
      const ascii = Array.from(row, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
      lines.push(`${off.toString(16).padStart(6, "0")}  ${hex.padEnd(47)}  ${ascii}`);
    }
    if (bytes.length > n) lines.push(`… ${bytes.length - n} more bytes`);
    return lines.join("\n");
  }
  const text = decoder.decode(bytes);
  if (view === "json") {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return `(not JSON) ${text}`; }
  }
  return text;
}

// A message written with a topic schema comes with its decoded value (JSON and Avro records).
function renderDecoded(m) {
  if (m.value === undefined) return m.schemaVersion == null ? "(no schema)" : `(does not fit schema version ${m.schemaVersion})`;
  return JSON.stringify(m.value, null, 2);
}

function messageRow(m, i) {
  const bytes = base64ToBytes(m.payload);
  const props = Object.entries(m.properties || {}).map(([k, v]) => `${k}=${v}`);
  const id = m.ledgerId !== undefined
    ? `${m.ledgerId}:${m.entryId}${typeof m.batchIndex === "number" && m.batchIndex >= 0 ? `:${m.batchIndex}` : ""}`
    : String(m.messageId ?? i);
  return {
    id, key: m.key ?? "", props, published: fmt.time(m.publishTime), schemaVersion: m.schemaVersion ?? null,
    render: (view) => (view === "decoded" ? renderDecoded(m) : renderPayload(bytes, view)),
  };
}

export function producePanel() {
  return {
    key: "",
    producerName: "dashboard",
    properties: "",
    payload: "",
    busy: false,
    ok: false,
    result: "",
    parseProps() {
      const props = {};
      for (const line of this.properties.split("\n")) {
        if (!line.trim()) continue;
        const at = line.indexOf("=");
        if (at <= 0) throw new Error(`property line "${line}" is not name=value`);
        props[line.slice(0, at).trim()] = line.slice(at + 1).trim();
      }
      return props;
    },
    async send() {
      const d = this.$el.closest("main").dataset;
      this.busy = true;
      try {
        const message = { payload: utf8ToBase64(this.payload), payloadEncoding: "base64", properties: this.parseProps() };
        if (this.key) message.key = this.key;
        const reply = await api(`/topics/persistent/${enc(d.tenant)}/${enc(d.namespace)}/${enc(d.topic)}`, {
          method: "POST", json: { producerName: this.producerName || "dashboard", messages: [message] },
        });
        const r = (reply?.messagePublishResults || [])[0] || {};
        this.ok = !r.errorCode && r.messageId !== undefined;
        this.result = this.ok ? `Published as ${r.messageId}` : `Not published: ${r.errorMsg || "no result"}`;
      } catch (e) {
        this.ok = false;
        this.result = `Not published: ${e.message}`;
      } finally {
        this.busy = false;
      }
    },
  };
}

export function peekPanel() {
  return {
    source: "", // "" = the topic from earliest, else a subscription name
    view: "text",
    offset: 0,
    limit: 20,
    messages: [],
    loaded: false,
    loadedKey: "", // source|partition|offset of what the table shows (tests wait on it)
    error: "",
    partition: 0, // a partitioned topic is browsed one partition at a time
    get subNames() { return this.$store.topic.subNames; },
    get partitionIndexes() { return [...Array(this.$store.topic.partitions).keys()]; },
    reload() { // the source or partition changed: from the first message again
      this.offset = 0;
      this.load();
    },
    useSub(name) {
      this.source = name;
      this.offset = 0;
      this.load();
      this.$el.scrollIntoView({ behavior: "smooth", block: "start" });
    },
    page(dir) {
      this.offset = Math.max(0, this.offset + dir * this.limit);
      this.load();
    },
    rangeText() {
      if (!this.messages.length) return "";
      return `messages ${this.offset + 1}–${this.offset + this.messages.length}`;
    },
    async load() {
      const d = this.$el.closest("main").dataset;
      const local = this.$store.topic.partitions > 0 ? `${d.topic}-partition-${this.partition}` : d.topic;
      const base = `/admin/v2/persistent/${enc(d.tenant)}/${enc(d.namespace)}/${enc(local)}`;
      const q = `offset=${this.offset}&limit=${this.limit}`;
      const path = this.source ? `${base}/subscription/${enc(this.source)}/messages?${q}` : `${base}/messages?from=earliest&${q}`;
      const key = `${this.source}|${this.partition}|${this.offset}`;
      this.seq = (this.seq || 0) + 1;
      const seq = this.seq;
      this.loadedKey = ""; // loading: what the table shows is about to change
      let messages = [];
      let error = "";
      try {
        const body = await api(path);
        messages = (body?.messages || []).map(messageRow);
      } catch (e) {
        error = explain(e, "Message browsing");
      }
      if (seq !== this.seq) return; // a later load was asked meanwhile: its answer wins
      this.messages = messages;
      this.error = error;
      this.loaded = true;
      this.loadedKey = key;
    },
  };
}
