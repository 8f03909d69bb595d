// Corral dashboard: the cluster map (#/map): racks, nodes, their health, drains and NIC load, each GPU's tenants.
"use strict";

Object.assign(Views, (() => {
  const C = Corral;
  const { html, mount } = C;
  const { teamColour, teamKey, teamsKnown, teamsInUse } = ViewHelpers;

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
        const teams = teamsInUse();
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
        if (t.gpus > COMPACT_OVER) {  // a tile a node, a square a GPU; a node's full card on click
          const byName = new Map(cluster.nodes.map((n) => [n.name, n]));
          const tile = (n) => nodeTile(n, jobs);
          mount(nodesEl, html`<p class="muted small">${t.gpus} GPUs: a square a GPU, coloured by its tenants' predicted
              slowdown. Click a node for its GPUs.</p>
            ${[...racks].map(([rack, nodes]) => rackTiles(rack, nodes, tile))}
            <div id="map-node-detail"></div>`);
          const detail = nodesEl.querySelector("#map-node-detail");
          const show = (name) => {
            nodesEl.querySelectorAll(".node-tile.on").forEach((x) => x.classList.remove("on"));
            const n = byName.get(name);
            if (!n) { mount(detail, ""); return; }
            nodesEl.querySelector(`.node-tile[data-node="${CSS.escape(name)}"]`).classList.add("on");
            mount(detail, nodeCard(n));
          };
          nodesEl.onclick = (ev) => {
            const tileEl = ev.target.closest(".node-tile");
            if (tileEl) { opened = opened === tileEl.dataset.node ? null : tileEl.dataset.node; show(opened); }
          };
          if (opened) show(opened);  // kept open across refreshes
          return;
        }
        // A cluster whose nodes name no rack looks as it did before racks had names: one list of nodes.
        mount(nodesEl, racks.size === 1 && racks.has("") ? cluster.nodes.map(nodeCard)
          : [...racks].map(([rack, nodes]) => rackGroup(rack, nodes, nodeCard)));
      },
    };
  }

  // Above this many GPUs the map draws a node as a tile of small squares: a card a node (a band a tenant) is
  // readable to a few dozen GPUs, and at a thousand it is pages of scrolling.
  const COMPACT_OVER = 64;
  let opened = null;  // the node whose card the compact map shows

  function nodeTile(n, jobs) {
    const square = (g) => {
      // The largest tenant colours the square; a free GPU is hatched, a closed one grey; shares show as a lighter fill.
      const top = g.tenants.reduce((a, x) => (a && a.share >= x.share ? a : x), null);
      const sd = top ? (jobs.get(top.job_id) || {}).predicted_slowdown : null;
      const cls = g.closed ? "g closed" : top ? (g.free_share > 1e-6 ? "g part" : "g") : "g free";
      const title = `GPU ${g.local_index} (cluster ${g.index}): ` + (g.closed ? `closed (${g.closed})` : top
        ? g.tenants.map((x) => `#${x.job_id} ×${x.share}`).join(", ") + `; predicted slowdown ${C.slow(sd)}` : "free");
      return html`<i class="${cls}" data-gpu="${g.index}" title="${title}"
        style="${top && !g.closed ? `background:${C.slowdownColour(sd)}` : ""}"></i>`;
    };
    const used = n.gpus.filter((g) => g.tenants.length).length;
    const state = !n.alive ? " dead" : n.drain ? " drained" : "";
    const bad = n.health && n.health.gpus.some((r) => !GOOD_GPU.includes(r.status));
    return html`<button type="button" class="node-tile${state}${bad ? " unhealthy" : ""}" data-node="${n.name}"
      title="${n.name}: ${n.preset}, ${used} of ${n.gpus.length} GPUs in use${n.alive ? "" : ", down"}${
        n.drain ? ", drained" : ""}${bad ? ", GPU trouble" : ""}"><span class="tile-name">${n.name}</span>
      <span class="squares">${n.gpus.map(square)}</span></button>`;
  }

  function rackTiles(rack, nodes, tile) {
    return html`<section class="rack compact" data-rack="${rack}">${rackHead(rack || "", nodes, "Nodes")}
      <div class="tiles">${nodes.map(tile)}</div></section>`;
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
    return html`<section class="rack" data-rack="${rack}">${rackHead(rack, nodes, "No rack named")}
      ${nodes.map(nodeCard)}</section>`;
  }

  // A rack's heading: its name (or `unnamed`), its nodes and its free GPUs.
  function rackHead(rack, nodes, unnamed) {
    const gpus = nodes.flatMap((n) => n.gpus);
    const free = gpus.filter((g) => !g.tenants.length && !g.closed).length;
    return html`<h2 class="rack-head">${rack ? `Rack ${rack}` : unnamed}
      <span class="muted">${nodes.length} node${nodes.length === 1 ? "" : "s"} · ${free} of ${gpus.length} GPUs
        free</span></h2>`;
  }

  return { map };
})());
