// Corral dashboard: the policies (#/policies): switch the active one, read a trained agent's report.
"use strict";

Object.assign(Views, (() => {
  const C = Corral;
  const { html, mount } = C;
  const { errorBox } = ViewHelpers;

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
      // An <img src> cannot send the bearer token: fetch the PNG and show it as a data: URL, which the page's
      // Content-Security-Policy allows for images (a blob: URL it refuses).
      try {
        const blob = await C.request(`/policies/${encodeURIComponent(name)}/curve.png`, { as: "blob" });
        const img = new Image();
        img.alt = `learning curve of ${name}`;
        img.className = "curve";
        img.src = await new Promise((resolve, reject) => {
          const reader = new FileReader();
          reader.onload = () => resolve(reader.result);
          reader.onerror = () => reject(reader.error);
          reader.readAsDataURL(blob);
        });
        const holder = box.querySelector("#curve");
        holder.textContent = "";
        holder.appendChild(img);
      } catch (err) { mount(box.querySelector("#curve"), errorBox(err)); }
    }
  }

  const kind = (n) => (n.startsWith("guarded:") ? `${kind(n.slice(8))}, under the guard (a heuristic decides while
    it loses)` : n.startsWith("rl:") ? "learned (Corral RL agent)" : n.startsWith("deepshare:") ?
    "learned (DeepShare baseline)" : "heuristic");

  // What the active policy's guard decided (GET /policies' guard): who acts now, the evidence, the switches so far.
  function guardCard(g) {
    return html`<div class="card" id="policy-guard"><h2>Guard</h2>
      <p class="facts"><span>acting now: <b id="guard-acting">${g.acting}</b></span>
        <span>${g.learned} ran ${C.num(g.ratio, 3)}x the JCT of ${g.best} in replays
          [${C.num(g.low, 3)}, ${C.num(g.high, 3)}]</span><span>${g.windows} windows</span></p>
      <p id="guard-text">${g.text}</p>
      ${g.switches.length ? html`<h3>Switches</h3><ol id="guard-switches">${g.switches.map((w) => html`<li>
        ${C.ago(w.at)}: to <b>${w.to}</b></li>`)}</ol>` : html`<p class="muted">No switch so far.</p>`}</div>`;
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
            </span>` : ""}</td><td>${kind(n)}</td>
            <td>${hasReport(n) ? html`<button type="button" class="link" data-report="${n}">report</button>` : ""}</td>
            <td>${n === p.active ? "" : html`<button type="button" data-activate="${n}">Activate</button>`}</td>
          </tr>`)}</tbody></table>${p.guard ? guardCard(p.guard) : ""}`);
      },
    };
    if (params.name) showReport(el.querySelector("#report"), params.name);
    return view;
  }

  return { policies };
})());
