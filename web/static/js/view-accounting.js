// Corral dashboard: accounting (#/accounting): GPU-hours, ended jobs, waits and JCTs over a period per user, team or
// day (GET /accounting), as bars or a line over the days, with the figures in a table and a CSV download.
"use strict";

Object.assign(Views, (() => {
  const C = Corral;
  const { html, mount } = C;

  const PERIODS = [["7 days", 7], ["30 days", 30], ["90 days", 90], ["1 year", 366]];
  const GROUPS = [["user", "User"], ["team", "Team"], ["day", "Day"]];

  // A row a group: its GPU-hours as a bar, the part held before the workers started lighter at its start.
  function bars(rows) {
    const top = Math.max(1e-9, ...rows.map((r) => r.gpu_hours));
    return html`<div class="bars" id="accounting-bars">${rows.map((r) => html`<div class="bar-row"
      data-key="${r.key}"><span>${r.key}</span><span class="meter wide stacked"
      title="${C.num(r.gpu_hours, 2)} GPU-h, ${C.num(r.idle_gpu_hours, 2)} of them before the workers started">
      <i class="idle" style="width:${(100 * r.idle_gpu_hours) / top}%"></i><i style="width:${
        (100 * (r.gpu_hours - r.idle_gpu_hours)) / top}%"></i></span><b>${C.num(r.gpu_hours, 1)}</b></div>`)}</div>`;
  }

  function table(rows, total, by) {
    const dur = (v) => (v === null ? "–" : C.duration(v));
    const cells = (r) => html`<td data-label="GPU-h">${C.num(r.gpu_hours, 2)}</td>
      <td data-label="idle GPU-h">${C.num(r.idle_gpu_hours, 2)}</td>
      <td data-label="ended">${r.jobs_ended} <small class="muted">(${r.jobs_succeeded} ok, ${r.jobs_failed} failed,
        ${r.jobs_cancelled} cancelled, ${r.jobs_timed_out} timed out)</small></td>
      <td data-label="wait p50 / p95">${dur(r.wait_p50_s)} / ${dur(r.wait_p95_s)}</td>
      <td data-label="JCT p50 / p95">${dur(r.jct_p50_s)} / ${dur(r.jct_p95_s)}</td>
      <td data-label="preempted">${r.preemptions}</td>`;
    return html`<table class="table cards" id="accounting-table"><thead><tr><th>${by}</th><th>GPU-h</th>
      <th>idle GPU-h</th><th>ended</th><th>wait p50 / p95</th><th>JCT p50 / p95</th><th>preempted</th></tr></thead>
      <tbody>${rows.map((r) => html`<tr data-key="${r.key}"><td data-label="${by}">${r.key}</td>${cells(r)}</tr>`)}
      <tr class="total" data-key="total"><td data-label="${by}"><b>total</b></td>${cells(total)}</tr></tbody></table>`;
  }

  function accounting(el) {
    let days = 30, by = "user";
    mount(el, html`<section><div class="row between"><h1>Accounting</h1>
      <div class="row"><div class="seg" id="accounting-period">${PERIODS.map(([label, d]) => html`<button type="button"
        data-days="${d}" class="${d === days ? "on" : ""}">${label}</button>`)}</div>
      <div class="seg" id="accounting-by">${GROUPS.map(([key, label]) => html`<button type="button" data-by="${key}"
        class="${key === by ? "on" : ""}">${label}</button>`)}</div>
      <button type="button" id="accounting-csv">CSV</button></div></div>
      <div id="accounting-summary" class="summary"></div><div class="card" id="accounting-chart"></div>
      <div id="accounting-body"><p class="muted">Loading…</p></div>
      <p class="muted small">GPU-hours held within the period, shares weighted; the lighter part of a bar was held
        before the job's workers started. An admin sees every job, anyone else their own and their team's.</p>
      </section>`);
    const query = () => {
      const until = Date.now() / 1000;
      return `since=${until - days * 86400}&until=${until}&by=${by}`;
    };
    const view = {
      async refresh() {
        const r = await C.request(`/accounting?${query()}`);
        const t = r.total;
        mount(el.querySelector("#accounting-summary"), html`
          <span><b>${C.num(t.gpu_hours, 1)}</b> GPU-hours</span>
          <span><b>${t.jobs_ended}</b> jobs ended (${t.jobs_succeeded} succeeded)</span>
          <span>wait p50 <b>${t.wait_p50_s === null ? "–" : C.duration(t.wait_p50_s)}</b></span>
          <span><b>${t.preemptions}</b> preemptions</span>`);
        const chart = el.querySelector("#accounting-chart");
        if (!r.rows.length) {
          mount(chart, html`<p class="muted">No job held a GPU or ended in this period.</p>`);
        } else if (by === "day") {
          const points = r.rows.map((row) => [Date.parse(`${row.key}T12:00:00Z`) / 1000, row.gpu_hours]);
          mount(chart, html`<h2>GPU-hours a day</h2>${Charts.line({ t0: r.since, t1: r.until,
            yFormat: (v) => v.toFixed(0), series: [{ name: "GPU-hours", colour: "#6a4c93", area: true, points }] })}`);
        } else {
          const sorted = r.rows.slice().sort((a, b) => b.gpu_hours - a.gpu_hours);
          mount(chart, html`<h2>GPU-hours by ${by}</h2>${bars(sorted)}`);
        }
        mount(el.querySelector("#accounting-body"), table(r.rows, t, by));
      },
    };
    const pick = (sel, attr, set) => el.querySelector(sel).addEventListener("click", (ev) => {
      const b = ev.target.closest("button");
      if (!b) return;
      set(b.dataset[attr]);
      el.querySelectorAll(`${sel} button`).forEach((x) => x.classList.toggle("on", x === b));
      view.refresh().catch(() => {});
    });
    pick("#accounting-period", "days", (v) => { days = Number(v); });
    pick("#accounting-by", "by", (v) => { by = v; });
    el.querySelector("#accounting-csv").addEventListener("click", async () => {
      // The API needs the token, which a plain link cannot send: fetch the CSV and save it from a data: URL.
      try {
        const text = await C.request(`/accounting.csv?${query()}`, { as: "text" });
        const a = document.createElement("a");
        a.href = `data:text/csv;charset=utf-8,${encodeURIComponent(text)}`;
        a.download = `corral-accounting-${by}.csv`;
        a.click();
      } catch (err) { mount(el.querySelector("#accounting-body"), ViewHelpers.errorBox(err)); }
    });
    return view;
  }

  return { accounting };
})());
