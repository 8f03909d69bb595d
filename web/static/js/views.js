// Corral dashboard: the views. Each is a function (element, route parameters) returning {refresh()}: app.js calls
// refresh() at once and then every few seconds while the view is open, so every view shows live data.
"use strict";

const Views = (() => {
  const C = Corral;
  const { html, raw, mount } = C;
  const TERMINAL = new Set(["succeeded", "failed", "cancelled", "timed_out"]);

  const errorBox = (err) => html`<p class="error">${err.status ? `HTTP ${err.status}: ` : ""}${err.message}</p>`;
  const jobLink = (id, text) => html`<a href="#/job/${id}">${text !== undefined ? text : `#${id}`}</a>`;

  // The model catalog (GET /models), fetched once per page load: inference models carry their isolated latency.
  let catalogPromise = null;
  function catalog() {
    catalogPromise = catalogPromise || C.request("/models")
      .then((r) => new Map(r.models.map((m) => [m.name, m])))
      .catch((err) => { catalogPromise = null; throw err; });
    return catalogPromise;
  }

  // An inference job's SLO against the latency the contention model predicts for it: the model's isolated latency
  // times the job's predicted slowdown (now if it runs, else averaged over its run, else alone), the simulator's rule
  // for an SLO violation. Null for jobs without an SLO.
  function sloStatus(j, model) {
    if (j.slo_ms === null || j.slo_ms === undefined) return null;
    const alone = model && model.latency_ms ? model.latency_ms : null;
    if (alone === null) return { slo: j.slo_ms, predicted: null, risk: null, basis: "" };
    const [slowdown, basis] = j.state === "running" && j.predicted_slowdown ? [j.predicted_slowdown, "now"]
      : j.predicted_slowdown_avg ? [j.predicted_slowdown_avg, "averaged over its run"] : [1, "alone"];
    const predicted = alone * slowdown;
    return { slo: j.slo_ms, alone, slowdown, predicted, basis, risk: predicted > j.slo_ms };
  }

  function sloText(st) {
    if (!st) return "";
    if (st.predicted === null) return `SLO ${C.num(st.slo, 0)} ms (no isolated latency known for this model)`;
    return `SLO ${C.num(st.slo, 0)} ms: predicted ${C.num(st.predicted, 1)} ms (${C.num(st.alone, 1)} ms alone × ` +
      `${C.slow(st.slowdown)}, ${st.basis}) — ${st.risk ? "at risk" : "within"}`;
  }

  const sloBadge = (st) => (st ? html`<span class="slo ${st.risk ? "at-risk" : st.risk === false ? "ok" : ""}"
    title="${sloText(st)}">${st.risk ? "SLO at risk" : `SLO ${C.num(st.slo, 0)} ms`}</span>` : "");

  // Team colours, the same on the cluster map and the Teams page: `default` (no quota: it only borrows) is grey, the
  // other teams take the palette in name order. The names come from GET /stats/teams, fetched again when a team
  // appears that the page has not seen (a new team must not take a colour another one already shows).
  const DEFAULT_TEAM = "default";
  const TEAM_PALETTE = ["#3c6e9f", "#d1495b", "#2e8b57", "#edae49", "#6a4c93", "#00798c", "#c3603a", "#8a9a5b",
    "#b5179e", "#4d5359"];
  let teamNames = null;  // the teams other than default, sorted; null until known
  function knowTeams(names) { teamNames = names.filter((n) => n !== DEFAULT_TEAM).sort(); }
  async function teamsKnown(names) {
    if (teamNames && names.every((n) => n === DEFAULT_TEAM || teamNames.includes(n))) return;
    const r = await C.request("/stats/teams?window_s=60&points=1");
    knowTeams(r.teams.map((t) => t.name));
  }
  function teamColour(name) {
    const i = name === DEFAULT_TEAM || !teamNames ? -1 : teamNames.indexOf(name);
    if (i < 0) return "#9aa5b1";
    return i < TEAM_PALETTE.length ? TEAM_PALETTE[i] : `hsl(${Math.round((i * 137.5) % 360)}, 55%, 45%)`;
  }
  const teamKey = (name) => html`<span class="key" data-team="${name}"><i style="background:${teamColour(name)}"></i>
    ${name}</span>`;

  // Why a job waits or failed: the controller's pending reason, and the failure reason (`error`) of a failed job or
  // of a requeued job's last run.
  function reasonCell(j) {
    const parts = [];
    if (j.state === "pending") {
      parts.push(j.pending_reason ? html`<span>${j.pending_reason}</span>` :
        html`<span class="muted">waiting for the controller</span>`);
    }
    if (j.error) {
      parts.push(html`<span class="error-text">${j.state === "failed" ? "" : "last run failed: "}${j.error}</span>`);
    } else if (j.state === "failed") {
      parts.push(html`<span class="error-text">failed (no reason recorded)</span>`);
    }
    return parts.map((x, i) => html`${i ? html`<br>` : ""}${x}`);
  }

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
  // With teams in use, a band also carries its job's team: a stripe of the team's colour on its left edge and the
  // name in its label; the background stays the predicted slowdown.
  function tenantCell(t, job, teams) {
    const sd = job ? job.predicted_slowdown : null;
    const big = t.share >= 0.5;
    const team = teams && t.team ? t.team : null;
    const named = t.user !== null && t.user !== undefined;  // another user's job comes without name and user
    const title = (named ? `#${t.job_id} ${t.name} (${t.user}${t.team ? `, team ${t.team}` : ""})` :
      `#${t.job_id}, another user's job${t.team ? ` (team ${t.team})` : ""}`) + ` — share ${t.share}, ` +
      `predicted slowdown ${C.slow(sd)}` + (job ? `, ${job.model}, ${C.gpus(job.num_gpus)}` : "");
    return html`<a class="tenant${big ? " big" : ""}${team ? " teamed" : ""}" href="#/job/${t.job_id}"
        data-job-id="${t.job_id}" data-team="${t.team || ""}" title="${title}"
        style="flex:${t.share} 0 0; background:${C.slowdownColour(sd)}${team ? `; --team:${teamColour(team)}` : ""}">
        <span class="tname">${named ? t.name : "another user's job"}</span>
        <span class="tmeta">${team ? html`<span class="tteam">${team}</span> · ` : ""}#${t.job_id} ·
          ${t.share < 1 ? t.share : "whole"} · ${C.slow(sd)}</span></a>`;
  }

  // GPU health, as the node's agent last reported it (`corral node start --api`): a badge per node, and one on each
  // GPU that is not ok. Nodes whose agent never reported show nothing (a plain `ray start` node, `corral serve`'s own).
  const GOOD_GPU = ["ok", "virtual"];

  function gpuReadingText(r) {
    const parts = [`GPU ${r.index}: ${r.status}`];
    if (r.temperature_c !== null && r.temperature_c !== undefined) parts.push(`${r.temperature_c} °C`);
    if (r.ecc_uncorrected) parts.push(`${r.ecc_uncorrected} uncorrected ECC error(s)`);
    if (r.xid_errors && r.xid_errors.length) parts.push(`XID ${r.xid_errors.join(", ")}`);
    if (r.error) parts.push(r.error);
    return parts.join(", ");
  }

  function nodeHealthBadge(h) {
    if (!h) return "";
    const bad = h.gpus.filter((r) => !GOOD_GPU.includes(r.status));
    const title = `reported ${C.duration(h.age_s)} ago (every ${h.interval_s} s)` +
      (h.gpus.length ? `\n${h.gpus.map(gpuReadingText).join("\n")}` : "");
    const stale = h.stale ? html`<span class="badge health-stale node-health-stale" title="${title}">health stale:
      last report ${C.duration(h.age_s)} ago</span>` : h.agent === "stopped"
      ? html`<span class="badge health-stale node-health-stale" title="${title}">agent stopped</span>` : "";
    const was = h.stale || h.agent === "stopped" ? "last: " : "";  // what the node said, not what it is now
    const state = bad.length
      ? html`<span class="badge state-failed node-health" data-health="degraded" title="${title}">${was}GPU trouble:
          ${bad.length} of ${h.gpus.length}</span>`
      : html`<span class="badge health-ok node-health" data-health="ok" title="${title}">${was}GPUs ok</span>`;
    return html`${state}${stale}`;
  }

  function gpuHealthBadge(r) {
    if (!r || GOOD_GPU.includes(r.status)) return "";
    return html`<span class="badge state-failed gpu-health" title="${gpuReadingText(r)}">${r.status}</span>`;
  }

  function gpuCell(g, jobs, teams, reading) {
    const free = g.free_share;
    const bad = reading && !GOOD_GPU.includes(reading.status);
    // A closed GPU (down, drained or faulty node: the controller's rule) takes no new job: its idle part is not free.
    const closed = g.closed ? html`<div class="closed-gpu" style="flex:${Math.max(free, 0.25)} 0 0"
      title="${g.closed}">closed</div>` : "";
    return html`<div class="gpu${bad ? " unhealthy" : ""}${g.closed ? " closed" : ""}" data-gpu="${g.index}"
      data-closed="${g.closed || ""}" title="${g.closed || ""}">
      <div class="gpu-head"><b>GPU ${g.local_index}</b>${gpuHealthBadge(reading)}<span class="cluster-gpu"
        title="cluster-wide GPU ${g.index}: the number decisions and candidates use">cluster ${g.index}</span></div>
      <div class="gpu-body">${g.tenants.map((t) => tenantCell(t, jobs.get(t.job_id), teams))}
        ${g.closed ? closed : free > 1e-6 ? html`<div class="free" style="flex:${free} 0 0">${free >= 1 ? "free" :
          `free ${+free.toFixed(2)}`}</div>` : ""}</div>
    </div>`;
  }

  // An admin's drain (`corral node drain`): nothing new starts on the node; its reason is the admin's text.
  function drainBadge(n) {
    if (!n.drain) return "";
    const d = n.drain;
    const tip = `drained by ${d.by || "?"} at ${C.stamp(d.at)}, ${d.now ? "its jobs requeued" :
      "its running jobs finishing"}: no new job starts here (corral node resume ${n.name})`;
    return html`<span class="badge state-pending node-drain" title="${tip}">drained${d.reason ? `: ${d.reason}` : ""}</span>`;
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
      <div id="map-teams" class="legend" hidden></div>
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
        // Teams are marked once any exists besides default; until then the map looks as it did before teams.
        const onMap = [...new Set(cluster.nodes.flatMap((n) => n.gpus.flatMap((g) => g.tenants.map((x) => x.team))))]
          .filter((x) => x).sort();
        await teamsKnown(onMap).catch(() => {});
        const teams = Boolean(teamNames && teamNames.length);
        const legend = el.querySelector("#map-teams");
        legend.hidden = !teams || !onMap.length;
        mount(legend, html`<span>Teams:</span>${onMap.map(teamKey)}
          <a class="small" href="#/teams">quotas and fair share</a>`);
        const t = cluster.totals;
        const closedGpus = t.gpus - t.gpus_usable;
        mount(el.querySelector("#map-summary"), html`
          <span id="map-free"><b>${t.gpus_free}</b> free of ${t.gpus_usable} usable GPUs</span>
          ${closedGpus ? html`<span id="map-closed" title="on a down or drained node, or reported faulty: no new job
            starts there"><b>${closedGpus}</b> closed</span>` : ""}
          <span><b>${t.gpus_allocated}</b> with jobs</span>
          <span><b>${C.num(t.share_allocated, 2)}</b> GPUs of share allocated</span>
          <span><b>${t.gpus_shared}</b> shared (MPS)</span>
          <span><b>${cluster.queue.running}</b> running</span>
          <span><a href="#/queue"><b>${cluster.queue.pending}</b> pending</a></span>
          <span>policy <b>${cluster.active_policy || "–"}</b></span>
          ${cluster.fabric ? html`<span id="map-fabric" title="the network above the servers the contention model
            sees (corral serve --fabric)">fabric <b>${cluster.fabric}</b></span>` : ""}`);
        const nodeCard = (n) => {
          const readings = new Map((n.health ? n.health.gpus : []).map((r) => [r.index, r]));
          return html`
          <div class="node${n.alive ? "" : " dead"}${n.drain ? " drained" : ""}" data-node="${n.name}">
            <div class="node-head"><b>${n.name}</b><span class="muted">${n.preset} · ${n.gpus.length} GPUs</span>
              ${n.alive ? html`<span class="muted node-since" title="${C.stamp(n.since)}">up since ${C.ago(n.since)}</span>`
                : html`<span class="badge state-failed" title="${C.stamp(n.since)}">down since ${C.ago(n.since)}</span>`}${
                drainBadge(n)}${nodeHealthBadge(n.health)}${nicBar(nics.get(n.name))}</div>
            <div class="gpus" style="grid-template-columns: repeat(${Math.min(8, n.gpus.length)}, minmax(0, 1fr))">
              ${n.gpus.map((g) => gpuCell(g, jobs, teams, readings.get(g.local_index)))}</div>
          </div>`;
        };
        const racks = byRack(cluster.nodes);
        // A cluster whose nodes name no rack looks as it did before racks had names: one list of nodes.
        mount(nodesEl, racks.size === 1 && racks.has("") ? cluster.nodes.map(nodeCard)
          : [...racks].map(([rack, nodes]) => rackGroup(rack, nodes, nodeCard)));
      },
    };
  }

  // The nodes by the rack they name (`corral node start --rack`), racks in the order of their first node (the
  // cluster model's order); the nodes naming none together under "", as the model fills racks with them in order.
  function byRack(nodes) {
    const racks = new Map();
    nodes.forEach((n) => {
      const key = n.rack || "";
      if (!racks.has(key)) racks.set(key, []);
      racks.get(key).push(n);
    });
    return racks;
  }

  // One rack of the map: a heading with its free GPUs (a topology-aware policy keeps a gang in one rack when one
  // holds it), then its nodes.
  function rackGroup(rack, nodes, nodeCard) {
    const gpus = nodes.flatMap((n) => n.gpus);
    const free = gpus.filter((g) => !g.tenants.length && !g.closed).length;
    return html`<section class="rack" data-rack="${rack}">
      <h2 class="rack-head">${rack ? `Rack ${rack}` : "No rack named"}
        <span class="muted">${nodes.length} node${nodes.length === 1 ? "" : "s"} · ${free} of ${gpus.length} GPUs
          free</span></h2>
      ${nodes.map(nodeCard)}</section>`;
  }

  // ---- queue -------------------------------------------------------------------------------------------------------
  function queue(el) {
    mount(el, html`<section><h1>Queue</h1><div id="queue-body"><p class="muted">Loading…</p></div>
      <p class="muted small" id="queue-basis">Start estimates are approximate: the server replays the running jobs'
        predicted ends on the usable GPUs, then the queue in order, at every refresh.</p></section>`);
    return {
      async refresh() {
        const data = await C.request("/jobs?state=pending&limit=1000");
        const jobs = data.jobs.slice();
        const hasPos = jobs.some((j) => j.queue_position !== undefined && j.queue_position !== null);
        jobs.sort(hasPos ? (a, b) => (a.queue_position ?? 1e9) - (b.queue_position ?? 1e9) : (a, b) => a.id - b.id);
        const basis = jobs.map((j) => j.start_estimate_basis).find((b) => b);
        if (basis) el.querySelector("#queue-basis").textContent = `Start estimates are approximate: ${basis}.`;
        const body = el.querySelector("#queue-body");
        if (!jobs.length) { mount(body, html`<p class="muted">No job is waiting.</p>`); return; }
        mount(body, html`<table class="table" id="queue-table">
          <thead><tr><th>#</th><th>Job</th><th>User</th><th>GPUs</th><th>Model</th><th>Waiting</th>
            <th>Pending reason</th><th>Starts in</th></tr></thead>
          <tbody>${jobs.map((j, i) => html`<tr data-job-id="${j.id}">
            <td>${hasPos ? j.queue_position : i + 1}</td><td>${jobLink(j.id, `#${j.id} ${j.name}`)}</td>
            <td>${j.user}</td><td>${j.num_gpus}</td><td>${j.model}</td><td>${C.duration(Date.now() / 1000 -
              j.queued_since)}</td><td class="reason">${reasonCell(j)}</td>
            <td class="starts" title="${j.start_estimate_basis || ""}">${startWords(j.start_estimate_s)}</td>
            </tr>`)}</tbody></table>
          ${hasPos ? "" : html`<p class="muted small">Positions by arrival order (the API gives none).</p>`}`);
      },
    };
  }

  // ---- all jobs ----------------------------------------------------------------------------------------------------
  // Every job, newest first, filtered by state and user and paged (GET /jobs?state&user&limit&offset), so finished
  // jobs can be found. The filters live in the URL (`#/jobs?state=failed&user=bob&page=2`): a view can be shared.
  const JOB_STATES = ["pending", "running", "succeeded", "failed", "cancelled", "timed_out"];
  const PAGE_SIZE = 50;

  function jobs(el, params) {
    const q = params.query;
    const state = JOB_STATES.includes(q.get("state")) ? q.get("state") : "";
    const user = (q.get("user") || "").trim();
    const page = Math.max(1, Math.floor(Number(q.get("page"))) || 1);
    const go = (changes) => {
      const next = new URLSearchParams({ state, user, page: String(page), ...changes });
      [...next.keys()].forEach((k) => { if (!next.get(k) || (k === "page" && next.get(k) === "1")) next.delete(k); });
      const qs = next.toString();
      location.hash = `#/jobs${qs ? `?${qs}` : ""}`;
    };
    mount(el, html`<section><h1>Jobs</h1>
      <form id="jobs-filter" class="row filters">
        <label>State <select id="jobs-state" name="state"><option value="">any</option>
          ${JOB_STATES.map((st) => html`<option value="${st}" ${st === state ? "selected" : ""}>${st}</option>`)}
          </select></label>
        <label>User <input id="jobs-user" name="user" value="${user}" placeholder="any" size="12"></label>
        <button type="submit">Filter</button>
      </form>
      <div id="jobs-body"><p class="muted">Loading…</p></div>
      <div class="row pager"><button type="button" id="jobs-prev" disabled>← Newer</button>
        <span id="jobs-page" class="muted"></span>
        <button type="button" id="jobs-next" disabled>Older →</button></div></section>`);
    el.querySelector("#jobs-filter").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const value = (sel) => el.querySelector(sel).value.trim();
      go({ state: value("#jobs-state"), user: value("#jobs-user"), page: "1" });
    });
    el.querySelector("#jobs-state").addEventListener("change", () => el.querySelector("#jobs-filter").requestSubmit());
    el.querySelector("#jobs-prev").addEventListener("click", () => go({ page: String(page - 1) }));
    el.querySelector("#jobs-next").addEventListener("click", () => go({ page: String(page + 1) }));
    const body = el.querySelector("#jobs-body");
    return {
      async refresh() {
        const args = new URLSearchParams({ limit: String(PAGE_SIZE), offset: String((page - 1) * PAGE_SIZE) });
        if (state) args.set("state", state);
        if (user) args.set("user", user);
        let data;
        try { data = await C.request(`/jobs?${args}`); } catch (err) {
          // A refused filter (another user's jobs without admin, a malformed name) is this page's answer, not a
          // failed refresh: say it where the table would be.
          if (err.status === 401) throw err;
          mount(body, errorBox(err));
          el.querySelector("#jobs-page").textContent = "";
          return;
        }
        const models = await catalog().catch(() => new Map());
        const first = data.total ? (page - 1) * PAGE_SIZE + 1 : 0, last = (page - 1) * PAGE_SIZE + data.jobs.length;
        el.querySelector("#jobs-page").textContent = `${first}–${last} of ${data.total}`;
        el.querySelector("#jobs-prev").disabled = page <= 1;
        el.querySelector("#jobs-next").disabled = last >= data.total;
        if (!data.jobs.length) {
          mount(body, html`<p class="muted">No job${state ? ` ${state}` : ""}${user ? ` of ${user}` : ""}${page > 1 ?
            " on this page" : ""}.</p>`);
          return;
        }
        mount(body, html`<div class="scroll-x"><table class="table" id="jobs-table">
          <thead><tr><th>Job</th><th>State</th><th>User</th><th>GPUs</th><th>Model</th><th>Submitted</th>
            <th>Finished</th><th>Reason</th></tr></thead>
          <tbody>${data.jobs.map((j) => html`<tr data-job-id="${j.id}" data-state="${j.state}">
            <td>${jobLink(j.id, `#${j.id} ${j.name}`)}</td><td>${C.stateBadge(j.state)}</td><td>${j.user}</td>
            <td>${j.num_gpus}${j.allocation && j.allocation.length ? html`<br><span class="muted small where"
              title="${C.allocationWords(j.allocation, true)}">${C.allocationWords(j.allocation)}</span>` : ""}</td>
            <td>${j.model} ${sloBadge(sloStatus(j, models.get(j.model)))}</td>
            <td title="${C.stamp(j.submitted_at)}">${C.ago(j.submitted_at)}</td>
            <td title="${C.stamp(j.finished_at)}">${j.finished_at ? C.ago(j.finished_at) : "–"}</td>
            <td class="reason">${reasonCell(j)}</td></tr>`)}</tbody></table></div>`);
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

  // A pending job's start estimate in words: the server never says 0 for a job that does not fit now.
  const startWords = (est) => (est === null || est === undefined ? "unknown" : est < 1 ? "now" :
    `in ≈ ${C.duration(est)}`);

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
      ${j.state === "pending" && ex.start_estimate_s !== undefined ? html`<p id="start-estimate">Approximate start:
        <b>${startWords(ex.start_estimate_s)}</b>${ex.start_estimate_basis ? html` <span class="muted">(${
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
        const slo = j.slo_ms !== null && j.slo_ms !== undefined ?
          sloStatus(j, (await catalog().catch(() => new Map())).get(j.model)) : null;
        mount(el.querySelector("#job-head"), html`<div class="row between"><h1>#${j.id} ${j.name}
            ${C.stateBadge(j.state)}</h1>
          <div class="row">${j.state === "pending" ? html`<button id="hold" type="button"
            data-action="${j.held_at ? "release" : "hold"}" title="${j.held_at ? "let it start again, in its place" :
            "keep its place in the queue but do not start it until released"}">${j.held_at ? "Release" :
            "Hold"}</button>` : ""}
          ${TERMINAL.has(j.state) ? "" : html`<button id="cancel" type="button" class="danger">Cancel job</button>`}
          </div></div>
          <p class="facts"><span>${j.user}</span><span>${j.kind}</span><span>${j.model}</span>
            <span>${C.gpus(j.num_gpus)}</span><span>${C.duration(j.duration_s)} isolated</span>
            <span>submitted ${C.ago(j.submitted_at)}</span>
            ${j.started_at ? html`<span>started ${C.ago(j.started_at)}</span>` : ""}
            ${j.finished_at ? html`<span>finished ${C.ago(j.finished_at)}</span>` : ""}
            ${j.state === "pending" && pos ? html`<span>queue position <b>${pos}</b></span>` : ""}
            ${j.held_at ? html`<span id="job-held">held by ${j.held_by} ${C.ago(j.held_at)}</span>` : ""}
            <span>attempt ${j.attempt}</span></p>
          ${progressLine(j)}
          ${j.entrypoint ? html`<pre class="cmd" id="job-command">${j.entrypoint}</pre>` : ""}
          ${j.env && Object.keys(j.env).length ? html`<pre class="cmd" id="job-env" title="environment">${
            Object.entries(j.env).map(([k, v]) => `${k}=${v}\n`)}</pre>` : ""}
          ${slo ? html`<p id="job-slo" class="slo-line ${slo.risk ? "at-risk" : ""}">${sloText(slo)}</p>` : ""}
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

  return { signin, map, queue, jobs, job, metrics, teams, policies, submit, whatif, errorBox };
})();
