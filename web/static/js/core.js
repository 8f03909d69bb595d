// Corral dashboard: the shared pieces. The API client (bearer token from localStorage), HTML escaping, formatting.
// Plain browser JavaScript, no build step and no dependencies. Views are in view-*.js, the router in app.js.
"use strict";

const Corral = (() => {
  const API = document.body.dataset.api || "/api/v1";
  const TOKEN_KEY = "corral.token";

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.message) || `HTTP ${status}`);
      this.status = status;
      this.body = body || {};
    }
  }

  const token = () => localStorage.getItem(TOKEN_KEY) || "";
  const setToken = (t) => (t ? localStorage.setItem(TOKEN_KEY, t) : localStorage.removeItem(TOKEN_KEY));

  // Called on every 401: app.js points it at "back to the sign-in page, saying why".
  let onUnauthorized = () => {};

  async function request(path, { method = "GET", body, as = "json" } = {}) {
    const headers = { Authorization: `Bearer ${token()}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(API + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store",
    });
    if (!r.ok) {
      let data = {};
      try { data = await r.json(); } catch (_) { /* not JSON: keep the status */ }
      const err = new ApiError(r.status, data);
      if (r.status === 401) onUnauthorized(err);
      throw err;
    }
    if (as === "blob") return r.blob();
    if (as === "text") return r.text();
    return r.json();
  }

  // ---- HTML: a tagged template that escapes every interpolated value unless it is already `html` ----------------
  class Safe {
    constructor(s) { this.s = s; }
    toString() { return this.s; }
  }
  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (v) => String(v).replace(/[&<>"']/g, (c) => ESC[c]);
  const piece = (v) => {
    if (v === null || v === undefined || v === false) return "";
    if (v instanceof Safe) return v.s;
    if (Array.isArray(v)) return v.map(piece).join("");
    return esc(v);
  };
  function html(strings, ...values) {
    let out = strings[0];
    values.forEach((v, i) => { out += piece(v) + strings[i + 1]; });
    return new Safe(out);
  }
  const raw = (s) => new Safe(s);
  const mount = (el, content) => { el.innerHTML = piece(content); };

  // ---- formatting --------------------------------------------------------------------------------------------------
  // Rounded to the unit shown before it is split, so 59.6 s is "1 min 00 s", never "0 min 60 s" (the rules of
  // scheduler/live/words.py `duration_text`, which the tests hold both to).
  function duration(s) {
    if (s === null || s === undefined || !isFinite(s)) return "–";
    s = Math.max(0, s);
    if (s < 10 && Math.round(s * 10) / 10 < 10) return `${(Math.round(s * 10) / 10).toFixed(1)} s`;
    const whole = Math.round(s);
    if (whole < 60) return `${whole} s`;
    if (whole < 3600) return `${Math.floor(whole / 60)} min ${String(whole % 60).padStart(2, "0")} s`;
    const minutes = Math.round(whole / 60);
    if (minutes < 1440) return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
    const hours = Math.round(whole / 3600);
    return `${Math.floor(hours / 24)} d ${hours % 24} h`;
  }

  // GPUs in the one numbering every view uses: by node and index on the node, "node2: GPU 0-7", with the cluster-wide
  // numbers (what decisions record) after them when asked: "node2: GPU 0-7 (cluster GPUs 16-23)". `where` is a list
  // of {node, local, index}. The rules of scheduler/live/words.py `gpus_text`.
  function ranges(xs) {
    const v = [...new Set(xs)].sort((a, b) => a - b);
    const out = [];
    for (let i = 0; i < v.length;) {
      let j = i;
      while (j + 1 < v.length && v[j + 1] === v[j] + 1) j++;
      out.push(i === j ? `${v[i]}` : `${v[i]}-${v[j]}`);
      i = j + 1;
    }
    return out.join(", ");
  }
  function gpuWords(where, share, clusterIds = false) {
    const byNode = new Map();
    where.forEach((w) => { if (!byNode.has(w.node)) byNode.set(w.node, []); byNode.get(w.node).push(w.local); });
    let text = [...byNode].map(([node, locals]) => `${node}: GPU ${ranges(locals)}`).join("; ");
    if (share !== null && share !== undefined && share < 1 - 1e-9) text += ` ×${share}`;
    const ids = where.map((w) => w.index).filter((x) => x !== null && x !== undefined);
    if (clusterIds && ids.length) text += ` (cluster GPU${new Set(ids).size > 1 ? "s" : ""} ${ranges(ids)})`;
    return text;
  }
  const allocationWords = (alloc, clusterIds = false) => (alloc && alloc.length ? gpuWords(
    alloc.map((a) => ({ node: a.node, local: a.local_gpu, index: a.gpu })), alloc[0].share, clusterIds) : "");
  const ago = (t) => (t ? `${duration(Date.now() / 1000 - t)} ago` : "–");
  const clock = (t) => (t ? new Date(t * 1000).toLocaleTimeString([], { hour12: false }) : "–");
  const stamp = (t) => (t ? new Date(t * 1000).toLocaleString([], { hour12: false }) : "–");
  const num = (x, digits = 2) => (x === null || x === undefined || !isFinite(x) ? "–" : Number(x).toFixed(digits));
  const slow = (x) => (x === null || x === undefined ? "–" : `${Number(x).toFixed(2)}×`);
  const gpus = (n) => (n === null || n === undefined ? "–" : n < 1 ? `${n} GPU` : `${n} GPU${n === 1 ? "" : "s"}`);
  const pct = (x, digits = 0) => (x === null || x === undefined ? "–" : `${(100 * x).toFixed(digits)}%`);

  // Predicted slowdown to a colour: green at 1.0x, amber around 1.25x, red from 1.5x; grey when unknown.
  function slowdownColour(s) {
    if (s === null || s === undefined || !isFinite(s)) return "hsl(210, 12%, 82%)";
    const f = Math.min(1, Math.max(0, (s - 1) / 0.5));
    return `hsl(${Math.round(130 * (1 - f))}, 62%, ${Math.round(74 - 6 * f)}%)`;
  }

  const stateBadge = (state) => html`<span class="badge state-${state}">${state}</span>`;

  return {
    API, ApiError, token, setToken, request, html, raw, esc, mount, duration, ago, clock, stamp, num, slow, gpus,
    pct, slowdownColour, stateBadge, ranges, gpuWords, allocationWords,
    set onUnauthorized(fn) { onUnauthorized = fn; },
  };
})();
