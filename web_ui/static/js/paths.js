// URLs of the dashboard's own pages. All but the overview ("/") live under /ui/, a
// prefix no API route uses; gateway/dashboard/pages.py builds the same URLs.
const enc = encodeURIComponent;

export const UI = "/ui";

export const pageHref = {
  namespaces: (tenant) => `${UI}/tenants/${enc(tenant)}`,
  topics: (tenant, ns) => `${UI}/tenants/${enc(tenant)}/${enc(ns)}`,
  topic: (tenant, ns, local) => `${UI}/topics/persistent/${enc(tenant)}/${enc(ns)}/${enc(local)}`,
};

// Whether `pathname` is one of the dashboard's pages (the overview or under /ui/,
// static files excepted): failover moves to the same page on another gateway only then.
export function isDashboardPage(pathname) {
  return pathname === "/" || (pathname.startsWith(`${UI}/`) && !pathname.startsWith(`${UI}/static/`));
}
