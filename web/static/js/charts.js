// Small SVG charts for the metrics page: time-series lines (gaps where a bucket has no value) with axes and a legend.
// The SVG is written as HTML text (the HTML parser puts <svg> in the SVG namespace by itself).
"use strict";

const Charts = (() => {
  const { html, raw } = Corral;
  const W = 640, H = 220, MARGIN = { r: 12, t: 12, b: 28 };
  const TICK_PX = 11, TICK_GAP = 6;  // .chart .tick's font size (user units), and the labels' distance from the axis

  // How wide a tick label is drawn: the left margin is sized to the widest y label, so "1 h 40 min" is not clipped.
  let measurer = null;
  function textWidth(text) {
    measurer = measurer || document.createElement("canvas").getContext("2d");
    measurer.font = `${TICK_PX}px ${getComputedStyle(document.body).fontFamily}`;
    return measurer.measureText(text).width;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // series: [{name, colour, points: [[t, v|null], ...], area?: bool}]; t in Unix seconds.
  function line({ series, t0, t1, yFormat = (v) => String(v), yMax = null, empty = "no data in this window" }) {
    const values = series.flatMap((s) => s.points.map((p) => p[1]).filter((v) => v !== null && isFinite(v)));
    const top = yMax !== null ? yMax : niceMax(Math.max(0, ...values));
    const yLabels = [0, 1, 2, 3, 4].map((i) => [(top * i) / 4, yFormat((top * i) / 4)]);
    const M = { ...MARGIN, l: Math.ceil(Math.max(...yLabels.map(([, text]) => textWidth(text)))) + TICK_GAP + 4 };
    const x = (t) => M.l + ((t - t0) / Math.max(1e-9, t1 - t0)) * (W - M.l - M.r);
    const y = (v) => H - M.b - (v / top) * (H - M.t - M.b);
    const parts = [];
    for (const [v, text] of yLabels) {  // horizontal grid and y labels
      parts.push(`<line class="grid" x1="${M.l}" x2="${W - M.r}" y1="${y(v)}" y2="${y(v)}"/>`);
      parts.push(`<text class="tick" x="${M.l - TICK_GAP}" y="${y(v) + 4}" text-anchor="end">${Corral.esc(text)}` +
        "</text>");
    }
    for (let i = 0; i <= 5; i++) {  // x labels: clock times
      const t = t0 + ((t1 - t0) * i) / 5;
      const label = new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
      const anchor = i === 0 ? "start" : i === 5 ? "end" : "middle";  // keep the end labels inside the chart
      parts.push(`<text class="tick" x="${x(t)}" y="${H - 8}" text-anchor="${anchor}">${label}</text>`);
    }
    for (const s of series) {
      // Split at missing values so a gap stays a gap instead of a misleading straight line.
      const runs = [[]];
      for (const [t, v] of s.points) {
        if (v === null || !isFinite(v)) { if (runs[runs.length - 1].length) runs.push([]); continue; }
        runs[runs.length - 1].push([x(t), y(Math.min(v, top))]);
      }
      for (const run of runs.filter((r) => r.length)) {
        const d = run.map(([px, py], i) => `${i ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join("");
        if (s.area && run.length > 1) {
          const base = y(0).toFixed(1);
          parts.push(`<path d="${d}L${run[run.length - 1][0].toFixed(1)},${base}L${run[0][0].toFixed(1)},${base}Z"` +
            ` fill="${s.colour}" opacity="0.18"/>`);
        }
        parts.push(`<path d="${d}" fill="none" stroke="${s.colour}" stroke-width="2"/>`);
        if (run.length <= 3) {  // lone points would be invisible as a line
          for (const [px, py] of run) parts.push(`<circle cx="${px}" cy="${py}" r="3" fill="${s.colour}"/>`);
        }
      }
    }
    if (!values.length) {
      parts.push(`<text class="empty" x="${W / 2}" y="${H / 2}" text-anchor="middle">${Corral.esc(empty)}</text>`);
    }
    const legend = series.map((s) => html`<span class="key"><i style="background:${s.colour}"></i>${s.name}</span>`);
    return html`<div class="legend">${legend}</div>
      <svg class="chart" viewBox="0 0 ${W} ${H}" role="img">${raw(parts.join(""))}</svg>`;
  }

  return { line };
})();
