"""What the live service recorded, read back: a replayable trace and per-job calibration records.

`corral train --from-history` replays the store's finished jobs (arrivals, sizes, models, isolated run times) on the
live cluster's shape; `corral calibrate` compares what the contention model predicted for each job with what it
observed, and refits `ContentionParams` on the recorded placements and neighbours. Both read the store only.

**Isolated duration.** The trace needs each job's run time alone (`JobSpec.duration_s`):

* `emulated` jobs: `duration_s` as submitted. It *is* the isolated time: their workers ran for the time the
  contention model predicted for their placement, so `run_s / duration_s` is the model's own slowdown plus overhead.
* `command` jobs: `duration_s` is only the user's estimate, so the isolated time is taken as
  `run_s / predicted_slowdown_avg`: the wall time it really ran, with the contention the model expected during it
  taken out (the model's time-averaged prediction, not the observed slowdown: that is `run_s / duration_s` and would
  give back the user's estimate). A job with no prediction recorded keeps `run_s`.

**Recomputing a prediction** (`Segments.predict`): a job's runs are its allocations, one run per attempt, from the
`started` event (workers up; the allocation time if absent) to the allocation's release. Every run of every job
(finished or not) that overlaps it cuts it into segments with a fixed set of co-running jobs; the contention model,
with the parameters under test, gives the job's slowdown `s_i` in each. Progress runs at `1 / s`, so the slowdown a
job should have observed over wall time `T` is `T / sum(dt_i / s_i)` (the time-harmonic mean; the controller's
`predicted_slowdown_avg` is the time-arithmetic mean, equal when the neighbours do not change).

Only the core is imported here (no policies, agents, web, Ray or Flask: `tests/test_layering.py`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path

import numpy as np
from sqlalchemy import select

from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.generic import known_profiles
from scheduler.core.model import Cluster, JobKind, JobSpec, Placement, SpecError
from scheduler.core.traces import Trace
from scheduler.live.cluster import build_live_cluster, fabric_in_store, presets_text
from scheduler.live.store.db import Store
from scheduler.live.store.models import Allocation, Gpu, Job, JobEvent, JobState, Node, PolicyVersion, User

MIN_JOBS_TRAIN = 20  # finished jobs `corral train --from-history` needs (a training window is at least 10 jobs)
MIN_JOBS_CALIBRATE = 5  # succeeded jobs with an observed slowdown `corral calibrate` needs
FIT_PARAMS = ("mps_interference", "ring_straggler", "mps_overhead")
FIT_BOUNDS = {"mps_interference": (0.0, 100.0), "ring_straggler": (0.0, 2.0), "mps_overhead": (0.0, 5.0)}
TRACE_COLUMNS = ("job_id", "submit_s", "num_gpus", "duration_s", "kind", "model", "user", "priority", "slo_ms",
                 "preemptible")


class HistoryError(SpecError):
    """The store cannot give what was asked (too few finished jobs, no cluster recorded)."""


def redact(url: str) -> str:
    """The database URL without its password (for sidecars and messages)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL: say nothing of it rather than leak it
        return "<unparsable database URL>"


@dataclass(frozen=True)
class Run:
    """One run (attempt) of a job: its GPUs and share from its allocations, and when its workers ran."""

    job_id: int
    attempt: int
    gpus: tuple[int, ...]
    nodes: tuple[str, ...]
    share: float
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class CalibrationRecord:
    """A succeeded job: where it last ran, who it ran next to, and its predicted and observed slowdowns."""

    job_id: int
    name: str
    kind: str  # emulated | command
    model: str
    num_gpus: float
    duration_s: float
    run_s: float
    predicted_slowdown_avg: float | None
    observed_slowdown: float
    gpus: tuple[int, ...]  # the last run's GPUs
    share: float  # the last run's share of each
    nodes: tuple[str, ...]
    runs: tuple[Run, ...]
    co_tenants: tuple[int, ...]  # jobs that shared one of its GPUs during one of its runs
    neighbours: tuple[int, ...]  # jobs on one of its nodes (sharing links) during one of its runs, co-tenants included

    def as_dict(self) -> dict[str, object]:
        return {
            "job_id": self.job_id, "name": self.name, "kind": self.kind, "model": self.model,
            "num_gpus": self.num_gpus, "duration_s": self.duration_s, "run_s": self.run_s,
            "predicted_slowdown_avg": self.predicted_slowdown_avg, "observed_slowdown": self.observed_slowdown,
            "gpus": list(self.gpus), "share": self.share, "nodes": list(self.nodes), "runs": len(self.runs),
            "co_tenants": list(self.co_tenants), "neighbours": list(self.neighbours),
        }


@dataclass
class History:
    url: str  # redacted
    cluster: Cluster | None  # each node modelled as the preset the store recorded for it
    preset: str  # the nodes' preset; with several, the most common (what a one-preset model of the cluster uses)
    gpus_by_node: list[int]
    active_policy: str | None
    finished: int  # succeeded jobs in the store
    trace: Trace
    records: list[CalibrationRecord]
    runs: list[Run]  # every run of every job, for recomputing predictions
    specs: dict[int, JobSpec]  # every job with a known model, as the contention model sees it
    first_submitted_at: float | None = None
    last_finished_at: float | None = None
    notes: list[str] = field(default_factory=list)
    presets_by_node: list[str] = field(default_factory=list)  # in the store's node order

    @property
    def cluster_text(self) -> str:
        """'dgx-a100 x 4 nodes', or 'dgx-a100 x 2 + pcie-t4 x 1 nodes' for nodes of several presets."""
        if len(set(self.presets_by_node)) > 1:
            return f"{presets_text(self.presets_by_node)} nodes"
        return f"{self.preset} x {len(self.gpus_by_node)} nodes"

    @property
    def span_s(self) -> float:
        if self.first_submitted_at is None or self.last_finished_at is None:
            return 0.0
        return self.last_finished_at - self.first_submitted_at

    def describe(self) -> dict[str, object]:
        return {
            "db": self.url, "jobs": len(self.trace.jobs), "succeeded_in_store": self.finished,
            "skipped": dict(self.trace.skipped), "span_s": round(self.span_s, 3),
            "first_submitted_at": self.first_submitted_at, "last_finished_at": self.last_finished_at,
            "cluster": {"preset": self.preset, "gpus_by_node": self.gpus_by_node,
                        "presets_by_node": self.presets_by_node},
            "active_policy": self.active_policy,
        }

    def require(self, minimum: int, what: str) -> None:
        have = len(self.trace.jobs) if what == "train" else len(self.records)
        if have < minimum:
            noun = "finished (succeeded) jobs with a known model" if what == "train" else \
                "succeeded jobs with an observed slowdown and a recorded placement"
            raise HistoryError(f"{self.url} holds {have} {noun}; `corral {what}` needs at least {minimum} "
                               f"({self.finished} succeeded in all; run more jobs through `corral serve` first)")


def isolated_duration(job: Job) -> float:
    """The job's isolated run time (see the module docstring for why command jobs differ)."""
    if job.kind == "command":
        if job.run_s > 0:
            pred = job.predicted_slowdown_avg
            return job.run_s / pred if pred and pred > 0 else job.run_s
        return job.duration_s
    return job.duration_s


def _spec(job: Job, profiles: dict, submit_s: float, duration_s: float) -> JobSpec:
    prof = profiles[job.model]
    kind = JobKind(prof.kind)
    slo = job.slo_ms if job.slo_ms is not None else (prof.slo_ms or None if kind == JobKind.INFERENCE else None)
    return JobSpec(name=f"job-{job.id}", submit_s=submit_s, num_gpus=float(job.num_gpus),
                   duration_s=max(duration_s, 1e-3), model=job.model, kind=kind, priority=int(job.priority or 0),
                   slo_ms=slo, preemptible=bool(job.preemptible))


def read_history(store: Store) -> History:
    """Everything `train --from-history` and `calibrate` need, read in one transaction."""
    profiles = known_profiles()
    notes: list[str] = []
    with store.session() as s:
        nodes = list(s.scalars(select(Node).order_by(Node.index)))
        gpu_rows = list(s.scalars(select(Gpu)))
        jobs = list(s.scalars(select(Job).order_by(Job.submitted_at, Job.id)))
        allocs = list(s.scalars(select(Allocation).order_by(Allocation.id)))
        started = {(e.job_id, int((e.data or {}).get("attempt", 0))): e.at
                   for e in s.scalars(select(JobEvent).where(JobEvent.kind == "started"))}
        active = s.scalars(select(PolicyVersion.name).where(PolicyVersion.active.is_(True))).first()
        fabric, why = fabric_in_store(s)
        user_names = {uid: name for uid, name in s.execute(select(User.id, User.name))}
    users = {j.id: user_names.get(j.user_id, "") for j in jobs}
    if why:
        notes.append(why)

    # the live cluster's shape, as the controller registered it
    per_node = Counter(g.node_id for g in gpu_rows)
    gpus_by_node = [per_node.get(n.id, 0) for n in nodes]
    presets_by_node = [n.preset for n in nodes]
    presets = Counter(presets_by_node)
    preset = presets.most_common(1)[0][0] if presets else ""
    cluster: Cluster | None = None
    if nodes and all(gpus_by_node):
        if len(presets) > 1:
            notes.append(f"nodes record several presets ({presets_text(presets_by_node)}): each is modelled as its "
                         f"own; a model of one preset (`corral train --from-history`'s scenarios) uses {preset}")
        try:
            cluster = build_live_cluster(list(zip(presets_by_node, gpus_by_node, strict=True)),
                                         racks=[n.rack for n in nodes], fabric=fabric)
        except SpecError as exc:
            notes.append(f"could not rebuild the live cluster ({exc})")

    # runs: allocations grouped by (job, attempt)
    grouped: dict[tuple[int, int], list[Allocation]] = {}
    for a in allocs:
        grouped.setdefault((a.job_id, a.attempt), []).append(a)
    horizon = max([t for j in jobs for t in (j.finished_at, j.submitted_at) if t is not None] +
                  [a.allocated_at for a in allocs] + [a.released_at or 0.0 for a in allocs] + [0.0])
    runs: list[Run] = []
    runs_of: dict[int, list[Run]] = {}
    for (job_id, attempt), rows in grouped.items():
        start = started.get((job_id, attempt), min(r.allocated_at for r in rows))
        end = max((r.released_at if r.released_at is not None else horizon) for r in rows)
        run = Run(job_id, attempt, tuple(r.gpu for r in rows), tuple(dict.fromkeys(r.node for r in rows)),
                  float(rows[0].share), float(start), float(max(end, start)))
        runs.append(run)
        runs_of.setdefault(job_id, []).append(run)

    specs = {j.id: _spec(j, profiles, 0.0, max(j.duration_s, 1e-3)) for j in jobs if j.model in profiles}

    succeeded = [j for j in jobs if j.state == JobState.SUCCEEDED]
    skipped: Counter[str] = Counter()
    kept: list[tuple[Job, float]] = []
    for j in succeeded:
        if j.model not in profiles:
            skipped["model not in the catalog"] += 1
            continue
        duration = isolated_duration(j)
        if not duration > 0:
            skipped["no run time recorded"] += 1
            continue
        kept.append((j, duration))
    t0 = kept[0][0].submitted_at if kept else 0.0
    trace_jobs = [replace(_spec(j, profiles, j.submitted_at - t0, d), user=users.get(j.id, "")) for j, d in kept]
    trace = Trace(name="history", format="corral", jobs=trace_jobs, skipped=dict(skipped), source=redact(store.url))

    records = []
    for j in succeeded:
        job_runs = sorted(runs_of.get(j.id, []), key=lambda r: r.attempt)
        # A command job shows no observed slowdown (its duration_s is only an estimate), but calibration may still
        # compare its wall time with that estimate when asked to (`corral calibrate --kind command`).
        observed = j.observed_slowdown
        if observed is None and j.kind == "command" and j.run_s > 0 and j.duration_s > 0:
            observed = j.run_s / j.duration_s
        if observed is None or not job_runs or j.model not in profiles:
            continue
        last = job_runs[-1]
        tenants, near = set(), set()
        for r in job_runs:
            for o in runs:
                if o.job_id == j.id or o.end <= r.start or o.start >= r.end:
                    continue
                if set(o.gpus) & set(r.gpus):
                    tenants.add(o.job_id)
                if set(o.nodes) & set(r.nodes):
                    near.add(o.job_id)
        records.append(CalibrationRecord(
            job_id=j.id, name=j.name, kind=j.kind, model=j.model, num_gpus=float(j.num_gpus),
            duration_s=float(j.duration_s), run_s=float(j.run_s), predicted_slowdown_avg=j.predicted_slowdown_avg,
            observed_slowdown=float(observed), gpus=last.gpus, share=last.share, nodes=last.nodes,
            runs=tuple(job_runs), co_tenants=tuple(sorted(tenants)), neighbours=tuple(sorted(near)),
        ))
    finished_at = [j.finished_at for j, _ in kept if j.finished_at is not None]
    return History(
        url=redact(store.url), cluster=cluster, preset=preset, gpus_by_node=gpus_by_node, active_policy=active,
        finished=len(succeeded), trace=trace, records=records, runs=runs, specs=specs,
        first_submitted_at=t0 if kept else None, last_finished_at=max(finished_at) if finished_at else None,
        notes=notes, presets_by_node=presets_by_node,
    )


def write_trace_csv(trace: Trace, path: Path) -> Path:
    """The trace in the Corral CSV format (`load_trace` reads it back with the same jobs)."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        f.write(f"# jobs recorded in {trace.source}: isolated durations as scheduler/live/history.py explains\n")
        w = csv.writer(f)
        w.writerow(TRACE_COLUMNS)
        for j in trace.jobs:
            w.writerow([j.name, repr(j.submit_s), f"{j.num_gpus:g}", repr(j.duration_s), str(j.kind), j.model,
                        j.user, j.priority, "" if j.slo_ms is None else repr(j.slo_ms), str(j.preemptible).lower()])
    return path


# ---- recomputing predictions under other parameters -----------------------------------------------------------------


class Segments:
    """Each record's runs cut into intervals with a fixed set of co-running runs, ready to be re-predicted."""

    def __init__(self, history: History, records: Sequence[CalibrationRecord] | None = None) -> None:
        if history.cluster is None:
            raise HistoryError(f"{history.url} records no cluster (no nodes with GPUs): cannot recompute predictions")
        self.cluster = history.cluster
        self.specs = history.specs
        self.records = list(records if records is not None else history.records)
        runs = [r for r in history.runs if r.job_id in self.specs and r.seconds > 0]
        self.runs = {(r.job_id, r.attempt): r for r in runs}
        # per record: [(seconds, key of the active set)]; unique active sets shared between records
        self.sets: dict[frozenset[tuple[int, int]], int] = {}
        self.plan: list[list[tuple[float, int, tuple[int, int]]]] = []
        for rec in self.records:
            plan = []
            for run in rec.runs:
                if run.seconds <= 0:
                    continue
                others = [o for o in runs if o.end > run.start and o.start < run.end and o is not run]
                cuts = sorted({run.start, run.end} | {t for o in others for t in (o.start, o.end)
                                                      if run.start < t < run.end})
                for a, b in pairwise(cuts):
                    mid = (a + b) / 2
                    active = frozenset([(run.job_id, run.attempt)] + [(o.job_id, o.attempt) for o in others
                                                                       if o.start <= mid < o.end])
                    idx = self.sets.setdefault(active, len(self.sets))
                    plan.append((b - a, idx, (run.job_id, run.attempt)))
            self.plan.append(plan)
        self.set_list = list(self.sets)

    def _slowdowns(self, params: ContentionParams) -> list[dict[int, float]]:
        out = []
        for active in self.set_list:
            model = ContentionModel(self.cluster, params=params)
            for key in sorted(active):
                run = self.runs[key]
                model.add(run.job_id, self.specs[run.job_id], Placement(run.gpus, run.share))
            out.append(model.slowdowns())
        return out

    def predict(self, params: ContentionParams) -> np.ndarray:
        """Per record, the slowdown it should have observed under `params` (time-harmonic mean over its runs)."""
        per_set = self._slowdowns(params)
        out = np.empty(len(self.records))
        for i, plan in enumerate(self.plan):
            total = sum(dt for dt, _, _ in plan)
            progress = sum(dt / per_set[idx][key[0]] for dt, idx, key in plan)
            out[i] = total / progress if progress > 0 else math.nan
        return out


# ---- the report and the fit ----------------------------------------------------------------------------------------


def _stats(pred: Iterable[float], obs: Iterable[float]) -> dict[str, float | int | None]:
    p, o = np.asarray(list(pred), float), np.asarray(list(obs), float)
    ok = np.isfinite(p) & np.isfinite(o)
    p, o = p[ok], o[ok]
    corr = None
    if len(p) >= 2 and p.std() > 0 and o.std() > 0:
        corr = float(np.corrcoef(p, o)[0, 1])
    return {"count": len(p), "mean_predicted": float(p.mean()) if len(p) else None,
            "mean_observed": float(o.mean()) if len(o) else None,
            "mae": float(np.abs(p - o).mean()) if len(p) else None, "correlation": corr}


def summary(records: Sequence[CalibrationRecord]) -> dict[str, dict]:
    """Recorded predicted (time-averaged) vs observed slowdown: overall, per model and per job kind."""
    def pick(rs: Sequence[CalibrationRecord]) -> dict:
        return _stats([r.predicted_slowdown_avg if r.predicted_slowdown_avg is not None else math.nan for r in rs],
                      [r.observed_slowdown for r in rs])

    by_model: dict[str, list[CalibrationRecord]] = {}
    by_kind: dict[str, list[CalibrationRecord]] = {}
    for r in records:
        by_model.setdefault(r.model, []).append(r)
        by_kind.setdefault(r.kind, []).append(r)
    return {"all": pick(records), "by_model": {m: pick(rs) for m, rs in sorted(by_model.items())},
            "by_kind": {k: pick(rs) for k, rs in sorted(by_kind.items())}}


@dataclass
class FitResult:
    old: ContentionParams
    new: ContentionParams
    fitted: list[str]  # parameters the history carries a signal for
    fixed: list[str]  # parameters no recorded job's prediction depends on (kept at their old value)
    rmse_log_before: float
    rmse_log_after: float
    mae_before: float
    mae_after: float
    predicted_before: list[float]
    predicted_after: list[float]
    observed: list[float]
    evaluations: int

    def as_dict(self) -> dict[str, object]:
        return {
            "old": params_dict(self.old), "new": params_dict(self.new), "fitted": self.fitted, "fixed": self.fixed,
            "rmse_log_before": self.rmse_log_before, "rmse_log_after": self.rmse_log_after,
            "mae_before": self.mae_before, "mae_after": self.mae_after, "evaluations": self.evaluations,
        }


def params_dict(p: ContentionParams) -> dict[str, float]:
    return {name: float(getattr(p, name)) for name in FIT_PARAMS}


def fit_params(history: History, start: ContentionParams | None = None,
               records: Sequence[CalibrationRecord] | None = None) -> FitResult:
    """Least squares on log(predicted / observed) over the recorded jobs, starting from `start` (scipy's bounded
    trust-region solver; parameters with no signal in this history are left where they are)."""
    from scipy.optimize import least_squares

    start = start or ContentionParams()
    seg = Segments(history, records)
    obs = np.array([r.observed_slowdown for r in seg.records], float)
    ok = np.isfinite(obs) & (obs > 0)
    log_obs = np.log(np.where(ok, obs, 1.0))
    calls = 0

    def predict(values: dict[str, float]) -> np.ndarray:
        nonlocal calls
        calls += 1
        return seg.predict(replace(start, **values))

    base = {k: float(getattr(start, k)) for k in FIT_PARAMS}
    before = predict(base)
    ok &= np.isfinite(before) & (before > 0)
    # Which parameters move any prediction? (A history with no shared GPU says nothing about MPS interference.)
    fitted: list[str] = []
    fixed: list[str] = []
    for name in FIT_PARAMS:
        upper = FIT_BOUNDS[name][1]
        probe = min(upper, max(base[name] * 1.5, base[name] + 0.05))
        moved = np.abs(predict(base | {name: probe})[ok] - before[ok])
        (fitted if moved.size and moved.max() > 1e-9 else fixed).append(name)

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = predict(base | dict(zip(fitted, map(float, x), strict=False)))
        return np.log(np.clip(pred[ok], 1e-9, None)) - log_obs[ok]

    values = dict(base)
    if fitted and ok.sum() >= len(fitted):
        x0 = np.array([base[n] for n in fitted])
        lo = np.array([FIT_BOUNDS[n][0] for n in fitted])
        hi = np.array([FIT_BOUNDS[n][1] for n in fitted])
        x0 = np.clip(x0, lo, hi)
        sol = least_squares(residuals, x0, bounds=(lo, hi), method="trf", diff_step=1e-3, x_scale="jac",
                            max_nfev=200)
        values |= {n: round(float(v), 9) for n, v in zip(fitted, sol.x, strict=False)}
    new = replace(start, **values)
    after = predict(values)

    def rmse(p: np.ndarray) -> float:
        return float(np.sqrt(np.mean((np.log(p[ok]) - log_obs[ok]) ** 2))) if ok.any() else math.nan

    def mae(p: np.ndarray) -> float:
        return float(np.mean(np.abs(p[ok] - obs[ok]))) if ok.any() else math.nan

    return FitResult(old=start, new=new, fitted=fitted, fixed=fixed, rmse_log_before=rmse(before),
                     rmse_log_after=rmse(after), mae_before=mae(before), mae_after=mae(after),
                     predicted_before=before.tolist(), predicted_after=after.tolist(), observed=obs.tolist(),
                     evaluations=calls)
