// Theme before first paint (classic script, runs in <head>): "auto" follows
// prefers-color-scheme; "light"/"dark" are saved choices in localStorage.
(function () {
  var mode = "auto";
  try { mode = localStorage.getItem("folio-theme") || "auto"; } catch (e) { /* storage blocked */ }
  if (mode === "light" || mode === "dark") document.documentElement.dataset.theme = mode;
})();
