// Corral dashboard: the lists of jobs: the queue (#/queue) and every job, filtered and paged (#/jobs).
"use strict";

Object.assign(Views, (() => {
  const C = Corral;
  const { html, mount } = C;
  const { errorBox, jobGpus, jobLink, sloBadge, reasonCell, startWords } = ViewHelpers;

  // ---- queue -------------------------------------------------------------------------------------------------------
  function queue(el) {
    mount(el, html`<section><h1>Queue</h1><div id="queue-body"><p class="muted">Loading…</p></div>
      <p class="muted small" id="queue-basis">Start estimates are approximate: the server replays the cluster as it is
        under the active policy, assuming the last hour's submissions arrive again over the next hour.</p></section>`);
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
        // On a phone each row is a card, a cell a labelled line (`data-label`; dashboard.css).
        mount(body, html`<table class="table cards" id="queue-table">
          <thead><tr><th>#</th><th>Job</th><th>User</th><th>GPUs</th><th>Model</th><th>Waiting</th>
            <th>Pending reason</th><th>Starts in</th></tr></thead>
          <tbody>${jobs.map((j, i) => html`<tr data-job-id="${j.id}">
            <td data-label="#">${hasPos ? j.queue_position : i + 1}</td>
            <td data-label="Job">${jobLink(j.id, `#${j.id} ${j.name}`)}</td>
            <td data-label="User">${j.user}</td><td data-label="GPUs">${jobGpus(j)}</td>
            <td data-label="Model">${j.model}</td>
            <td data-label="Waiting">${C.duration(Date.now() / 1000 - j.queued_since)}</td>
            <td class="reason" data-label="Pending reason">${reasonCell(j)}</td>
            <td class="starts" data-label="Starts in" title="${j.start_estimate_basis || ""}">${
              startWords(j)}</td>
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
        const first = data.total ? (page - 1) * PAGE_SIZE + 1 : 0, last = (page - 1) * PAGE_SIZE + data.jobs.length;
        el.querySelector("#jobs-page").textContent = `${first}–${last} of ${data.total}`;
        el.querySelector("#jobs-prev").disabled = page <= 1;
        el.querySelector("#jobs-next").disabled = last >= data.total;
        if (!data.jobs.length) {
          mount(body, html`<p class="muted">No job${state ? ` ${state}` : ""}${user ? ` of ${user}` : ""}${page > 1 ?
            " on this page" : ""}.</p>`);
          return;
        }
        mount(body, html`<div class="scroll-x"><table class="table cards" id="jobs-table">
          <thead><tr><th>Job</th><th>State</th><th>User</th><th>GPUs</th><th>Model</th><th>Submitted</th>
            <th>Finished</th><th>Reason</th></tr></thead>
          <tbody>${data.jobs.map((j) => html`<tr data-job-id="${j.id}" data-state="${j.state}">
            <td data-label="Job">${jobLink(j.id, `#${j.id} ${j.name}`)}</td>
            <td data-label="State">${C.stateBadge(j.state)}</td><td data-label="User">${j.user}</td>
            <td data-label="GPUs">${jobGpus(j)}${j.allocation && j.allocation.length ? html`<br><span
              class="muted small where" title="${C.allocationWords(j.allocation, true)}">${
              C.allocationWords(j.allocation)}</span>` : ""}</td>
            <td data-label="Model">${j.model} ${sloBadge(j.slo)}</td>
            <td data-label="Submitted" title="${C.stamp(j.submitted_at)}">${C.ago(j.submitted_at)}</td>
            <td data-label="Finished" title="${C.stamp(j.finished_at)}">${j.finished_at ? C.ago(j.finished_at) :
              "–"}</td>
            <td class="reason" data-label="Reason">${reasonCell(j)}</td></tr>`)}</tbody></table></div>`);
      },
    };
  }

  return { queue, jobs };
})());
