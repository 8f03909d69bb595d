"""A trained agent's training record: `GET /policies/{name}/report` (its `.json` sidecar, its `.eval.json` evaluation
report and a summary of both) and `GET /policies/{name}/curve.png` (its learning curve), for `rl:NAME` and
`deepshare:NAME` agents in agents/zoo and $CORRAL_HOME/agents. Other policies have no report: 404, saying so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flask import send_file
from flask_smorest import Blueprint, abort

from policies.trained import AGENT_NAME, PREFIX_OF, metadata_path, resolve
from web.auth import protect

SUMMARY_METRICS = ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "avg_slowdown", "avg_contention_slowdown",
                   "gpu_util", "preemptions", "slo_violation_frac")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except OSError as exc:  # its reason, never its path (str(exc) would say where the agents are)
        abort(500, message=f"{path.name} is unreadable: {exc.strerror or type(exc).__name__}")
    except ValueError as exc:
        abort(500, message=f"{path.name} is unreadable: {exc}")
    return data if isinstance(data, dict) else None


def trained(name: str) -> tuple[Path, dict[str, Any]]:
    """The zoo agent `PREFIX:NAME` names and its sidecar, or 404 saying why there is no report."""
    prefix, sep, stem = name.partition(":")
    if not sep or prefix not in PREFIX_OF.values():
        abort(404, message=f"policy {name!r} has no training report: only trained agents (rl:NAME, deepshare:NAME) do")
    if not AGENT_NAME.fullmatch(stem) or len(stem) > 100:
        abort(404, message=f"{name!r} does not name an agent (agents are named, never given by path)")
    model = resolve(stem)  # agents/zoo, then $CORRAL_HOME/agents
    meta = _read_json(metadata_path(model))
    if not model.is_file() or meta is None:
        abort(404, message=f"no agent {stem!r} in agents/zoo or $CORRAL_HOME/agents")
    formulation = meta.get("formulation", "corral")
    if PREFIX_OF.get(formulation, "rl") != prefix:
        abort(404, message=f"{stem}.zip is a {formulation} agent: ask for "
                           f"{PREFIX_OF.get(formulation, 'rl')}:{stem}")
    return model, meta


def _means(cases: list[dict[str, Any]]) -> dict[str, float]:
    out = {}
    for m in SUMMARY_METRICS:
        xs = [float(c[m]) for c in cases if isinstance(c.get(m), int | float)]
        if xs:
            out[m] = sum(xs) / len(xs)
    return out


def summarize(meta: dict[str, Any], report: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """Mean of each metric over the held-out scenarios, for the agent's best evaluation and each baseline."""
    if not report:
        return {"columns": [], "rows": [], "scenarios": 0, "curve": []}
    evals = [e for e in report.get("evaluations", []) if isinstance(e, dict)]
    best_at = (meta.get("best_eval") or {}).get("timesteps")
    best = next((e for e in evals if e.get("timesteps") == best_at), None)
    if best is None and evals:
        best = min(evals, key=lambda e: e.get("mean_avg_jct_s", float("inf")))
    columns: dict[str, dict[str, float]] = {}
    if best is not None:
        columns[f"{name} (step {best.get('timesteps')})"] = _means(best.get("scenarios", []))
    for baseline, cases in (report.get("baselines") or {}).items():
        columns[baseline] = _means(cases)
    rows = [{"metric": m, "values": [columns[c].get(m) for c in columns]} for m in SUMMARY_METRICS
            if any(m in v for v in columns.values())]
    curve = [{"timesteps": e.get("timesteps"), "mean_avg_jct_s": e.get("mean_avg_jct_s"),
              "mean_reward": e.get("mean_reward")} for e in evals]
    return {"columns": list(columns), "rows": rows, "scenarios": len(report.get("scenarios", [])), "curve": curve}


def blueprint(prefix: str) -> Blueprint:
    blp = protect(Blueprint("reports", __name__, url_prefix=prefix,
                            description="Trained agents' evaluation reports and learning curves"))

    @blp.route("/policies/<string:name>/report")
    @blp.response(200, description="{name, metadata (the .json sidecar), evaluation (.eval.json or null), summary, "
                                   "curve (URL or null)}")
    def report(name: str) -> Any:
        """Show a trained agent's report

        Its training sidecar, its held-out evaluation and a per-metric summary against the baselines it was compared with.
        404 for policies that are not trained agents.
        """
        model, meta = trained(name)
        evaluation = _read_json(model.parent / Path(str(meta.get("eval_report") or f"{model.stem}.eval.json")).name)
        curve = model.parent / Path(str(meta.get("learning_curve") or f"{model.stem}.curve.png")).name
        return {
            "name": name, "metadata": meta, "evaluation": evaluation, "summary": summarize(meta, evaluation, name),
            "scenarios": [s.get("label") for s in (evaluation or {}).get("scenarios", []) if isinstance(s, dict)],
            "curve": f"{prefix}/policies/{name}/curve.png" if curve.is_file() else None,
        }

    @blp.route("/policies/<string:name>/curve.png")
    @blp.response(200, description="the learning curve (PNG)", content_type="image/png")
    def curve(name: str) -> Any:
        """Get a trained agent's learning curve (PNG)"""
        model, meta = trained(name)
        path = model.parent / Path(str(meta.get("learning_curve") or f"{model.stem}.curve.png")).name
        if not path.is_file():
            abort(404, message=f"{name} has no learning curve")
        return send_file(path, mimetype="image/png", max_age=60)

    return blp
