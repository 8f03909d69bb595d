// Corral dashboard: the views. Each is a function (element, route parameters) returning {refresh()}: app.js calls
// refresh() at once and then every few seconds while the view is open, so every view shows live data.
"use strict";

const Views = (() => {
  const C = Corral;
  const { html, raw, mount } = C;
  const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

  const errorBox = (err) => html`<p class="error">${err.status ? `HTTP ${err.status}: ` : ""}${err.message}</p>`;
  const jobLink = (id, text) => html`<a href="#/job/${id}">${text !== undefined ? text : `#${id}`}</a>`;

  // ---- sign in -----------------------------------------------------------------------------------------------------
  function signin(el, params) {
    mount(el, html`
      <section class="card narrow">
        <h1>Sign in</h1>
        <p>Paste an API token. Create one on the server with
          <code>corral token create --user NAME</code> (add <code>--admin</code> to switch policies).</p>
        <form id="signin-form">
          <label for="token">Token</label>
          <input id="token" name="token" type="password" autocomplete="off" placeholder="corral_…" required>
          <button type="submit">Sign in</button>
        </form>
        <p id="signin-message" class="${params.message ? "error" : "muted"}">${params.message ||
          "The token is kept in this browser (localStorage) and sent as Authorization: Bearer with every call."}</p>
      </section>`);
    el.querySelector("#signin-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const msg = el.querySelector("#signin-message");
      C.setToken(el.querySelector("#token").value.trim());
      try {
        await C.request("/cluster");
        location.hash = "#/map";
      } catch (err) {
        C.setToken("");
        msg.className = "error";
        msg.textContent = err.status === 401
          ? `That token was refused (401 Unauthorized: ${err.message}). Check it, or create a new one.`
          : `Could not reach the API: ${err.message}`;
      }
    });
    return { refresh() {}, static: true };
  }

  // ---- cluster map -------------------------------------------------------------------------------------------------
  function tenantCell(t, job) {
    const sd = job ? job.predicted_slowdown : null;
    const big = t.share >= 0.5;
    const title = `#${t.job_id} ${t.name} (${t.user}) — share ${t.share}, predicted slowdown ${C.slow(sd)}` +
      (job ? `, ${job.model}, ${C.gpus(job.num_gpus)}` : "");
    return html`<a class="tenant${big ? " big" : ""}" href="#/job/${t.job_id}" data-job-id="${t.job_id}"
        style="flex:${t.share} 0 0; background:${C.slowdownColour(sd)}" title="${title}">
        <span class="tname">${t.name}</span>
        <span class="tmeta">#${t.job_id} · ${t.share < 1 ? t.share : "whole"} · ${C.slow(sd)}</span></a>`;
  }

  function gpuCell(g, jobs) {
    const free = g.free_share;
    return html`<div class="gpu" data-gpu="${g.index}">
      <div class="gpu-head"><b>GPU ${g.local_index}</b><span>#${g.index}</span></div>
      <div class="gpu-body">${g.tenants.map((t) => tenantCell(t, jobs.get(t.job_id)))}
        ${free > 1e-6 ? html`<div class="free" style="flex:${free} 0 0">${free >= 1 ? "free" :
          `free ${+free.toFixed(2)}`}</div>` : ""}</div>
    </div>`;
  }

  function nicBar(net) {
    if (!net) return html`<span class="nic muted">NIC: –</span>`;
    const load = net.load || 0;
    const tip = `${C.num(net.demand_gbps, 1)} Gb/s of ${net.nic_gbps || "?"} Gb/s on average from ` +
      `${net.jobs.length} multi-node job(s): the contention model's duty cycles (above 100%, they contend)`;
    return html`<span class="nic" title="${tip}">NIC ${C.pct(load)}
      <span class="meter"><i style="width:${Math.min(100, 100 * load)}%;
        background:${load > 1 ? "#d1495b" : load > 0.7 ? "#edae49" : "#3c8dbc"}"></i></span>
      <small>${net.jobs.length} job${net.jobs.length === 1 ? "" : "s"} across nodes</small></span>`;
  }

  function map(el) {
    mount(el, html`<section>
      <div class="row between"><h1>Cluster</h1><div id="map-legend" class="legend">
        <span>Predicted slowdown:</span>
        ${[1.0, 1.1, 1.25, 1.4, 1.5].map((s) => html`<span class="key"><i style="background:${C.slowdownColour(s)}">
          </i>${s.toFixed(2)}×${s === 1.5 ? "+" : ""}</span>`)}
        <span class="key"><i class="hatched"></i>free</span></div></div>
      <div id="map-summary" class="summary"></div>
      <div id="map-nodes"><p class="muted">Loading the cluster…</p></div>
      <p class="muted small">Each GPU stacks its tenants, one band per job, as tall as its MPS share. NIC load is
        the contention model's: the running multi-node jobs' all-reduce duty cycles on each node's NIC.</p></section>`);
    const nodesEl = el.querySelector("#map-nodes");
    return {
      async refresh() {
        const [cluster, running, net] = await Promise.all([
          C.request("/cluster"), C.request("/jobs?state=running&limit=1000"),
          C.request("/stats/network").catch(() => null),
        ]);
        const jobs = new Map(running.jobs.map((j) => [j.id, j]));
        const nics = new Map((net ? net.nodes : []).map((n) => [n.node, n]));
        const t = cluster.totals;
        mount(el.querySelector("#map-summary"), html`
          <span><b>${t.gpus_allocated}</b>/${t.gpus} GPUs in use</span>
          <span><b>${C.num(t.share_allocated, 2)}</b> GPUs of share allocated</span>
          <span><b>${t.gpus_shared}</b> shared (MPS)</span>
          <span><b>${cluster.queue.running}</b> running</span>
          <span><a href="#/queue"><b>${cluster.queue.pending}</b> pending</a></span>
          <span>policy <b>${cluster.active_policy || "–"}</b></span>`);
        mount(nodesEl, cluster.nodes.map((n) => html`
          <div class="node${n.alive ? "" : " dead"}" data-node="${n.name}">
            <div class="node-head"><b>${n.name}</b><span class="muted">${n.preset} · ${n.gpus.length} GPUs</span>
              ${n.alive ? "" : html`<span class="badge state-failed">down</span>`}${nicBar(nics.get(n.name))}</div>
            <div class="gpus" style="grid-template-columns: repeat(${Math.min(8, n.gpus.length)}, minmax(0, 1fr))">
              ${n.gpus.map((g) => gpuCell(g, jobs))}</div>
          </div>`));
      },
    };
  }

  // ---- queue -------------------------------------------------------------------------------------------------------
  function queue(el) {
    mount(el, html`<section><h1>Queue</h1><div id="queue-body"><p class="muted">Loading…</p></div>
      <p class="muted small">Start estimates are approximate (free capacity and the jobs ahead), from the
        explanation endpoint; shown for the first ${25} jobs.</p></section>`);
    const estimates = new Map();
    let explainWorks = true, tick = 0;
    return {
      async refresh() {
        const data = await C.request("/jobs?state=pending&limit=1000");
        const jobs = data.jobs.slice();
        const hasPos = jobs.some((j) => j.queue_position !== undefined && j.queue_position !== null);
        jobs.sort(hasPos ? (a, b) => (a.queue_position ?? 1e9) - (b.queue_position ?? 1e9) : (a, b) => a.id - b.id);
        if (explainWorks && tick++ % 3 === 0) {
          await Promise.all(jobs.slice(0, 25).map(async (j) => {
            try {
              const ex = await C.request(`/jobs/${j.id}/explain`);
              estimates.set(j.id, ex.start_estimate_s);
            } catch (err) {
              if (err.status === 404 || err.status === 405) explainWorks = false;
            }
          }));
        }
        const body = el.querySelector("#queue-body");
        if (!jobs.length) { mount(body, html`<p class="muted">No job is waiting.</p>`); return; }
        mount(body, html`<table class="table" id="queue-table">
          <thead><tr><th>#</th><th>Job</th><th>User</th><th>GPUs</th><th>Model</th><th>Waiting</th>
            <th>Pending reason</th><th>Starts in</th></tr></thead>
          <tbody>${jobs.map((j, i) => html`<tr data-job-id="${j.id}">
            <td>${hasPos ? j.queue_position : i + 1}</td><td>${jobLink(j.id, `#${j.id} ${j.name}`)}</td>
            <td>${j.user}</td><td>${j.num_gpus}</td><td>${j.model}</td><td>${C.duration(Date.now() / 1000 -
              j.queued_since)}</td><td class="reason">${j.pending_reason || html`<span class="muted">waiting for
              the controller</span>`}</td>
            <td>${estimates.has(j.id) && estimates.get(j.id) !== null ? `≈ ${C.duration(estimates.get(j.id))}` :
              html`<span class="muted">–</span>`}</td></tr>`)}</tbody></table>
          ${hasPos ? "" : html`<p class="muted small">Positions by arrival order (the API gives none).</p>`}`);
      },
    };
  }

  // ---- job page ----------------------------------------------------------------------------------------------------
  // The explanation: from GET /jobs/{id}/explain, or, where the server has no such endpoint, the job's decisions.
  function explanationFromJob(job) {
    const placed = (job.decisions || []).filter((d) => d.action === "place").pop();
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    return {
      summary: placed ? `placed by ${placed.policy}: ${placed.reason || "no reason recorded"}` :
        job.pending_reason || `${job.state}; no placement recorded`,
      decision: placed ? { ...placed, candidates: (placed.candidates || []).map((c) => ({
        ...c, chosen: same(c.gpus, placed.gpus) && Math.abs(c.share - (placed.share || 0)) < 1e-9 })) } : null,
      neighbours: [], start_estimate_s: null,
    };
  }

  function explainSection(ex) {
    const d = ex.decision;
    const cands = d ? d.candidates || [] : [];
    const best = cands.length ? Math.min(...cands.map((c) => c.slowdown + c.others_added)) : null;
    return html`<h2>Why here</h2>
      <p class="summary-text">${ex.summary}</p>
      ${ex.start_estimate_s ? html`<p>Approximate start: in ≈ ${C.duration(ex.start_estimate_s)}.</p>` : ""}
      ${d ? html`<p class="muted">Decision by <b>${d.policy}</b> at ${C.stamp(d.at)}: ${d.action}${d.reason ?
        ` — ${d.reason}` : ""}.</p>` : ""}
      ${cands.length ? html`<table class="table candidates" id="candidates">
        <thead><tr><th></th><th>GPUs</th><th>Share</th><th>Its slowdown</th><th>Added to others</th><th>Sum</th>
        </tr></thead><tbody>${cands.map((c) => html`<tr class="${c.chosen ? "chosen" : ""}">
          <td>${c.chosen ? html`<b>chosen</b>` : ""}</td><td>${c.gpus.join(", ")}</td><td>${c.share}</td>
          <td><span class="chip" style="background:${C.slowdownColour(c.slowdown)}">${C.slow(c.slowdown)}</span></td>
          <td>+${C.num(c.others_added, 3)}</td>
          <td>${C.num(c.slowdown + c.others_added, 3)}${Math.abs(c.slowdown + c.others_added - best) < 1e-9 ?
            " (lowest)" : ""}</td></tr>`)}</tbody></table>`
        : d ? html`<p class="muted">The policy recorded no alternative candidates.</p>` : ""}
      ${ex.neighbours && ex.neighbours.length ? html`<p>Shares GPUs with: ${ex.neighbours.map((n) =>
        html`${jobLink(n.job_id, `#${n.job_id} ${n.name}`)} (GPUs ${n.gpus.join(", ")}) `)}</p>` : ""}`;
  }

  function job(el, params) {
    const id = Number(params.id);
    mount(el, html`<section class="job" data-job-id="${id}">
      <div id="job-head"><p class="muted">Loading job ${id}…</p></div>
      <div class="cols">
        <div class="card" id="job-placement"></div>
        <div class="card" id="job-slowdown"></div>
      </div>
      <div class="card" id="explain"></div>
      <div class="cols">
        <div class="card" id="job-events"></div>
        <div class="card" id="job-logs"><h2>Logs</h2><div id="logs-body" class="muted">Loading…</div></div>
      </div></section>`);
    let explainWorks = true;
    const logViews = new Map();
    async function cancel() {
      try { await C.request(`/jobs/${id}/cancel`, { method: "POST" }); } catch (err) { alert(err.message); }
    }
    return {
      async refresh() {
        const j = await C.request(`/jobs/${id}`);
        let ex = null;
        if (explainWorks) {
          try { ex = await C.request(`/jobs/${id}/explain`); } catch (err) {
            if (err.status === 404 || err.status === 405) explainWorks = false; else throw err;
          }
        }
        ex = ex || explanationFromJob(j);
        const pos = j.queue_position ?? ex.queue_position;
        mount(el.querySelector("#job-head"), html`<div class="row between"><h1>#${j.id} ${j.name}
            ${C.stateBadge(j.state)}</h1>
          ${TERMINAL.has(j.state) ? "" : html`<button id="cancel" type="button" class="danger">Cancel job</button>`}
          </div>
          <p class="facts"><span>${j.user}</span><span>${j.kind}</span><span>${j.model}</span>
            <span>${C.gpus(j.num_gpus)}</span><span>${C.duration(j.duration_s)} isolated</span>
            <span>submitted ${C.ago(j.submitted_at)}</span>
            ${j.started_at ? html`<span>started ${C.ago(j.started_at)}</span>` : ""}
            ${j.finished_at ? html`<span>finished ${C.ago(j.finished_at)}</span>` : ""}
            ${j.state === "pending" && pos ? html`<span>queue position <b>${pos}</b></span>` : ""}
            <span>attempt ${j.attempt}</span></p>
          <div class="progress" title="progress"><i style="width:${100 * (j.progress || 0)}%"></i>
            <span>${C.pct(j.progress || 0)}</span></div>
          ${j.pending_reason ? html`<p class="reason">Pending: ${j.pending_reason}</p>` : ""}
          ${j.error ? html`<p class="error">${j.error}</p>` : ""}`);
        const btn = el.querySelector("#cancel");
        if (btn) btn.addEventListener("click", cancel);

        mount(el.querySelector("#job-placement"), html`<h2>Placement</h2>${j.allocation.length ? html`
          <table class="table" id="placement"><thead><tr><th>Rank</th><th>Node</th><th>GPU</th><th>Local</th>
            <th>Share</th></tr></thead><tbody>${j.allocation.map((a) => html`<tr><td>${a.rank}</td>
            <td>${a.node}</td><td>${a.gpu}</td><td>${a.local_gpu}</td><td>${a.share}</td></tr>`)}</tbody></table>`
          : html`<p class="muted">${j.state === "pending" ? "Not placed yet." : "Holds no GPU now."}</p>`}`);

        const bars = [["predicted now", j.predicted_slowdown], ["predicted (avg over run)", j.predicted_slowdown_avg],
          ["observed", j.observed_slowdown ?? ex.observed_slowdown]];
        const top = Math.max(1.5, ...bars.map((b) => b[1] || 0));
        mount(el.querySelector("#job-slowdown"), html`<h2>Slowdown</h2>
          <div class="bars">${bars.map(([label, v]) => html`<div class="bar-row"><span>${label}</span>
            <span class="meter wide"><i style="width:${v ? (100 * v) / top : 0}%; background:${C.slowdownColour(v)}">
            </i></span><b>${C.slow(v)}</b></div>`)}</div>
          <p class="muted small">1.00× is the job alone on its GPUs. Observed = wall time run / isolated duration
            (once it succeeds).</p>`);

        mount(el.querySelector("#explain"), explainSection(ex));

        mount(el.querySelector("#job-events"), html`<h2>Timeline</h2><ol class="timeline" id="timeline">
          ${(j.events || []).map((e) => html`<li><time title="${C.stamp(e.at)}">${C.clock(e.at)}</time>
            <span class="badge kind-${e.kind}">${e.kind}</span> ${e.message}</li>`)}</ol>`);

        const logs = await C.request(`/jobs/${id}/logs?tail=200`).catch(() => null);
        const body = el.querySelector("#logs-body");
        if (!logs || !logs.logs.length) {
          body.className = "muted";
          body.textContent = j.state === "pending" ? "No run yet." : "No log output.";
          return;
        }
        body.className = "";
        for (const r of logs.logs) {
          let pre = logViews.get(r.rank);
          if (!pre) {
            const box = document.createElement("details");
            box.open = true;
            box.innerHTML = `<summary>rank ${r.rank} <small class="muted">${C.esc(r.path)}</small></summary>`;
            pre = document.createElement("pre");
            pre.className = "log";
            box.appendChild(pre);
            if (!logViews.size) body.textContent = "";
            body.appendChild(box);
            logViews.set(r.rank, pre);
          }
          const text = r.text || "(no output yet)";
          if (pre.textContent !== text) {
            const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
            pre.textContent = text;
            if (atEnd) pre.scrollTop = pre.scrollHeight;  // follow the tail unless the user scrolled up
          }
        }
      },
    };
  }

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
          <span>avg utilisation <b>${C.pct(sum.avg_utilisation, 1)}</b></span>
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

  // ---- policies ----------------------------------------------------------------------------------------------------
  const hasReport = (name) => /^(rl|deepshare):[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name);
  const METRIC_FMT = {
    avg_jct_s: C.duration, p50_jct_s: C.duration, p99_jct_s: C.duration, avg_queue_s: C.duration,
    avg_slowdown: C.slow, avg_contention_slowdown: C.slow, gpu_util: (v) => C.pct(v, 1),
    preemptions: (v) => C.num(v, 0), slo_violation_frac: (v) => C.pct(v, 1),
  };

  async function showReport(box, name) {
    mount(box, html`<p class="muted">Loading the report of ${name}…</p>`);
    let r;
    try { r = await C.request(`/policies/${encodeURIComponent(name)}/report`); } catch (err) {
      mount(box, errorBox(err)); return;
    }
    const m = r.metadata, s = r.summary;
    mount(box, html`<h2>${name}: training and evaluation</h2>
      <p class="facts"><span>${m.formulation || "corral"} formulation</span><span>${m.algo || "?"}</span>
        <span>${m.timesteps ?? "?"} timesteps</span><span>trained in ${C.duration(m.train_wall_s)}</span>
        <span>encoding v${m.encoding_version ?? "?"}</span></p>
      ${m.command ? html`<pre class="cmd">${m.command}</pre>` : ""}
      ${s.rows.length ? html`<h3>Held-out evaluation: mean over ${s.scenarios} scenarios</h3>
        <table class="table" id="report-table"><thead><tr><th>metric</th>${s.columns.map((c) => html`<th>${c}</th>`)}
        </tr></thead><tbody>${s.rows.map((row) => html`<tr><td>${row.metric}</td>${row.values.map((v) =>
          html`<td>${v === null ? "–" : (METRIC_FMT[row.metric] || C.num)(v)}</td>`)}</tr>`)}</tbody></table>
        <details><summary>Scenarios</summary><ul>${r.scenarios.map((x) => html`<li>${x}</li>`)}</ul></details>`
        : html`<p class="muted">No evaluation report next to this agent.</p>`}
      <h3>Learning curve</h3><div id="curve">${r.curve ? html`<p class="muted">Loading…</p>` :
        html`<p class="muted">No learning curve recorded.</p>`}</div>`);
    if (r.curve) {
      // An <img src> cannot send the bearer token: fetch the PNG and show it from a blob URL.
      try {
        const blob = await C.request(`/policies/${encodeURIComponent(name)}/curve.png`, { as: "blob" });
        const img = new Image();
        img.alt = `learning curve of ${name}`;
        img.className = "curve";
        img.src = URL.createObjectURL(blob);
        const holder = box.querySelector("#curve");
        holder.textContent = "";
        holder.appendChild(img);
      } catch (err) { mount(box.querySelector("#curve"), errorBox(err)); }
    }
  }

  function policies(el, params) {
    mount(el, html`<section><h1>Policies</h1><div id="policy-list"></div><p id="policy-message"></p>
      <div class="card" id="report"><p class="muted">Pick a trained agent (rl:…, deepshare:…) to see its evaluation
        report and learning curve.</p></div></section>`);
    const list = el.querySelector("#policy-list"), msg = el.querySelector("#policy-message");
    list.addEventListener("click", async (ev) => {
      const act = ev.target.closest("button[data-activate]");
      const rep = ev.target.closest("button[data-report]");
      if (rep) showReport(el.querySelector("#report"), rep.dataset.report);
      if (!act) return;
      msg.className = "muted";
      msg.textContent = `Switching to ${act.dataset.activate}…`;
      try {
        await C.request("/policies/active", { method: "PUT", body: { name: act.dataset.activate } });
        msg.className = "ok";
        msg.textContent = `${act.dataset.activate} is now the active policy.`;
        view.refresh();
      } catch (err) {
        msg.className = "error";
        msg.textContent = err.status === 403 ? `Only admins may switch the policy (${err.message}).` : err.message;
      }
    });
    const view = {
      async refresh() {
        const p = await C.request("/policies");
        mount(list, html`<table class="table" id="policies"><thead><tr><th>Policy</th><th>Kind</th><th></th><th></th>
          </tr></thead><tbody>${p.available.map((n) => html`<tr class="${n === p.active ? "active" : ""}"
            data-policy="${n}"><td><b>${n}</b> ${n === p.active ? html`<span class="badge state-running">active
            </span>` : ""}</td><td>${n.startsWith("rl:") ? "learned (Corral RL agent)" : n.startsWith("deepshare:") ?
              "learned (DeepShare baseline)" : "heuristic"}</td>
            <td>${hasReport(n) ? html`<button type="button" class="link" data-report="${n}">report</button>` : ""}</td>
            <td>${n === p.active ? "" : html`<button type="button" data-activate="${n}">Activate</button>`}</td>
          </tr>`)}</tbody></table>`);
      },
    };
    if (params.name) showReport(el.querySelector("#report"), params.name);
    return view;
  }

  // ---- submit ------------------------------------------------------------------------------------------------------
  function submit(el) {
    mount(el, html`<section class="card narrow wide-form"><h1>Submit a job</h1>
      <form id="submit-form" novalidate>
        ${field("name", "Name", html`<input id="f-name" name="name" required maxlength="200">`)}
        ${field("kind", "Kind", html`<select id="f-kind" name="kind"><option value="emulated">emulated (runs for the
          predicted time; no command)</option><option value="command">command (runs a shell entrypoint)</option>
          </select>`)}
        ${field("model", "Model", html`<select id="f-model" name="model"><option value="">loading…</option></select>`,
          "what the contention model assumes the job's traffic looks like")}
        ${field("num_gpus", "GPUs", html`<input id="f-num_gpus" name="num_gpus" type="number" step="any" min="0"
          value="1">`, "a whole number ≥ 1, or a share of one GPU between 0 and 1 (MPS), e.g. 0.5")}
        ${field("duration_s", "Duration (s)", html`<input id="f-duration_s" name="duration_s" type="number" step="any"
          min="0" value="60">`, "emulated: run time alone; command: an optional estimate")}
        ${field("entrypoint", "Entrypoint", html`<textarea id="f-entrypoint" name="entrypoint" rows="2"
          placeholder="python train.py"></textarea>`, "command jobs only")}
        ${field("priority", "Priority", html`<input id="f-priority" name="priority" type="number" step="1" value="0">`)}
        ${field("slo_ms", "Latency SLO (ms)", html`<input id="f-slo_ms" name="slo_ms" type="number" step="any"
          min="0">`, "optional, inference jobs")}
        <p class="field-error" data-error-for="_schema"></p>
        <button type="submit">Submit</button> <span id="submit-message"></span>
      </form></section>`);
    const form = el.querySelector("#submit-form"), msg = el.querySelector("#submit-message");
    const kind = form.querySelector("#f-kind");
    const syncKind = () => {
      form.querySelector('[data-field="entrypoint"]').hidden = kind.value !== "command";
    };
    kind.addEventListener("change", syncKind);
    syncKind();
    C.request("/models").then((r) => {
      mount(form.querySelector("#f-model"), r.models.map((m) => html`<option value="${m.name}">${m.name}
        (${m.kind}, ${m.mem_gb} GB)</option>`));
      const resnet = r.models.find((m) => m.name === "ResNet-50-bs64");
      if (resnet) form.querySelector("#f-model").value = resnet.name;
    }).catch((err) => { msg.className = "error"; msg.textContent = err.message; });

    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      form.querySelectorAll(".field-error").forEach((e) => { e.textContent = ""; });
      form.querySelectorAll(".invalid").forEach((e) => e.classList.remove("invalid"));
      const v = (n) => form.elements[n].value.trim();
      const number = (n) => (v(n) === "" ? undefined : Number(v(n)));
      const body = { name: v("name"), kind: v("kind"), model: v("model"), num_gpus: number("num_gpus"),
        duration_s: number("duration_s"), priority: number("priority"), slo_ms: number("slo_ms") };
      if (body.kind === "command") body.entrypoint = form.elements.entrypoint.value;
      Object.keys(body).forEach((k) => body[k] === undefined && delete body[k]);
      msg.className = "muted";
      msg.textContent = "Submitting…";
      try {
        const job = await C.request("/jobs", { method: "POST", body });
        msg.className = "ok";
        msg.textContent = `Submitted job #${job.id}.`;
        location.hash = `#/job/${job.id}`;
      } catch (err) {
        msg.className = "error";
        const errors = (err.body.errors && err.body.errors.json) || {};
        let shown = false;
        for (const [name, msgs] of Object.entries(errors)) {
          const slot = form.querySelector(`[data-error-for="${CSS.escape(name)}"]`);
          if (!slot) continue;
          slot.textContent = [].concat(msgs).join(" ");
          const input = form.elements[name];
          if (input) input.classList.add("invalid");
          shown = true;
        }
        msg.textContent = err.status === 422 && shown ? "Please fix the fields marked in red." : err.message;
      }
    });
    return { refresh() {}, static: true };
  }

  // ---- what-if -----------------------------------------------------------------------------------------------------
  // Ask POST /whatif how the present queue would play out under another policy, with more nodes or an extra job.
  const WHATIF_ROWS = [
    ["avg_jct_s", "average JCT (from now)", "dur"], ["p95_jct_s", "p95 JCT", "dur"],
    ["avg_queue_s", "average queueing", "dur"], ["gpu_util", "GPU utilisation", "pct"],
    ["makespan_s", "makespan", "dur"],
  ];

  function whatifCell(d, kind) {
    if (!d) return "–";
    const f = kind === "pct" ? (x) => C.pct(x, 1) : (x) => C.duration(x);
    return html`${f(d.mean)} <small class="muted">(${f(d.min)} – ${f(d.max)})</small>`;
  }

  function whatif(el) {
    mount(el, html`<section class="card narrow wide-form"><h1>What if…</h1>
      <p class="muted">Simulates the present cluster and queue from now, several times (each seed draws the jobs' true
        remaining work around its estimate), and compares with the active policy as it is. Nothing changes.</p>
      <form id="whatif-form" novalidate>
        ${field("policy", "Policy", html`<select id="f-policy" name="policy"><option value="">the active one</option>
          </select>`)}
        ${field("extra_nodes", "Extra nodes", html`<input id="f-extra_nodes" name="extra_nodes" type="number" min="0"
          step="1" value="0">`, "like the last node of the cluster")}
        ${field("seeds", "Seeds", html`<input id="f-seeds" name="seeds" type="number" min="1" max="20" step="1"
          value="5">`)}
        ${field("job_gpus", "Add a job: GPUs", html`<input id="f-job_gpus" name="job_gpus" type="number" step="any"
          min="0" placeholder="none">`, "optional: a hypothetical ResNet-50 job arriving now")}
        ${field("job_duration", "… its duration (s)", html`<input id="f-job_duration" name="job_duration"
          type="number" step="any" min="0" value="3600">`)}
        <p class="field-error" data-error-for="_schema"></p>
        <button type="submit">Simulate</button> <span id="whatif-message"></span>
      </form></section><section id="whatif-result"></section>`);
    const form = el.querySelector("#whatif-form"), msg = el.querySelector("#whatif-message");
    const out = el.querySelector("#whatif-result");
    C.request("/policies").then((r) => {
      mount(form.querySelector("#f-policy"), [html`<option value="">the active one (${r.active || "none"})</option>`,
        ...r.available.filter((n) => !n.endsWith(":NAME")).map((n) => html`<option value="${n}">${n}</option>`)]);
    }).catch((err) => { msg.className = "error"; msg.textContent = err.message; });

    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      form.querySelectorAll(".field-error").forEach((e) => { e.textContent = ""; });
      const v = (n) => form.elements[n].value.trim();
      const body = { extra_nodes: Number(v("extra_nodes") || 0), seeds: Number(v("seeds") || 5) };
      if (v("policy")) body.policy = v("policy");
      if (v("job_gpus")) {
        body.jobs = [{ name: "what-if job", model: "ResNet-50-bs64", num_gpus: Number(v("job_gpus")),
          duration_s: Number(v("job_duration")) }];
      }
      msg.className = "muted";
      msg.textContent = "Simulating…";
      try {
        const r = await C.request("/whatif", { method: "POST", body });
        msg.className = "ok";
        msg.textContent = `${r.seeds.length} seeds, ${r.jobs.running} running and ${r.jobs.pending} pending jobs.`;
        const base = r.baseline;
        mount(out, html`<div class="card"><h2>${r.policy} on ${r.cluster.gpus} GPUs</h2>
          <table class="whatif"><thead><tr><th></th><th>this scenario: mean (min – max)</th>
            ${base ? html`<th>as it is (${base.policy}, no changes)</th>` : ""}</tr></thead><tbody>
          ${WHATIF_ROWS.map(([k, label, kind]) => html`<tr><td>${label}</td><td>${whatifCell(r.metrics[k], kind)}</td>
            ${base ? html`<td>${whatifCell(base.metrics[k], kind)}</td>` : ""}</tr>`)}
          </tbody></table>
          ${r.hypothetical.map((j) => html`<p>The added job (${C.gpus(j.num_gpus)}) would finish in about
            <strong>${j.jct_s === null ? "–" : C.duration(j.jct_s)}</strong>, after waiting
            ${j.queue_s === null ? "–" : C.duration(j.queue_s)}.</p>`)}
          <p class="muted">JCT and queueing count from now. ${base ? "" : "Nothing was changed, so there is no baseline."}
          </p></div>`);
      } catch (err) {
        msg.className = "error";
        const errors = (err.body && err.body.errors && err.body.errors.json) || {};
        const names = { jobs: "job_gpus" };
        for (const [name, msgs] of Object.entries(errors)) {
          const slot = form.querySelector(`[data-error-for="${CSS.escape(names[name] || name)}"]`);
          if (slot) slot.textContent = JSON.stringify(msgs);
        }
        msg.textContent = err.message;
      }
    });
    return { refresh() {}, static: true };
  }

  function field(name, label, control, help) {
    return html`<div class="field" data-field="${name}"><label for="f-${name}">${label}</label>${control}
      ${help ? html`<small class="muted">${help}</small>` : ""}<div class="field-error" data-error-for="${name}"></div>
      </div>`;
  }

  return { signin, map, queue, job, metrics, policies, submit, whatif, errorBox };
})();
