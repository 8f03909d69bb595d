// Corral dashboard: the router. `#/VIEW/ARG` picks a view of `Views` (view-*.js); the open view refreshes every few
// seconds (paused while the tab is hidden). Without a token, or after a 401, every route leads to the sign-in page.
"use strict";

(() => {
  const C = Corral;
  const POLL_MS = Number(document.body.dataset.pollMs) || 2000;
  const viewEl = document.getElementById("view");
  const banner = document.getElementById("banner");
  const statusEl = document.getElementById("status");
  const signout = document.getElementById("signout");
  let current = null, timer = null, busy = false, generation = 0;

  function parse() {
    // The query belongs to the whole route (`#/jobs?state=failed`, `#/job/7?x=1`), so split it off first.
    const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
    const [name, arg] = path.split("/");
    return { name: name || "map", arg: decodeURIComponent(arg || ""), query: new URLSearchParams(query || "") };
  }

  function showBanner(text) {
    banner.hidden = !text;
    banner.textContent = text || "";
  }

  let signinMessage = "";
  C.onUnauthorized = (err) => {
    C.setToken("");
    signinMessage = `Your token was refused (401 Unauthorized: ${err.message}). Sign in again.`;
    if (parse().name !== "signin") location.hash = "#/signin";  // the hashchange renders it, with the message
  };

  async function tick() {
    if (!current || current.static || busy || document.hidden) return;
    busy = true;
    const mine = generation;
    try {
      await current.refresh();
      if (mine === generation) showBanner("");
      await refreshStatus();
    } catch (err) {
      if (mine === generation && err.status !== 401) {
        showBanner(`Could not refresh: ${err.status ? `HTTP ${err.status}: ` : ""}${err.message}`);
      }
    } finally {
      busy = false;
    }
  }

  async function refreshStatus() {
    const [c, h] = await Promise.all([C.request("/cluster"), C.request("/health").catch(() => ({}))]);
    // Replicas on one PostgreSQL database share the API: say which one this page talks to, and whether it leads.
    // (On SQLite there is one process and no lease: epoch is null and nothing is added.)
    const replica = h.epoch === null || h.epoch === undefined ? "" :
      ` · this replica ${h.controller === "leader" ? "leads" : "stands by"} (epoch ${h.epoch})`;
    statusEl.textContent = `${c.active_policy || "no policy"} · ${c.queue.running} running · ${c.queue.pending} ` +
      `pending · ${c.totals.gpus_allocated}/${c.totals.gpus} GPUs in use${replica}`;
    statusEl.title = h.replica ? `replica ${h.replica}; lease held by ${h.leader || "nobody"}; ${h.lease || ""}` : "";
  }

  function route() {
    generation++;
    clearInterval(timer);
    const r = parse();
    const signedIn = Boolean(C.token());
    signout.hidden = !signedIn;
    if (!signedIn && r.name !== "signin") { location.hash = "#/signin"; return; }
    if (!signedIn) statusEl.textContent = "";
    const section = r.name === "job" ? "jobs" : r.name;  // a job's page belongs under Jobs in the navigation
    document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("on", a.dataset.view === section));
    showBanner("");
    const views = {
      signin: () => Views.signin(viewEl, { message: signinMessage }),
      map: () => Views.map(viewEl),
      queue: () => Views.queue(viewEl),
      jobs: () => Views.jobs(viewEl, { query: r.query }),
      job: () => Views.job(viewEl, { id: r.arg }),
      metrics: () => Views.metrics(viewEl),
      accounting: () => Views.accounting(viewEl),
      teams: () => Views.teams(viewEl),
      policies: () => Views.policies(viewEl, { name: r.arg }),
      submit: () => Views.submit(viewEl),
      whatif: () => Views.whatif(viewEl),
    };
    const make = views[r.name];
    if (!make) { C.mount(viewEl, C.html`<p class="error">No page ${r.name}.</p>`); return; }
    document.title = `Corral · ${r.name}`;
    current = make();
    viewEl.dataset.view = r.name;
    if (r.name !== "signin") signinMessage = "";  // kept across the re-renders several parallel 401s cause
    busy = false;
    if (current.static) { if (signedIn) refreshStatus().catch(() => {}); return; }
    tick();
    timer = setInterval(tick, POLL_MS);
  }

  signout.addEventListener("click", () => {
    C.setToken("");
    location.hash = "#/signin";
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) tick(); });
  // Hovering a job's band lights up every GPU it holds.
  viewEl.addEventListener("mouseover", (ev) => {
    const t = ev.target.closest("[data-job-id].tenant");
    viewEl.querySelectorAll(".tenant.hl").forEach((x) => x.classList.remove("hl"));
    if (t) viewEl.querySelectorAll(`.tenant[data-job-id="${t.dataset.jobId}"]`).forEach((x) => x.classList.add("hl"));
  });
  window.addEventListener("hashchange", route);
  route();
})();
