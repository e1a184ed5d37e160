// Connection state and failover. The page knows every gateway (GET /admin/v2/brokers,
// refreshed every 10 s). When a call to its own gateway fails at the network level,
// it re-checks that gateway; if it is gone, it probes the others and moves to the
// same page (same path under /ui/, query and fragment; the overview for anything
// else) on the first live one, or says "lost the cluster" and keeps retrying.
import { authHeaders } from "./auth.js";
import { isDashboardPage } from "./paths.js";

const HEALTH = "/admin/v2/brokers/health";
const RETRY_MS = 3000;
const PROBE_MS = 1500;

const state = {
  self: document.body.dataset.gateway || location.host,
  brokers: [], // [{id, httpUrl}]
  lost: false,
  cluster: false, // true: no gateway answers
  message: "",
  probing: false,
};

// The reactive store (set by install); before that, the plain object.
export let conn = {
  unreachable() {},
  reachable() {},
};

function normalizeBrokers(list) {
  if (!Array.isArray(list)) return [];
  return list
    .map((b) => {
      if (typeof b === "string") return { id: b, httpUrl: b.includes("://") ? b : `http://${b}` };
      const url = b.httpUrl || b.http_url || b.url || b.webServiceUrl || (b.address ? `http://${b.address}` : "");
      return { id: b.id || b.brokerId || b.gatewayId || url, httpUrl: url.replace(/\/$/, "") };
    })
    .filter((b) => b.httpUrl);
}

// This page's URL on the gateway at `base` (its httpUrl): same path, query and fragment.
function samePageOn(base) {
  const here = isDashboardPage(location.pathname) ? `${location.pathname}${location.search}${location.hash}` : "/";
  return `${base}${here}`;
}

async function alive(base) {
  const same = new URL(base, location.href).origin === location.origin;
  try {
    const res = await fetch(`${base}${HEALTH}`, {
      mode: same ? "same-origin" : "no-cors", // another origin: an opaque answer still proves it is up
      cache: "no-store",
      signal: AbortSignal.timeout(PROBE_MS),
    });
    return !same || res.ok;
  } catch (e) {
    return false;
  }
}

export function install(Alpine) {
  Alpine.store("conn", {
    ...state,
    learn(list) {
      const known = new Map(this.brokers.map((b) => [b.httpUrl, b]));
      for (const b of normalizeBrokers(list)) known.set(b.httpUrl, b);
      this.brokers = [...known.values()];
    },
    async refreshBrokers() {
      try {
        const res = await fetch("/admin/v2/brokers", {
          headers: authHeaders(), cache: "no-store", signal: AbortSignal.timeout(5000),
        });
        if (res.ok) this.learn(await res.json());
      } catch (e) { /* the failover path notices */ }
    },
    unreachable() {
      if (!this.probing) this.failover();
    },
    reachable() {
      if (this.lost && !this.probing) { this.lost = false; this.cluster = false; this.message = ""; }
    },
    async failover() {
      this.probing = true;
      this.lost = true;
      this.message = `Lost gateway ${this.self}: checking the other gateways…`;
      if (await alive(location.origin)) {
        this.lost = false; this.cluster = false; this.message = ""; this.probing = false;
        return;
      }
      const others = this.brokers.filter((b) => new URL(b.httpUrl).origin !== location.origin);
      const live = await Promise.all(others.map(async (b) => ((await alive(b.httpUrl)) ? b : null)));
      const target = live.find(Boolean);
      if (target) {
        this.message = `Lost gateway ${this.self}: moving to gateway ${target.id}…`;
        location.assign(samePageOn(target.httpUrl));
        return;
      }
      this.cluster = true;
      const tried = [this.self, ...others.map((b) => b.id)].join(", ");
      this.message = `Lost the cluster: no gateway answers (tried ${tried}). Retrying every ${RETRY_MS / 1000} s…`;
      setTimeout(() => this.failover(), RETRY_MS);
    },
  });
  conn = Alpine.store("conn");
  conn.refreshBrokers();
  setInterval(() => { if (!conn.lost) conn.refreshBrokers(); }, 10000);
}
