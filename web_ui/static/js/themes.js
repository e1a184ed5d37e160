// Theme store: "auto" follows prefers-color-scheme; the toggle cycles
// auto -> the opposite of the system theme -> the system theme -> auto,
// saved in localStorage. theme.js applies the saved choice before first paint.
const KEY = "folio-theme";
const media = window.matchMedia("(prefers-color-scheme: dark)");

function apply(mode) {
  if (mode === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = mode;
  window.dispatchEvent(new Event("themechange"));
}

export function install(Alpine) {
  let saved = "auto";
  try { saved = localStorage.getItem(KEY) || "auto"; } catch (e) { /* storage blocked */ }
  Alpine.store("theme", {
    mode: saved,
    effective() { return this.mode === "auto" ? (media.matches ? "dark" : "light") : this.mode; },
    label() { return { auto: "◐ auto", dark: "☾ dark", light: "☀ light" }[this.mode]; },
    toggle() {
      const system = media.matches ? "dark" : "light";
      const opposite = system === "dark" ? "light" : "dark";
      this.mode = this.mode === "auto" ? opposite : this.mode === opposite ? system : "auto";
      try { localStorage.setItem(KEY, this.mode); } catch (e) { /* storage blocked */ }
      apply(this.mode);
    },
  });
  media.addEventListener("change", () => window.dispatchEvent(new Event("themechange")));
}
