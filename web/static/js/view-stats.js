// Corral dashboard: the figures over time: the cluster's metrics (#/metrics) and the teams' quotas and fair
// share (#/teams).
"use strict";

Object.assign(Views, (() => {
  const C = Corral;
  const { html, mount } = C;
  const { knowTeams, teamColour, teamKey } = ViewHelpers;

  // ---- metrics -----------------------------------------------------------------------------------------------------
  const WINDOWS = [["15 min", 900, 15], ["1 h", 3600, 60], ["6 h", 21600, 300], ["24 h", 86400, 900]];

  function metrics(el) {
    let win = WINDOWS[1];
    mount(el, html`<section><div class="row between"><h1>Metrics</h1><div class="seg" id="windows">
      ${WINDOWS.map((w, i) => html`<button type="button" data-i="${i}" class="${i === 1 ? "on" : ""}">${w[0]}</button>`)}
      </div></div><div id="metrics-summary" class="summary"></div><div class="charts" id="charts"></div></section>`);
    const view = {
      async refresh() {
        const s = await C.request(`/stats?window_s=${win[1]}&bucket_s=${win[2]}`);
        const mid = (b) => (b.start + b.end) / 2;
        const at = (key, f = (v) => v) => s.buckets.map((b) => [mid(b), b[key] === null ? null : f(b[key])]);
        const t0 = s.now - s.window_s, t1 = s.now;
        const sum = s.summary;
        mount(el.querySelector("#metrics-summary"), html`
          <span><b>${sum.finished}</b> finished (${sum.succeeded} succeeded)</span>
          <span>avg JCT <b>${C.duration(sum.avg_jct_s)}</b></span>
          <span>avg queueing <b>${C.duration(sum.avg_queue_s)}</b></span>
          <span>avg utilisation <b>${C.pct(sum.avg_utilisation, 1)}</b>${sum.since > t0 + 1
            ? ` over its ${C.duration(s.now - sum.since)} of life` : ""}</span>
          <span><b>${sum.running_now}</b> running, <b>${sum.pending_now}</b> pending now</span>`);
        const minutes = (v) => C.duration(v);
        mount(el.querySelector("#charts"), html`
          <div class="card"><h2>Job completion time</h2>${Charts.line({ t0, t1, yFormat: minutes, series: [
            { name: "avg JCT of jobs finishing", colour: "#3c6e9f", points: at("avg_jct_s") },
            { name: "max", colour: "#b5c7d8", points: at("max_jct_s") }] })}</div>
          <div class="card"><h2>Queueing delay</h2>${Charts.line({ t0, t1, yFormat: minutes, series: [
            { name: "avg wait of jobs starting", colour: "#d1495b", points: at("avg_queue_s") }] })}</div>
          <div class="card"><h2>Jobs</h2>${Charts.line({ t0, t1, yFormat: (v) => v.toFixed(0), series: [
            { name: "running", colour: "#2e8b57", points: at("running") },
            { name: "pending", colour: "#edae49", points: at("pending") }] })}</div>
          <div class="card"><h2>GPU utilisation (share allocated)</h2>${Charts.line({ t0, t1, yMax: 100,
            yFormat: (v) => `${v.toFixed(0)}%`, series: [
              { name: `% of ${s.gpus} GPUs`, colour: "#6a4c93", area: true,
                points: at("utilisation", (v) => 100 * v) }] })}</div>`);
      },
    };
    el.querySelector("#windows").addEventListener("click", (ev) => {
      const b = ev.target.closest("button");
      if (!b) return;
      win = WINDOWS[Number(b.dataset.i)];
      el.querySelectorAll("#windows button").forEach((x) => x.classList.toggle("on", x === b));
      view.refresh().catch(() => {});
    });
    return view;
  }

  // ---- teams -------------------------------------------------------------------------------------------------------
  // Every team's quota and what it holds, borrows and lends now, and over a window its fair-share usage over quota
  // (the key the tenancy frame orders teams by: lowest first) and the GPUs it held, from GET /stats/teams.
  const TEAM_POINTS = 120;
  const gpuNum = (x) => (x === null || x === undefined ? "–" : String(+Number(x).toFixed(2)));

  // Who may rank how high: the highest priority the team's members may give, whether they may be non-preemptible,
  // and the classes they may name beyond that (where a member has no setting of their own).
  function ceilingText(c) {
    if (!c) return "–";
    const parts = [`≤ ${c.max_priority}`];
    if (c.allow_nonpreemptible) parts.push("non-preemptible");
    if (c.priority_classes.length) parts.push(`classes ${c.priority_classes.join(", ")}`);
    return parts.join("; ");
  }

  function teamRow(t) {
    const cell = (k, content) => html`<td data-k="${k}">${content}</td>`;
    return html`<tr data-team="${t.name}">
      ${cell("name", teamKey(t.name))}
      ${cell("quota_gpus", gpuNum(t.quota_gpus))}
      ${cell("borrow_limit_gpus", t.borrow_limit_gpus === null ? "no limit" : gpuNum(t.borrow_limit_gpus))}
      ${cell("in_use_gpus", gpuNum(t.in_use_gpus))}
      ${cell("borrowed_gpus", gpuNum(t.borrowed_gpus))}
      ${cell("lent_gpus", gpuNum(t.lent_gpus))}
      ${cell("pending_jobs", t.pending_jobs)}
      ${cell("running_jobs", t.running_jobs)}
      ${cell("priority_ceiling", ceilingText(t.priority_ceiling))}
      ${cell("usage_gpu_h", C.num(t.usage_gpu_s / 3600, 2))}
      ${cell("usage_ratio", t.usage_ratio === null ? html`<span class="muted">no quota</span>` :
        C.duration(t.usage_ratio))}</tr>`;
  }

  function teams(el) {
    let win = WINDOWS[1];
    const buttons = WINDOWS.map((w, i) => html`<button type="button" data-i="${i}" class="${i === 1 ? "on" : ""}">
      ${w[0]}</button>`);
    mount(el, html`<section><div class="row between"><h1>Teams</h1><div class="seg" id="team-windows">${buttons}
      </div></div><div id="teams-summary" class="summary"></div>
      <div id="teams-body" class="scroll-x"><p class="muted">Loading…</p></div>
      <div class="charts" id="team-charts"></div>
      <p class="muted small">In use: GPUs the team's running jobs hold (shares count as fractions). Borrowed: in use
        beyond its quota. Lent: its idle quota that other teams' borrowed jobs hold. Fair-share usage is GPU-hours
        decayed with the half-life; over quota, it reads as time the team used its whole quota for. Teams go lowest
        first, for the queue and for idle GPUs to borrow. Priority ceiling: the highest priority its members' jobs
        may give, and what more an admin allowed them (non-preemptible jobs, priority classes).</p></section>`);
    const view = {
      async refresh() {
        const r = await C.request(`/stats/teams?window_s=${win[1]}&points=${TEAM_POINTS}`);
        knowTeams(r.teams.map((t) => t.name));
        const quotas = r.teams.reduce((a, t) => a + t.quota_gpus, 0);
        mount(el.querySelector("#teams-summary"), html`
          <span><b>${r.teams.length}</b> team${r.teams.length === 1 ? "" : "s"}</span>
          <span>quotas <b>${gpuNum(quotas)}</b> of <b>${r.gpus}</b> GPUs</span>
          <span>fair-share half-life <b>${C.duration(r.half_life_s)}</b></span>`);
        mount(el.querySelector("#teams-body"), html`<table class="table" id="teams-table"><thead><tr><th>Team</th>
          <th>Quota (GPUs)</th><th>Borrowing limit</th><th>In use</th><th>Borrowed</th><th>Lent</th><th>Pending</th>
          <th>Running</th><th>Priority ceiling</th><th>Fair-share usage (GPU-h)</th><th>Usage / quota</th></tr></thead>
          <tbody>${r.teams.map(teamRow)}</tbody></table>`);
        const t1 = r.now, t0 = r.now - r.window_s;
        const line = (t, key) => ({ name: t.name, colour: teamColour(t.name),
          points: r.times.map((at, i) => [at, t.series[key][i]]) });
        mount(el.querySelector("#team-charts"), html`
          <div class="card" id="chart-ratio"><h2>Fair-share usage over quota</h2>${Charts.line({ t0, t1,
            yFormat: C.duration, empty: "no team with a quota", series: r.teams.filter((t) => t.quota_gpus > 0)
              .map((t) => line(t, "usage_ratio")) })}</div>
          <div class="card" id="chart-in-use"><h2>GPUs in use</h2>${Charts.line({ t0, t1,
            yFormat: (v) => gpuNum(v), series: r.teams.map((t) => line(t, "gpus_in_use")) })}</div>`);
      },
    };
    el.querySelector("#team-windows").addEventListener("click", (ev) => {
      const b = ev.target.closest("button");
      if (!b) return;
      win = WINDOWS[Number(b.dataset.i)];
      el.querySelectorAll("#team-windows button").forEach((x) => x.classList.toggle("on", x === b));
      view.refresh().catch(() => {});
    });
    return view;
  }

  return { metrics, teams };
})());
