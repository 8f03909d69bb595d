// Corral dashboard: a job's page (#/job/ID): its facts, placement, slowdown, why it runs where it does, its
// timeline and logs.
"use strict";

Object.assign(Views, (() => {
  const C = Corral;
  const { html, mount } = C;
  const { elasticWords, isElastic, jobLink, sloText, startWords } = ViewHelpers;

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

  // The job ids a figure was computed beside, from the explanation's neighbour fields (ids, or objects with job_id),
  // under whichever name the server uses; null when the server does not say (older servers).
  function besideIds(x) {
    if (!x) return null;
    const v = x.neighbour_job_ids ?? x.neighbour_ids ?? x.neighbours ?? x.neighbor_job_ids ?? x.neighbors ??
      x.beside_job_ids ?? x.beside;
    if (!Array.isArray(v)) return null;
    return v.map((n) => (n !== null && typeof n === "object" ? n.job_id ?? n.id : n))
      .filter((n) => n !== null && n !== undefined);
  }

  // The sizes an elastic job ran at, oldest first: each start ("placed") and each resize, with the policy's reason
  // for a resize (its event's words: "2 -> 4 GPUs: grown to 4 GPUs: ...").
  function sizeHistory(j) {
    const rows = (j.events || []).filter((e) => (e.kind === "placed" || e.kind === "resized") && e.data &&
      Array.isArray(e.data.gpus));
    if (!rows.length) return "";
    return html`<table class="table" id="job-sizes"><thead><tr><th>When</th><th>GPUs</th><th>Why</th></tr></thead>
      <tbody>${rows.map((e) => html`<tr><td><time title="${C.stamp(e.at)}">${C.clock(e.at)}</time></td>
        <td>${e.data.gpus.length}</td><td>${e.kind === "placed" ? "started" : e.message}</td></tr>`)}</tbody></table>`;
  }

  // Progress where the job reports it (the API gives null for a command job, which reports none): a bar; otherwise,
  // for a running job, how long its workers have been up.
  function progressLine(j) {
    if (j.progress !== null && j.progress !== undefined) {
      return html`<div class="progress" id="job-progress" title="progress"><i style="width:${100 * j.progress}%"></i>
        <span>${C.pct(j.progress)}</span></div>`;
    }
    return j.state === "running" && j.started_at ? html`<p class="muted" id="job-progress">running for
      ${C.duration(Date.now() / 1000 - j.started_at)} (this job reports no progress)</p>` : "";
  }

  // A job that holds no GPU now but did: where its latest run was, when, and what ended it.
  function lastPlacement(j, last) {
    const ended = last.ended_by;
    return html`<div id="last-placement"><p>${j.state === "pending" ? "Not placed now. " : "Holds no GPU now. "}Last
      ran on <b>${last.where}</b> (attempt ${last.attempt}), from <time title="${C.stamp(last.placed_at)}">${
      C.clock(last.placed_at)}</time> to <time title="${C.stamp(last.released_at)}">${C.clock(last.released_at)}</time>${
      ended ? html`, until it was <span class="badge kind-${ended.kind}">${ended.kind}</span>: <span class="ended-reason">${
      ended.reason}</span>` : ""}.</p></div>`;
  }

  const besideWords = (ids) => (ids === null ? "" : ids.length ?
    html`, beside job${ids.length === 1 ? "" : "s"} ${ids.map((n, i) => html`${i ? ", " : ""}${jobLink(n)}`)}` :
    ", alone");

  // Each slowdown figure with when it was computed and against which neighbours, so the decision's figure and the
  // present one read as two moments, not a contradiction ("at decision time 12:01:03 beside jobs 4, 7: 1.56×; now,
  // alone: 1.00×"). Works without the timing fields: then the decision's time and today's GPU sharers are used.
  function timingLine(ex, j) {
    const d = ex.decision;
    if (!d) return "";
    const chosen = (d.candidates || []).find((c) => c.chosen);
    const then = chosen ? chosen.slowdown : d.predicted_slowdown;
    const thenAt = (chosen && chosen.computed_at) ?? d.computed_at ?? d.at;
    const thenBeside = besideIds(chosen) ?? besideIds(d);
    const parts = [html`at decision time <time title="${C.stamp(thenAt)}">${C.clock(thenAt)}</time>${
      besideWords(thenBeside)}: <b>${C.slow(then)}</b>`];
    const nowFig = ex.now || ex.placement;
    if (j.state === "running" && nowFig) {
      const nowAt = nowFig.computed_at ?? (ex.placement && ex.placement.computed_at);
      const nowBeside = besideIds(ex.now) ?? besideIds(ex.placement) ??
        (ex.neighbours || []).map((n) => n.job_id);
      const nowValue = nowFig.predicted_slowdown ?? j.predicted_slowdown;
      parts.push(html`now${nowAt ? html` (computed <time title="${C.stamp(nowAt)}">${C.clock(nowAt)}</time>)` : ""}${
        besideWords(nowBeside)}: <b>${C.slow(nowValue)}</b>`);
    }
    return html`<p id="explain-timing">Predicted slowdown ${parts.map((x, i) => html`${i ? "; " : ""}${x}`)}.</p>`;
  }

  function explainSection(ex, j) {
    const d = ex.decision;
    const cands = d ? d.candidates || [] : [];
    const best = cands.length ? Math.min(...cands.map((c) => c.slowdown + c.others_added)) : null;
    const besides = cands.map((c) => besideIds(c));
    const showBeside = besides.some((b) => b !== null);
    const scoredAt = d ? (cands.find((c) => c.computed_at) || {}).computed_at ?? d.computed_at ?? d.at : null;
    return html`<h2>Why here</h2>
      <p class="summary-text">${ex.summary}</p>
      ${timingLine(ex, j)}
      ${j.state === "pending" && ex.start_estimate_s !== undefined ? html`<p id="start-estimate">Start:
        <b>${startWords(ex)}</b>${ex.start_estimate_basis ? html` <span class="muted">(${
        ex.start_estimate_basis})</span>` : ""}.</p>` : ""}
      ${d ? html`<p class="muted">Decision by <b>${d.policy}</b> at ${C.stamp(d.at)}: ${d.action}${d.reason ?
        ` — ${d.reason}` : ""}.</p>` : ""}
      ${cands.length ? html`<div class="scroll-x"><table class="table candidates" id="candidates">
        <caption class="muted small">Candidates as scored at decision time, ${C.stamp(scoredAt)}</caption>
        <thead><tr><th></th><th>GPUs</th><th>Share</th>${showBeside ? html`<th>Beside</th>` : ""}<th>Its slowdown</th>
        <th>Added to others</th><th>Sum</th></tr></thead><tbody>${cands.map((c, ci) => html`<tr
          class="${c.chosen ? "chosen" : ""}">
          <td>${c.chosen ? html`<b>chosen</b>` : ""}</td><td class="where">${c.where || c.gpus.join(", ")}</td>
          <td>${c.share}</td>
          ${showBeside ? html`<td>${besides[ci] === null ? "–" : besides[ci].length ?
            besides[ci].map((n, i) => html`${i ? ", " : ""}${jobLink(n)}`) : "alone"}</td>` : ""}
          <td><span class="chip" style="background:${C.slowdownColour(c.slowdown)}">${C.slow(c.slowdown)}</span></td>
          <td>+${C.num(c.others_added, 3)}</td>
          <td>${C.num(c.slowdown + c.others_added, 3)}${Math.abs(c.slowdown + c.others_added - best) < 1e-9 ?
            " (lowest)" : ""}</td></tr>`)}</tbody></table></div>`
        : d ? html`<p class="muted">The policy recorded no alternative candidates.</p>` : ""}
      ${ex.neighbours && ex.neighbours.length ? html`<p>Shares GPUs with: ${ex.neighbours.map((n) =>
        html`${jobLink(n.job_id, `#${n.job_id} ${n.name}`)} (${n.where || `GPUs ${n.gpus.join(", ")}`}) `)}</p>` : ""}`;
  }

  function job(el, params) {
    const id = Number(params.id);
    if (!Number.isInteger(id) || id < 0) {
      mount(el, html`<section class="job"><p class="error" id="job-error">No job ${params.id}: a job id is a whole
        number (as in #/job/12).</p></section>`);
      return { refresh() {}, static: true };
    }
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
    // Hold or release a pending job (`corral hold` / `corral release`); the page's next refresh shows the outcome.
    async function holdOrRelease(ev) {
      try { await C.request(`/jobs/${id}/${ev.target.dataset.action}`, { method: "POST" }); } catch (err) {
        alert(err.message);
      }
    }
    return {
      async refresh() {
        let j;
        try { j = await C.request(`/jobs/${id}`); } catch (err) {
          if (err.status === 401) throw err;  // back to sign in
          // The page's answer is the error itself (404: no such job; 403: another user's), never "Loading…".
          mount(el.querySelector("#job-head"), html`<p class="error" id="job-error">${err.status === 404 ?
            `No job ${id}` : `Could not load job ${id}`} (${err.status ? `HTTP ${err.status}: ` : ""}${err.message}).
            ${err.status === 404 ? html`<a href="#/jobs">All jobs</a>` : ""}</p>`);
          el.querySelectorAll(".card").forEach((c) => { c.hidden = true; });
          return;
        }
        el.querySelectorAll(".card").forEach((c) => { c.hidden = false; });
        let ex = null;
        if (explainWorks) {
          try { ex = await C.request(`/jobs/${id}/explain`); } catch (err) {
            if (err.status === 404 || err.status === 405) explainWorks = false; else throw err;
          }
        }
        ex = ex || explanationFromJob(j);
        const pos = j.queue_position ?? ex.queue_position;
        const slo = j.slo;  // the server's verdict (scheduler/live/slo.py); null without an SLO
        // An elastic job's bounds go under its facts (#job-elastic), and right under them the sizes it ran at over
        // time (#job-sizes): its starts and resizes, from its events.
        mount(el.querySelector("#job-head"), html`<div class="row between"><h1>#${j.id} ${j.name}
            ${C.stateBadge(j.state)}</h1>
          <div class="row">${j.state === "pending" ? html`<button id="hold" type="button"
            data-action="${j.held_at ? "release" : "hold"}" title="${j.held_at ? "let it start again, in its place" :
            "keep its place in the queue but do not start it until released"}">${j.held_at ? "Release" :
            "Hold"}</button>` : ""}
          ${j.terminal ? "" : html`<button id="cancel" type="button" class="danger">Cancel job</button>`}
          </div></div>
          <p class="facts"><span>${j.user}</span><span>${j.kind}</span><span>${j.model}</span>
            <span>${C.gpus(j.num_gpus)}</span>${isElastic(j) && j.allocation.length ? html`<span
              id="job-gpus-now">on ${j.allocation.length} GPUs now</span>` : ""}
            <span>${j.duration_estimate ? "~" : ""}${C.duration(j.duration_s)} isolated</span>
            <span>submitted ${C.ago(j.submitted_at)}</span>
            ${j.started_at ? html`<span>started ${C.ago(j.started_at)}</span>` : ""}
            ${j.finished_at ? html`<span>finished ${C.ago(j.finished_at)}</span>` : ""}
            ${j.state === "pending" && pos ? html`<span>queue position <b>${pos}</b></span>` : ""}
            ${j.held_at ? html`<span id="job-held">held by ${j.held_by} ${C.ago(j.held_at)}</span>` : ""}
            <span>attempt ${j.attempt}</span></p>
          ${j.duration_estimate ? html`<p id="job-duration-estimate" class="muted">No duration given;
            ${j.duration_estimate.text}.</p>` : ""}
          ${isElastic(j) ? html`<p id="job-elastic">${elasticWords(j)}</p>${sizeHistory(j)}` : ""}
          ${progressLine(j)}
          ${j.entrypoint ? html`<pre class="cmd" id="job-command">${j.entrypoint}</pre>` : ""}
          ${j.env && Object.keys(j.env).length ? html`<pre class="cmd" id="job-env" title="environment">${
            Object.entries(j.env).map(([k, v]) => `${k}=${v}\n`)}</pre>` : ""}
          ${setupSection(j)}
          ${slo ? html`<p id="job-slo" class="slo-line ${slo.at_risk ? "at-risk" : ""}">${sloText(slo)}</p>` : ""}
          ${j.pending_reason ? html`<p class="reason">Pending: ${j.pending_reason}</p>` : ""}
          ${dependencyList(j)}${arrayTable(j)}
          ${j.error ? html`<p class="error" id="job-failure">${j.state === "failed" ? "Failed" : "Last run failed"}:
            ${j.error}</p>` : j.state === "failed" ? html`<p class="error" id="job-failure">Failed (no reason
            recorded).</p>` : ""}`);
        const btn = el.querySelector("#cancel");
        if (btn) btn.addEventListener("click", cancel);
        const hold = el.querySelector("#hold");
        if (hold) hold.addEventListener("click", holdOrRelease);

        const last = j.last_placement ?? ex.last_placement;
        mount(el.querySelector("#job-placement"), html`<h2>Placement</h2>${j.allocation.length ? html`
          <p id="placement-where">${C.allocationWords(j.allocation, true)}</p>
          <table class="table" id="placement"><thead><tr><th>Rank</th><th>Node</th><th>GPU</th><th>Share</th>
            </tr></thead><tbody>${j.allocation.map((a) => html`<tr><td>${a.rank}</td>
            <td>${a.node}</td><td title="cluster-wide GPU ${a.gpu}">GPU ${a.local_gpu}</td><td>${a.share}</td>
            </tr>`)}</tbody></table>`
          : last ? lastPlacement(j, last)
          : html`<p class="muted" id="placement-none">${j.state === "pending" ? "Not placed yet." :
            "Holds no GPU now."}</p>`}`);

        const bars = [["predicted now", j.predicted_slowdown], ["predicted (avg over run)", j.predicted_slowdown_avg],
          ["observed", j.observed_slowdown ?? ex.observed_slowdown]];
        const top = Math.max(1.5, ...bars.map((b) => b[1] || 0));
        mount(el.querySelector("#job-slowdown"), html`<h2>Slowdown</h2>
          <div class="bars">${bars.map(([label, v]) => html`<div class="bar-row"><span>${label}</span>
            <span class="meter wide"><i style="width:${v ? (100 * v) / top : 0}%; background:${C.slowdownColour(v)}">
            </i></span><b>${C.slow(v)}</b></div>`)}</div>
          <p class="muted small">1.00× is the job alone on its GPUs. Observed = wall time run / isolated duration
            (once it succeeds).</p>`);

        mount(el.querySelector("#explain"), explainSection(ex, j));

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

  // Where a job may run (its `constraints`) and what it runs in (its `environment`, and the node folder `workdir`),
  // each part a labelled line; nothing for a job with neither. Every value is the user's: escaped by `html`.
  // (spaces between the chips: a copy, or a screen reader, reads them apart; the flex layout spaces them anyway)
  const list = (xs) => html`<span class="chips">${xs.map((x, i) => html`${i ? " " : ""}<code class="chip">${x}</code>`)
    }</span>`;
  const line = (id, label, value) => html`<dt>${label}</dt><dd data-part="${id}">${value}</dd>`;
  function archiveWords(w) {
    const kib = w.bytes / 1024;
    return html`a folder uploaded with the job, ${kib < 1 ? `${w.bytes} B` : `${C.num(kib, 1)} KiB`} zipped
      <code class="hash" title="sha256 ${w.sha256}">sha256 ${String(w.sha256).slice(0, 12)}…</code>`;
  }
  function setupSection(j) {
    const c = j.constraints || {};
    const env = j.environment || {};
    const labels = Object.entries(c.labels || {}).map(([k, v]) => `${k}=${v}`);
    const where = [
      c.gpu_type ? line("gpu_type", "GPU type", html`<code class="chip">${c.gpu_type}</code>`) : "",
      labels.length ? line("labels", "Node labels", list(labels)) : "",
      (c.nodes || []).length ? line("nodes", "Only on", list(c.nodes)) : "",
      (c.exclude || []).length ? line("exclude", "Never on", list(c.exclude)) : "",
    ].filter(Boolean);
    const how = [
      (env.pip || []).length ? line("pip", "pip packages", list(env.pip)) : "",
      env.venv ? line("venv", "Virtual env", html`<code class="chip">${env.venv}</code> <span class="muted">(the
        node's own)</span>`) : "",
      env.image ? line("image", "Container image", html`<code class="chip">${env.image}</code>`) : "",
      env.working_dir ? line("working_dir", "Working dir", archiveWords(env.working_dir)) : "",
      j.workdir ? line("workdir", "Working dir", html`<code>${j.workdir}</code> <span class="muted">(on the
        node)</span>`) : "",
    ].filter(Boolean);
    if (!where.length && !how.length) return "";
    return html`<div class="job-setup">${where.length ? html`<div id="job-constraints"><h2>Runs only where</h2>
      <dl class="kv">${where}</dl></div>` : ""}${how.length ? html`<div id="job-environment"><h2>Environment</h2>
      <dl class="kv">${how}</dl></div>` : ""}</div>`;
  }

  // What a job waits for (GET /jobs/{id}'s `dependencies`), each with its state and whether its condition holds.
  function dependencyList(j) {
    const deps = j.dependencies || [];
    if (!deps.length) return "";
    const met = (d) => (d.met === true ? "met" : d.met === false ? "never met" : "not yet");
    return html`<div id="job-deps"><h2>Depends on</h2><ul class="deps">${deps.map((d) => html`<li
      data-job="${d.job}">${d.condition} ${jobLink(d.job)} ${d.name ? html`${d.name} ${C.stateBadge(d.state)}` : ""}
      <span class="muted dep-met">${met(d)}</span></li>`)}</ul></div>`;
  }

  // A task's array: every task with its state, and how many may run at once.
  function arrayTable(j) {
    const a = j.array;
    if (!a) return "";
    const counts = Object.entries(a.states).map(([state, n]) => `${n} ${state}`).join(", ");
    return html`<div id="job-array"><h2>Array #${a.id}</h2>
      <p>task <b>${j.array_index}</b> of ${a.count}${a.max_running ? `, at most ${a.max_running} running at once` : ""}:
        ${counts}</p>
      <table class="table" id="array-tasks"><thead><tr><th>Task</th><th>Job</th><th>State</th></tr></thead><tbody>
      ${a.tasks.map((t) => html`<tr data-index="${t.index}"><td>${t.index}</td><td>${jobLink(t.id)}</td>
        <td>${C.stateBadge(t.state)}</td></tr>`)}</tbody></table></div>`;
  }

  return { job };
})());
