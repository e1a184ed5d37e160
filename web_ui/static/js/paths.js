// URLs of the dashboard's own pages. All but the overview ("/") live under /ui/, a
// prefix no API route uses; gateway/dashboard/pages.py builds the same URLs.
const enc = encodeURIComponent;

export const UI = "/ui";

// readerName prefix of the dashboard's own readers (the live tail): the lists leave
// them out (gateway/api/rollups.py DASHBOARD_READER_PREFIX on the server side).
export const DASHBOARD_READER_PREFIX = "folio-dashboard-";

export function isDashboardReader(name) {
  return String(name).startsWith(DASHBOARD_READER_PREFIX);
}

export const pageHref = {
  namespaces: (tenant) => `${UI}/tenants/${enc(tenant)}`,
  topics: (tenant, ns) => `${UI}/tenants/${enc(tenant)}/${enc(ns)}`,
  topic: (tenant, ns, local) => `${UI}/topics/persistent/${enc(tenant)}/${enc(ns)}/${enc(local)}`,
  subscriptions: () => `${UI}/subscriptions`,
  search: (topic) => `${UI}/search${topic ? `?topic=${enc(topic)}` : ""}`,
};

// Whether `pathname` is one of the dashboard's pages (the overview or under /ui/,
// static files excepted): failover moves to the same page on another gateway only then.
export function isDashboardPage(pathname) {
  return pathname === "/" || (pathname.startsWith(`${UI}/`) && !pathname.startsWith(`${UI}/static/`));
}
