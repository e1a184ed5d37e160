// The namespace page's policies card: every namespace policy as the admin API
// reports it (GET /admin/v2/namespaces/{tenant}/{namespace}), each one set
// (POST …/{policy}) or reset to the cluster default (DELETE …/{policy}) from the
// page. POLICIES describes each: its fields, how it reads from the policies
// document, the body it sends and how its value is shown.
import { api, confirmDialog, enc, fmt } from "./core.js";

const minutes = (m) => (m < 0 ? "unlimited" : m === 0 ? "none" : `${m} min`);
const megabytes = (mb) => (mb < 0 ? "unlimited" : mb === 0 ? "none" : `${mb} MB`);
const unset = (v, text) => (v === null || v === undefined ? text : String(v));
const num = (v) => Number(v);
const yesNo = [{ value: "true", label: "true" }, { value: "false", label: "false" }];
const STRATEGIES = ["UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
  "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"].map((s) => ({ value: s, label: s }));
const QUOTA_POLICIES = ["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]
  .map((s) => ({ value: s, label: s }));
const TOPIC_TYPES = ["non-partitioned", "partitioned"].map((s) => ({ value: s, label: s }));

// key: the admin path segment; fields: [name, label, kind ("number" | options list)]
export const POLICIES = [
  {
    key: "retention", label: "Retention",
    fields: [["time", "minutes (-1 unlimited)", "number"], ["size", "MB (-1 unlimited)", "number"]],
    read: (p) => ({ time: p.retention_policies?.retentionTimeInMinutes ?? 0, size: p.retention_policies?.retentionSizeInMB ?? 0 }),
    body: (v) => ({ retentionTimeInMinutes: num(v.time), retentionSizeInMB: num(v.size) }),
    show: (p) => `time: ${minutes(p.retention_policies?.retentionTimeInMinutes ?? 0)} · size: ${megabytes(p.retention_policies?.retentionSizeInMB ?? 0)}` +
      " (acknowledged messages kept for)",
  },
  {
    key: "messageTTL", label: "Message TTL",
    fields: [["seconds", "seconds (0 none)", "number"]],
    read: (p) => ({ seconds: p.message_ttl_in_seconds ?? 0 }),
    body: (v) => num(v.seconds),
    show: (p) => (p.message_ttl_in_seconds ? `${p.message_ttl_in_seconds} s` : "none"),
  },
  {
    key: "backlogQuota", label: "Backlog quota", query: "?backlogQuotaType=destination_storage",
    fields: [["limitSize", "bytes (-1 none)", "number"], ["limitTime", "seconds (-1 none)", "number"], ["policy", "when hit", QUOTA_POLICIES]],
    read: (p) => {
      const q = (p.backlog_quota_map || {}).destination_storage || {};
      return { limitSize: q.limitSize ?? -1, limitTime: q.limitTime ?? -1, policy: q.policy ?? "producer_request_hold" };
    },
    body: (v) => ({ limitSize: num(v.limitSize), limitTime: num(v.limitTime), policy: v.policy }),
    show: (p) => {
      const q = (p.backlog_quota_map || {}).destination_storage;
      if (!q) return "none";
      const time = q.limitTime >= 0 ? `, ${q.limitTime} s` : "";
      const size = q.limitSize >= 0 ? `${fmt.bytes(q.limitSize)} (${q.limitSize} bytes)` : "no size limit";
      return `${size}${time}, ${q.policy}`;
    },
  },
  {
    key: "deduplication", label: "Deduplication",
    fields: [["enabled", "enabled", yesNo]],
    read: (p) => ({ enabled: String(p.deduplicationEnabled ?? false) }),
    body: (v) => v.enabled === "true",
    show: (p) => unset(p.deduplicationEnabled, "cluster default (off)"),
  },
  {
    key: "maxConsumersPerSubscription", label: "Max consumers per subscription",
    fields: [["limit", "consumers (0 no limit)", "number"]],
    read: (p) => ({ limit: p.max_consumers_per_subscription ?? 0 }),
    body: (v) => num(v.limit),
    show: (p) => unset(p.max_consumers_per_subscription, "no limit"),
  },
  {
    key: "maxProducersPerTopic", label: "Max producers per topic",
    fields: [["limit", "producers (0 no limit)", "number"]],
    read: (p) => ({ limit: p.max_producers_per_topic ?? 0 }),
    body: (v) => num(v.limit),
    show: (p) => unset(p.max_producers_per_topic, "no limit"),
  },
  {
    key: "maxConsumersPerTopic", label: "Max consumers per topic",
    fields: [["limit", "consumers and readers (0 no limit)", "number"]],
    read: (p) => ({ limit: p.max_consumers_per_topic ?? 0 }),
    body: (v) => num(v.limit),
    show: (p) => unset(p.max_consumers_per_topic || null, "no limit"),
  },
  {
    key: "maxSubscriptionsPerTopic", label: "Max subscriptions per topic",
    fields: [["limit", "durable subscriptions (0 no limit)", "number"]],
    read: (p) => ({ limit: p.max_subscriptions_per_topic ?? 0 }),
    body: (v) => num(v.limit),
    show: (p) => unset(p.max_subscriptions_per_topic || null, "no limit"),
  },
  {
    key: "maxTopicsPerNamespace", label: "Max topics in this namespace",
    fields: [["limit", "topics, partitions counted (0 no limit)", "number"]],
    read: (p) => ({ limit: p.max_topics_per_namespace ?? 0 }),
    body: (v) => num(v.limit),
    show: (p) => unset(p.max_topics_per_namespace || null, "no limit"),
  },
  {
    key: "analyticsInterval", label: "Statistics schedule (analytics)",
    fields: [["seconds", "seconds between runs (0 on demand only)", "number"]],
    read: (p) => ({ seconds: p.analyticsIntervalSeconds ?? 300 }),
    body: (v) => num(v.seconds),
    show: (p) => (p.analyticsIntervalSeconds === null || p.analyticsIntervalSeconds === undefined
      ? "cluster schedule"
      : p.analyticsIntervalSeconds === 0 ? "on demand only" : `every ${p.analyticsIntervalSeconds} s`),
  },
  {
    key: "persistence", label: "Persistence (E / Qw / Qa)",
    fields: [["e", "ensemble E", "number"], ["qw", "write quorum Qw", "number"], ["qa", "ack quorum Qa", "number"]],
    read: (p) => ({ e: p.persistence?.bookkeeperEnsemble ?? 3, qw: p.persistence?.bookkeeperWriteQuorum ?? 3, qa: p.persistence?.bookkeeperAckQuorum ?? 2 }),
    body: (v) => ({ bookkeeperEnsemble: num(v.e), bookkeeperWriteQuorum: num(v.qw), bookkeeperAckQuorum: num(v.qa), managedLedgerMaxMarkDeleteRate: 0 }),
    check: (v) => {
      const [e, qw, qa] = [num(v.e), num(v.qw), num(v.qa)];
      return [e, qw, qa].every(Number.isInteger) && 1 <= qa && qa <= qw && qw <= e && e <= 16
        ? "" : "Needs whole numbers with 1 ≤ Qa ≤ Qw ≤ E ≤ 16.";
    },
    show: (p) => (p.persistence
      ? `${p.persistence.bookkeeperEnsemble} / ${p.persistence.bookkeeperWriteQuorum} / ${p.persistence.bookkeeperAckQuorum}`
      : "cluster default"),
  },
  {
    key: "schemaCompatibilityStrategy", label: "Schema compatibility",
    fields: [["strategy", "strategy", STRATEGIES]],
    read: (p) => ({ strategy: p.schema_compatibility_strategy ?? "UNDEFINED" }),
    body: (v) => v.strategy,
    show: (p) => (p.schema_compatibility_strategy === "UNDEFINED" ? "UNDEFINED (FULL)" : p.schema_compatibility_strategy),
  },
  {
    key: "isAllowAutoUpdateSchema", label: "Producers may add schema versions",
    fields: [["allowed", "allowed", yesNo]],
    read: (p) => ({ allowed: String(p.is_allow_auto_update_schema ?? true) }),
    body: (v) => v.allowed === "true",
    show: (p) => String(p.is_allow_auto_update_schema ?? true),
  },
  {
    key: "autoTopicCreation", label: "Auto topic creation",
    fields: [["allow", "allowed", yesNo], ["type", "type", TOPIC_TYPES], ["partitions", "partitions", "number"]],
    read: (p) => {
      const a = p.autoTopicCreationOverride || {};
      return { allow: String(a.allowAutoTopicCreation ?? true), type: a.topicType ?? "non-partitioned", partitions: a.defaultNumPartitions ?? 0 };
    },
    body: (v) => ({
      allowAutoTopicCreation: v.allow === "true", topicType: v.type,
      ...(v.type === "partitioned" ? { defaultNumPartitions: num(v.partitions) } : {}),
    }),
    show: (p) => {
      const a = p.autoTopicCreationOverride || {};
      if (a.allowAutoTopicCreation === false) return "off";
      return a.topicType === "partitioned" ? `on, partitioned (${a.defaultNumPartitions})` : "on, non-partitioned";
    },
  },
];

const BY_KEY = Object.fromEntries(POLICIES.map((d) => [d.key, d]));

export function policiesCard() {
  return {
    rows: [],
    bundles: "",
    error: "",
    editing: "",
    busy: false,
    ok: false,
    result: "",
    base() {
      const d = this.$el.closest("main").dataset;
      return `/admin/v2/namespaces/${enc(d.tenant)}/${enc(d.namespace)}`;
    },
    async init() {
      await this.load();
    },
    async load() {
      try {
        const p = await api(this.base());
        this.bundles = String(p.bundles?.numBundles ?? "–");
        this.rows = POLICIES.map((d) => ({
          key: d.key,
          label: d.label,
          value: d.show(p),
          values: d.read(p),
          fields: d.fields.map(([name, label, kind]) => ({
            name, label, number: kind === "number", options: Array.isArray(kind) ? kind : [],
          })),
        }));
        this.error = "";
      } catch (e) {
        this.error = `Could not read the policies: ${e.message}`;
      }
    },
    edit(key) { this.editing = this.editing === key ? "" : key; this.result = ""; },
    isEditing(key) { return this.editing === key; },
    async change(key, method, body, done) {
      const d = BY_KEY[key];
      this.busy = true;
      try {
        await api(`${this.base()}/${d.key}${d.query || ""}`, { method, json: body });
        this.ok = true;
        this.result = done;
        await this.load(); // the form closes on the new values, never before them
        this.editing = "";
      } catch (e) {
        this.ok = false;
        this.result = `Refused: ${e.message}`;
      } finally {
        this.busy = false;
      }
    },
    set(row) {
      const d = BY_KEY[row.key];
      const problem = d.check ? d.check(row.values) : "";
      if (problem) { this.ok = false; this.result = problem; return Promise.resolve(); }
      return this.change(row.key, "POST", d.body(row.values), `${d.label} set.`);
    },
    async reset(row) {
      const d = BY_KEY[row.key];
      if (!(await confirmDialog(`Reset ${d.label} of this namespace to the cluster default?`))) return;
      await this.change(row.key, "DELETE", undefined, `${d.label} reset to the cluster default.`);
    },
  };
}
