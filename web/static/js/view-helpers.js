// Corral dashboard: what several views share: error boxes, job links, an SLO's words, team colours, why a job waits.
// Each view-*.js file adds its views to `Views` (below); app.js routes to them.
"use strict";

const ViewHelpers = (() => {
  const C = Corral;
  const { html } = C;

  const errorBox = (err) => html`<p class="error">${err.status ? `HTTP ${err.status}: ` : ""}${err.message}</p>`;
  const jobLink = (id, text) => html`<a href="#/job/${id}">${text !== undefined ? text : `#${id}`}</a>`;

  // An inference job's SLO as the API serves it (`slo`: the model's isolated latency times the job's predicted
  // slowdown, now if it runs, else averaged over its run, else alone: scheduler/live/slo.py), in words and as a badge.
  // Null for jobs without an SLO.
  function sloText(st) {
    if (!st) return "";
    if (st.predicted_ms === null) return `SLO ${C.num(st.slo_ms, 0)} ms (no isolated latency known for this model)`;
    return `SLO ${C.num(st.slo_ms, 0)} ms: predicted ${C.num(st.predicted_ms, 1)} ms (${C.num(st.alone_ms, 1)} ms ` +
      `alone × ${C.slow(st.slowdown)}, ${st.basis}) — ${st.at_risk ? "at risk" : "within"}`;
  }

  const sloBadge = (st) => (st ? html`<span class="slo ${st.at_risk ? "at-risk" : st.at_risk === false ? "ok" : ""}"
    title="${sloText(st)}">${st.at_risk ? "SLO at risk" : `SLO ${C.num(st.slo_ms, 0)} ms`}</span>` : "");

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
  const teamsInUse = () => Boolean(teamNames && teamNames.length);  // any team besides default
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

  // A pending job's start estimate in words, from a job or an explanation (its `start_estimate_*` fields): a job the
  // rules never start says so, with why, in the server's words (`start_estimate_text`); not a time.
  const startWords = (j) => {
    if (j.start_estimate_outlook === "never") return j.start_estimate_text || "never starts under the current rules";
    if (j.start_estimate_outlook === "beyond") return "not estimated (past the replay's bounds)";
    const est = j.start_estimate_s;
    return est === null || est === undefined ? "unknown" : est < 1 ? "now" : `in ≈ ${C.duration(est)}`;
  };

  // A job's GPUs as it asked for them: its one size, or an elastic job's bounds ("2-8"), as `corral jobs` writes them
  // (scheduler/cli/client_text.py `job_gpus_text`).
  const isElastic = (j) => j.min_gpus !== null && j.min_gpus !== undefined && j.max_gpus !== null &&
    j.max_gpus !== undefined && j.min_gpus !== j.max_gpus;
  const jobGpus = (j) => (isElastic(j) ? `${j.min_gpus}-${j.max_gpus}` : `${j.num_gpus}`);

  // An elastic job's sizes in words ("elastic: 2-8 GPUs (sizes 2, 4, 8); ..."); "" for a job of one size.
  function elasticWords(j) {
    if (!isElastic(j)) return "";
    const sizes = j.sizes && j.sizes.length ? ` (sizes ${j.sizes.join(", ")})` : "";
    const pause = j.resize_pause_s === null || j.resize_pause_s === undefined ? "the model's estimate" :
      `${j.resize_pause_s} s`;
    const asked = j.requested_gpus === null || j.requested_gpus === undefined ? "" :
      `; submitted at ${j.requested_gpus} GPUs, which the cluster can never hold`;
    return `elastic: ${j.min_gpus}-${j.max_gpus} GPUs${sizes}; duration measured at ${C.gpus(j.num_gpus)}; ` +
      `resize pause ${pause}${asked}`;
  }

  return {
    errorBox, jobLink, sloText, sloBadge, knowTeams, teamsKnown, teamsInUse, teamColour, teamKey, reasonCell,
    startWords, isElastic, jobGpus, elasticWords,
  };
})();

// Each view is a function (element, route parameters) returning {refresh()}: app.js calls refresh() at once and then
// every few seconds while the view is open, so every view shows live data.
const Views = { errorBox: ViewHelpers.errorBox };
