// Corral dashboard: the pages that are forms: sign in (#/signin), submit a job (#/submit), what if (#/whatif).
"use strict";

Object.assign(Views, (() => {
  const C = Corral;
  const { html, mount } = C;

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
        ${field("priority", "Priority", html`<input id="f-priority" name="priority" type="number" step="1"
          placeholder="0">`, "empty: 0, or the priority class's")}
        ${field("slo_ms", "Latency SLO (ms)", html`<input id="f-slo_ms" name="slo_ms" type="number" step="any"
          min="0">`, "optional, inference jobs")}
        <details id="f-more"><summary>Time limit, dependencies, array, retries, priority class</summary>
          ${field("time_limit_s", "Time limit (s)", html`<input id="f-time_limit_s" name="time_limit_s" type="number"
            step="any" min="0">`,
            "the run is stopped (timed_out) once it has run this long; empty: the cluster's default")}
          ${field("depends_on", "Depends on", html`<input id="f-depends_on" name="depends_on"
            placeholder="12, afterany:13">`, "job ids it waits for: 12 (it succeeded), afternotok:12, afterany:12")}
          ${field("array", "Array tasks", html`<input id="f-array" name="array" type="number" step="1" min="1"
            placeholder="1">`, "as many copies, each with CORRAL_ARRAY_INDEX 0, 1, …")}
          ${field("array_max_running", "… at most running", html`<input id="f-array_max_running"
            name="array_max_running" type="number" step="1" min="1">`, "optional: tasks running at once")}
          ${field("max_retries", "Retries", html`<input id="f-max_retries" name="max_retries" type="number" step="1"
            min="0" value="0">`, "command jobs: runs again after a failed run, this many times")}
          ${field("retry_on", "… on exit codes", html`<input id="f-retry_on" name="retry_on" placeholder="any">`,
            "any, or codes such as 1, 137")}
          ${field("priority_class", "Priority class", html`<select id="f-priority_class" name="priority_class">
            <option value="">none</option></select>`, "a class gives its priority and preemptibility")}
        </details>
        <details id="f-elastic"><summary>Elastic: a range of sizes the job may grow and shrink within</summary>
          ${field("min_gpus", "Fewest GPUs", html`<input id="f-min_gpus" name="min_gpus" type="number" step="1"
            min="1">`, "with the most: the policy sizes the job within them and may resize it while it runs")}
          ${field("max_gpus", "Most GPUs", html`<input id="f-max_gpus" name="max_gpus" type="number" step="1"
            min="1">`, "GPUs above stands for the size the duration is measured at, inside this range")}
          ${field("sizes", "Only these sizes", html`<input id="f-sizes" name="sizes" placeholder="2, 4, 8">`,
            "optional: e.g. powers of two; empty: any size in the range")}
          ${field("resize_pause_s", "Resize pause (s)", html`<input id="f-resize_pause_s" name="resize_pause_s"
            type="number" step="any" min="0">`, "checkpoint and restart time; empty: the model's default")}
        </details>
        <details id="f-where"><summary>Where it may run, and its environment (command jobs)</summary>
          ${field("gpu_type", "GPU type", html`<input id="f-gpu_type" name="gpu_type" placeholder="h100 or A100-80GB">`,
            "only nodes of this GPU type or family (Slurm's --constraint)")}
          ${field("labels", "Node labels", html`<input id="f-labels" name="labels" placeholder="zone=a, gpu=a100">`,
            "only nodes carrying every label: the operator's and the hardware's (the Cluster page lists them)")}
          ${field("nodes", "Only these nodes", html`<input id="f-nodes" name="nodes" placeholder="node0, node1">`,
            "Slurm's --nodelist")}
          ${field("exclude", "Not these nodes", html`<input id="f-exclude" name="exclude" placeholder="node3">`,
            "Slurm's --exclude")}
          <div class="field-error" data-error-for="constraints"></div>
          ${field("pip", "pip packages", html`<textarea id="f-pip" name="pip" rows="2"
            placeholder="numpy>=1.26"></textarea>`, "one requirement a line, installed on the node for this job")}
          ${field("venv", "Named venv", html`<input id="f-venv" name="venv" placeholder="torch">`,
            "a virtual environment the nodes' operator named (CORRAL_VENVS)")}
          <div class="field-error" data-error-for="environment"></div>
        </details>
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
    C.request("/priority-classes").then((r) => {
      mount(form.querySelector("#f-priority_class"), [html`<option value="">none</option>`, ...r.priority_classes.map(
        (c) => html`<option value="${c.name}">${c.name} (priority ${c.value}${c.preemptible ? "" : ", not preemptible"})
        </option>`)]);
    }).catch(() => {});  // the form works without classes

    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      form.querySelectorAll(".field-error").forEach((e) => { e.textContent = ""; });
      form.querySelectorAll(".invalid").forEach((e) => e.classList.remove("invalid"));
      const v = (n) => form.elements[n].value.trim();
      const number = (n) => (v(n) === "" ? undefined : Number(v(n)));
      const body = { name: v("name"), kind: v("kind"), model: v("model"), num_gpus: number("num_gpus"),
        duration_s: number("duration_s"), priority: number("priority"), slo_ms: number("slo_ms"),
        time_limit_s: number("time_limit_s"), max_retries: number("max_retries"),
        priority_class: v("priority_class") || undefined };
      if (body.kind === "command") body.entrypoint = form.elements.entrypoint.value;
      // The texts the API takes as lists: what cannot be read is said next to its field, and nothing is sent.
      const local = {};
      if (v("depends_on")) {
        body.depends_on = v("depends_on").split(/[\s,]+/).filter(Boolean).map((item) => {
          const m = /^(?:(afterok|afternotok|afterany):)?(\d+)$/.exec(item);
          if (!m) local.depends_on = `"${item}": write a job id, or afterok:, afternotok:, afterany: and one`;
          return m ? { job: Number(m[2]), condition: m[1] || "afterok" } : null;
        });
      }
      if (v("retry_on") && v("retry_on") !== "any") {
        const codes = v("retry_on").split(/[\s,]+/).filter(Boolean);
        if (!codes.every((c) => /^\d+$/.test(c))) local.retry_on = 'write "any", or exit codes such as 1, 137';
        body.retry_on = codes.map(Number);
      }
      if (v("min_gpus") || v("max_gpus")) {
        body.min_gpus = number("min_gpus");
        body.max_gpus = number("max_gpus");
      }
      if (v("resize_pause_s")) body.resize_pause_s = number("resize_pause_s");
      if (v("sizes")) {
        const sizes = v("sizes").split(/[\s,]+/).filter(Boolean);
        if (!sizes.every((n) => /^\d+$/.test(n))) local.sizes = "write whole GPU counts, such as 2, 4, 8";
        body.sizes = sizes.map(Number);
      }
      const names = (n) => v(n).split(/[\s,]+/).filter(Boolean);
      const where = { gpu_type: v("gpu_type") || undefined, nodes: names("nodes"), exclude: names("exclude") };
      if (v("labels")) {
        where.labels = {};
        for (const pair of names("labels")) {
          const m = /^([^=]+)=(.+)$/.exec(pair);
          if (!m) local.labels = `"${pair}": write labels as key=value, e.g. zone=a`;
          else where.labels[m[1]] = m[2];
        }
      }
      if (!where.nodes.length) delete where.nodes;
      if (!where.exclude.length) delete where.exclude;
      if (!where.gpu_type) delete where.gpu_type;
      if (Object.keys(where).length) body.constraints = where;
      const pip = form.elements.pip.value.split("\n").map((line) => line.trim()).filter(Boolean);
      if (pip.length || v("venv")) {
        body.environment = {};
        if (pip.length) body.environment.pip = pip;
        if (v("venv")) body.environment.venv = v("venv");
      }
      if (v("array") || v("array_max_running")) {
        body.array = { count: number("array") ?? 1 };
        if (v("array_max_running")) body.array.max_running = number("array_max_running");
      }
      Object.keys(body).forEach((k) => body[k] === undefined && delete body[k]);
      if (Object.keys(local).length) {
        showErrors(local);
        msg.className = "error";
        msg.textContent = "Please fix the fields marked in red.";
        return;
      }
      msg.className = "muted";
      msg.textContent = "Submitting…";
      try {
        const job = await C.request("/jobs", { method: "POST", body });
        msg.className = "ok";
        msg.textContent = `Submitted job #${job.id}.`;
        location.hash = `#/job/${job.id}`;
      } catch (err) {
        msg.className = "error";
        const shown = showErrors((err.body && err.body.errors && err.body.errors.json) || {});
        msg.textContent = err.status === 422 && shown ? "Please fix the fields marked in red." : err.message;
      }
    });

    // Each field's messages next to it (a nested field's, e.g. depends_on's entries, flattened into words);
    // whether any was shown.
    function showErrors(errors) {
      const words = (m) => (typeof m === "string" ? [m] : Array.isArray(m) ? m.flatMap(words)
        : Object.entries(m).flatMap(([k, x]) => words(x).map((w) => `${k}: ${w}`)));
      let shown = false;
      for (const [name, msgs] of Object.entries(errors)) {
        const slot = form.querySelector(`[data-error-for="${CSS.escape(name)}"]`);
        if (!slot) continue;
        slot.textContent = words(msgs).join(" ");
        const input = form.elements[name];
        if (input) input.classList.add("invalid");
        if (slot.closest("details")) slot.closest("details").open = true;  // an error is never hidden
        shown = true;
      }
      return shown;
    }
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
    C.request("/priority-classes").then((r) => {
      mount(form.querySelector("#f-priority_class"), [html`<option value="">none</option>`, ...r.priority_classes.map(
        (c) => html`<option value="${c.name}">${c.name} (priority ${c.value}${c.preemptible ? "" : ", not preemptible"})
        </option>`)]);
    }).catch(() => {});  // the form works without classes

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
        const down = r.cluster.down_nodes ? ` (${r.cluster.down_nodes} node(s) down: their GPUs take no job)` : "";
        mount(out, html`<div class="card"><h2>${r.policy} on ${r.cluster.gpus} GPUs${down}</h2>
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

  return { signin, submit, whatif };
})());
