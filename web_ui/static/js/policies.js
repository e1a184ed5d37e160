// The namespace page's policies card: every policy as the admin API reports it
// (GET /admin/v2/namespaces/{tenant}/{namespace}), and the persistence policy
// (ledger quorums of the namespace's next ledgers) set or reset from the page.
import { api, enc } from "./core.js";

const minutes = (m) => (m < 0 ? "unlimited" : m === 0 ? "none" : `${m} min`);
const megabytes = (mb) => (mb < 0 ? "unlimited" : mb === 0 ? "none" : `${mb} MB`);
const unset = (v, text) => (v === null || v === undefined ? text : v);

export function policyRows(p) {
  const retention = p.retention_policies || {};
  const quota = (p.backlog_quota_map || {}).destination_storage;
  const persistence = p.persistence;
  return [
    ["Bundles", `${p.bundles.numBundles}`],
    ["Retention", `${minutes(retention.retentionTimeInMinutes ?? 0)}, ${megabytes(retention.retentionSizeInMB ?? 0)}`],
    ["Message TTL", p.message_ttl_in_seconds ? `${p.message_ttl_in_seconds} s` : "none"],
    ["Backlog quota", quota ? `${quota.limitSize} bytes (${quota.policy})` : "none"],
    ["Deduplication", `${unset(p.deduplicationEnabled, "cluster default (off)")}`],
    ["Max consumers per subscription", `${unset(p.max_consumers_per_subscription, "no limit")}`],
    ["Max producers per topic", `${unset(p.max_producers_per_topic, "no limit")}`],
    [
      "Persistence (E / Qw / Qa)",
      persistence
        ? `${persistence.bookkeeperEnsemble} / ${persistence.bookkeeperWriteQuorum} / ${persistence.bookkeeperAckQuorum}`
        : "cluster default",
    ],
  ];
}

export function policiesCard() {
  return {
    rows: [],
    error: "",
    ensemble: 3,
    writeQuorum: 3,
    ackQuorum: 2,
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
        this.rows = policyRows(p);
        if (p.persistence) {
          this.ensemble = p.persistence.bookkeeperEnsemble;
          this.writeQuorum = p.persistence.bookkeeperWriteQuorum;
          this.ackQuorum = p.persistence.bookkeeperAckQuorum;
        }
        this.error = "";
      } catch (e) {
        this.error = `Could not read the policies: ${e.message}`;
      }
    },
    async change(method, json, done) {
      this.busy = true;
      try {
        await api(`${this.base()}/persistence`, { method, json });
        this.ok = true;
        this.result = done;
        await this.load();
      } catch (e) {
        this.ok = false;
        this.result = `Refused: ${e.message}`;
      } finally {
        this.busy = false;
      }
    },
    setPersistence() {
      const json = {
        bookkeeperEnsemble: Number(this.ensemble),
        bookkeeperWriteQuorum: Number(this.writeQuorum),
        bookkeeperAckQuorum: Number(this.ackQuorum),
        managedLedgerMaxMarkDeleteRate: 0,
      };
      const [e, qw, qa] = [json.bookkeeperEnsemble, json.bookkeeperWriteQuorum, json.bookkeeperAckQuorum];
      if (![e, qw, qa].every(Number.isInteger) || !(1 <= qa && qa <= qw && qw <= e && e <= 16)) {
        this.ok = false;
        this.result = "Needs whole numbers with 1 ≤ Qa ≤ Qw ≤ E ≤ 16.";
        return Promise.resolve();
      }
      const q = `${e}/${qw}/${qa}`;
      return this.change("POST", json, `Next ledgers of this namespace's topics: ${q}.`);
    },
    resetPersistence() {
      return this.change("DELETE", undefined, "Next ledgers use the cluster default.");
    },
  };
}
