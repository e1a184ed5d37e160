// The topic's schema card: its versions from the admin schema API (newest first).
import { api, enc, explain, fmt } from "./core.js";

export function schemaCard() {
  return {
    versions: [],
    loaded: false,
    error: "",
    open: null, // the version whose definition is shown
    get latest() { return this.versions[0] || null; },
    pretty(data) {
      if (!data) return "(no definition: the type says it all)";
      try { return JSON.stringify(JSON.parse(data), null, 2); } catch (e) { return data; }
    },
    when(ms) { return fmt.time(ms); },
    propertiesText(v) { return Object.entries(v.properties || {}).map(([k, x]) => `${k}=${x}`).join(", "); },
    openVersions() { return this.versions.filter((x) => x.version === this.open); },
    async load() {
      const d = this.$el.closest("main").dataset;
      const path = `/admin/v2/schemas/${enc(d.tenant)}/${enc(d.namespace)}/${enc(d.topic)}/versions`;
      try {
        const body = await api(path);
        this.versions = [...(body?.getSchemaResponses || [])].reverse();
        this.open = this.latest ? this.latest.version : null;
        this.error = "";
      } catch (e) {
        this.versions = [];
        this.error = explain(e, "Schema");
      } finally {
        this.loaded = true;
      }
    },
  };
}
