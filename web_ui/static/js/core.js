// Shared helpers: the one fetch wrapper every page uses (errors, failover hook),
// formatting, polling and the confirmation dialog.
import { authHeaders } from "./auth.js";
import { conn } from "./conn.js";

export const enc = encodeURIComponent;

export class ApiError extends Error {
  constructor(status, reason, path, endpointMissing = false) {
    super(reason);
    this.status = status;
    this.path = path;
    this.endpointMissing = endpointMissing; // the route itself is absent (FastAPI's default 404/405)
  }
}

const TIMEOUT_MS = 10000;

// fetch `path` on this page's gateway. JSON bodies via `json`; returns parsed JSON
// (or text, or null for 204); `withResponse` also returns the Response (headers).
// `signal` (an AbortController's) cancels the call: it then throws an AbortError.
export async function api(path, { method = "GET", json, headers = {}, withResponse = false, signal } = {}) {
  const timeout = AbortSignal.timeout(TIMEOUT_MS);
  const init = { method, headers: { ...authHeaders(), ...headers }, cache: "no-store",
    signal: signal ? AbortSignal.any([signal, timeout]) : timeout };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (signal && signal.aborted) throw e; // cancelled by the page, not a lost gateway
    conn.unreachable();
    throw new ApiError(0, `gateway unreachable (${e.name === "TimeoutError" ? "timed out" : e.message})`, path);
  }
  conn.reachable();
  if (res.status === 401 && window.Alpine) window.Alpine.store("auth").unauthorized();
  const type = res.headers.get("content-type") || "";
  const body = res.status === 204 ? null : type.includes("json") ? await res.json().catch(() => null) : await res.text();
  if (!res.ok) {
    const reason = body && typeof body === "object" ? body.reason || body.detail || JSON.stringify(body) : body;
    const said = body && typeof body === "object" ? body.reason ?? body.detail : undefined;
    const missing = said === "Not Found" || said === "Method Not Allowed"; // Starlette's words: no such route
    throw new ApiError(res.status, `${res.status}: ${reason || res.statusText}`, path, missing);
  }
  return withResponse ? { body, res } : body;
}

// Message for a failed call; 404/405 means "this gateway does not offer it".
export function explain(err, what) {
  if (err instanceof ApiError && err.endpointMissing) {
    return `${what} is not available on this gateway (${err.path.split("?")[0]} answered ${err.status}).`;
  }
  if (err instanceof ApiError && err.status === 401) return `${what}: sign in with a token to see this (${err.message}).`;
  if (err instanceof ApiError && err.status === 403) return `${what}: this role may not (${err.message}); ask an administrator for a grant.`;
  return `${what}: ${err.message}`;
}

// Run `fn` now and every `ms` until the returned stop function is called.
export function poll(fn, ms = 2000) {
  let stopped = false;
  let timer = 0;
  const tick = async () => {
    if (stopped) return;
    try { await fn(); } catch (e) { /* each page shows its own errors */ }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

const nf = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
const nf0 = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

export const fmt = {
  num(v) { return v === undefined || v === null || Number.isNaN(Number(v)) ? "–" : nf0.format(Number(v)); },
  rate(v) { return v === undefined || v === null ? "–" : nf.format(Number(v)); },
  bytes(v) {
    if (v === undefined || v === null || Number.isNaN(Number(v))) return "–";
    let n = Number(v);
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return `${nf.format(n)} ${units[i]}`; // at most one decimal: rates are fractional
  },
  time(v) {
    if (v === undefined || v === null || v === "") return "–";
    const d = typeof v === "number" ? new Date(v) : new Date(String(v));
    return Number.isNaN(d.getTime()) ? String(v) : d.toLocaleString(undefined, { hour12: false });
  },
  // "12 s ago", "4 min ago", "3 h ago", "2 d ago" (of an epoch-ms time)
  ago(v, now = Date.now()) {
    if (v === undefined || v === null) return "–";
    const s = Math.max(0, Math.round((now - Number(v)) / 1000));
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return `${Math.floor(s / 86400)} d ago`;
  },
  short(v) {
    const n = Number(v);
    if (Math.abs(n) >= 1e6) return `${nf.format(n / 1e6)}M`;
    if (Math.abs(n) >= 1e3) return `${nf.format(n / 1e3)}k`;
    return nf.format(n);
  },
};

// The first of `keys` present on `obj` (documented name first, then tolerated variants).
export function pick(obj, ...keys) {
  if (!obj || typeof obj !== "object") return undefined;
  for (const k of keys) {
    const v = k.split(".").reduce((o, part) => (o && typeof o === "object" ? o[part] : undefined), obj);
    if (v !== undefined && v !== null) return v;
  }
  return undefined;
}

// A modal confirmation (native <dialog>); resolves true on Confirm.
export function confirmDialog(text) {
  const dialog = document.getElementById("confirm-dialog");
  dialog.querySelector(".confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

// base64 of a string's UTF-8 bytes, and bytes of a base64 string.
export function utf8ToBase64(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

export function base64ToBytes(b64) {
  try {
    const bin = atob(b64 || "");
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i += 1) out[i] = bin.charCodeAt(i);
    return out;
  } catch (e) {
    return new Uint8Array(0);
  }
}
