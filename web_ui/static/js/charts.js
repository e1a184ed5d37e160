// Time-series charts on uPlot (loaded as a classic script: window.uPlot). Colours
// come from the theme's CSS variables; a theme change or resize redraws.

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
}

function shortNum(v) {
  const n = Math.abs(v);
  if (n >= 1e9) return `${+(v / 1e9).toFixed(1)}G`;
  if (n >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return `${+v.toFixed(2)}`;
}

const clockFormat = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });

function clock(seconds) {
  return clockFormat.format(new Date(seconds * 1000));
}

export class TimeChart {
  // series: [{label, color: "--css-var"}]
  // minSpanS: the x axis spans at least this many seconds (a short history is not stretched)
  constructor(el, series, height = 200, minSpanS = 60) {
    this.el = el;
    this.minSpanS = minSpanS;
    this.series = series;
    this.height = height;
    this.data = [[], ...series.map(() => [])];
    this.plot = null;
    this.build();
    new ResizeObserver(() => this.resize()).observe(el);
    window.addEventListener("themechange", () => this.build());
  }

  options() {
    const text = cssVar("--muted");
    const grid = { stroke: cssVar("--grid"), width: 1 };
    return {
      width: Math.max(this.el.clientWidth, 300),
      height: this.height,
      scales: {
        // from the data itself, at least a minute wide (uPlot pads a single point by years)
        x: { time: true, range: (u) => {
          const xs = u.data[0];
          const hi = xs.length ? xs[xs.length - 1] : Date.now() / 1000;
          return [Math.min(xs.length ? xs[0] : hi, hi - this.minSpanS), hi];
        } },
        y: { range: (u, min, max) => [0, Math.max(max * 1.1, 1)] } },
      axes: [
        // one clock time per tick (uPlot's default adds a date line that overlaps on short spans)
        { stroke: text, grid, ticks: grid, space: 80, values: (u, vals) => vals.map(clock) },
        { stroke: text, grid, ticks: grid, size: 56, values: (u, vals) => vals.map(shortNum) },
      ],
      series: [{}, ...this.series.map((s) => ({
        label: s.label, stroke: cssVar(s.color), width: 2, points: { show: (u) => u.data[0].length < 30 },
        value: (u, v) => (v === null || v === undefined ? "–" : shortNum(v)),
      }))],
      legend: { show: true },
    };
  }

  build() {
    if (!window.uPlot) return;
    if (this.plot) this.plot.destroy();
    this.el.replaceChildren();
    this.plot = new window.uPlot(this.options(), this.data, this.el);
  }

  resize() {
    if (this.plot && this.el.clientWidth > 0) this.plot.setSize({ width: this.el.clientWidth, height: this.height });
  }

  // times in ms, one array per series
  set(times, ...values) {
    this.data = [times.map((t) => t / 1000), ...values];
    if (this.plot) this.plot.setData(this.data);
    else this.build();
  }
}

// A bounded client-side sample buffer (used when the server keeps no history).
export class Samples {
  constructor(keys, maxAgeMs = 5 * 60 * 1000) {
    this.keys = keys;
    this.maxAgeMs = maxAgeMs;
    this.t = [];
    this.v = Object.fromEntries(keys.map((k) => [k, []]));
  }

  add(now, values) {
    this.t.push(now);
    for (const k of this.keys) this.v[k].push(values[k] ?? null);
    while (this.t.length && this.t[0] < now - this.maxAgeMs) {
      this.t.shift();
      for (const k of this.keys) this.v[k].shift();
    }
  }

  columns() { return [this.t, ...this.keys.map((k) => this.v[k])]; }
}
