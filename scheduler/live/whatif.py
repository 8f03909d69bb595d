"""What-if: replay the live cluster's present under another policy, with more nodes or extra jobs, in the simulator.

A request (`WhatIfRequest`, every field optional) is answered in three steps:

1. `snapshot(store)` (`scheduler.live.snapshot`, shared with the live start estimates) reads the store once: the
   nodes (their preset and GPUs, giving the same cluster model the controller builds: a node that is down stays in
   it with its GPUs closed, so a job only it could hold waits instead of being refused), the running jobs with
   their GPUs, share and remaining isolated work (an emulated job's `duration_s * (1 - progress)`, a command job's
   estimate less what its run has done), the pending jobs in submission order and the active policy.
2. `evaluate(snap, request, make_policy)` builds, per seed, a simulation that starts *now* (t=0): running jobs keep
   their placements at t=0 (`Simulator(initial=...)`), pending jobs arrive at t=0 in their order, hypothetical jobs
   at `submit_in_s`. With `trace`, the trace's jobs replace the live ones (on the live cluster plus extra nodes).
   A hypothetical job the cluster can never run is refused naming its field; an elastic one whose submitted size it
   cannot hold but a smaller size can is answered at the largest such size, as `POST /jobs` would store it
   (`scheduler.core.admission.elastic_admission`), and a note says so.
3. The per-seed metrics become distributions (mean, min, max and the per-seed values).

**Times count from now.** A job's JCT and queueing delay are measured from the moment of the request: what pending
jobs waited before it is not included, and a running job's JCT is its remaining time.

**What seeds mean.** Nobody knows how long jobs will really run: `duration_s` is an estimate. Each seed draws every
job's true remaining work as the estimate times a log-normal factor `exp(SIGMA * z - SIGMA**2 / 2)` with z ~ N(0, 1)
from `numpy.random.default_rng(seed)` (SIGMA = 0.3: the estimate is the factor's mean; about two thirds of the draws
fall within -26%..+35% of it), and seeds the policy. The spread between seeds is the uncertainty the answer reports.
Draws are paired: the live (or trace) jobs get the same draws with and without the hypothetical jobs, so the
`baseline` (same seeds, active policy, no hypothetical jobs, no extra nodes) differs from the scenario only by the
change asked about.

This module is core: it takes `make_policy` as an argument rather than importing the policies package.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from scheduler.core.admission import Fit, spec_admission
from scheduler.core.constraints import ConstraintError, Constraints
from scheduler.core.contention import ContentionModel
from scheduler.core.decisions import Policy
from scheduler.core.elastic import brought_down
from scheduler.core.generic import known_profiles
from scheduler.core.heap import heap_frozen
from scheduler.core.model import PRESETS, Cluster, JobPhase, JobSpec, Placement, SpecError
from scheduler.core.outages import OnFault, Outage
from scheduler.core.reservations import ReservationRule
from scheduler.core.room import fits_open
from scheduler.core.simulator import Placed, SimulationError, Simulator
from scheduler.core.state import PlacementError
from scheduler.core.workloads import ModelProfile
from scheduler.live.snapshot import MIN_WORK_S, Elastic, LiveJob, LiveNode, Snapshot, live_spec, snapshot

SIGMA = 0.3  # log-normal spread of a job's true remaining work around its estimate
MAX_SEEDS = 20
MAX_EXTRA_NODES = 1024
MAX_HYPOTHETICAL = 1000
MAX_JOBS = 20_000  # jobs in one simulation (live or trace, plus hypothetical): the request runs synchronously
# The request's own jobs (hypothetical, or a trace's) x seeds a non-admin request may simulate (the server's default;
# CORRAL_WHATIF_BUDGET overrides it). A 1,000-job trace x 10 seeds held a server thread for 72 s; 2,500 job-seeds is a
# few seconds under rl:default. Only what the request brings counts: other users' queues never make it fail.
DEFAULT_BUDGET = 2_500
# The live queue's cost is bounded apart: a non-admin what-if simulates the running jobs (they hold GPUs: as many as
# the cluster holds) and at most DEFAULT_QUEUE_CAP pending jobs (CORRAL_WHATIF_QUEUE overrides it), the first in queue
# order; the later ones are left out and the answer says so (`bounds`, `notes`). Pending jobs all arrive at t=0, and
# such a queue costs more than linearly under rl:default (16 GPUs, one seed, 1-GPU jobs: 100 pending 0.3-2 s, 200 about
# 2 s, 500 10 s, 1,000 45 s, 3,025 305 s), so the cap is per simulation; seeds (at most MAX_SEEDS) multiply it.
DEFAULT_QUEUE_CAP = 100
DEFAULT_POLICY = "rl:default"
METRICS = ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "gpu_util", "makespan_s",
           "jobs_completed", "jobs_rejected", "jobs_unfinished")
WAITING_FOR_CLOSED = ("the run ended with jobs queued that only closed GPUs could hold (a node down, drained or "
                      "faulty): they count as unfinished, waiting for those GPUs to take jobs again")
TIME_ORIGIN = ("t=0 is the moment of the request: JCT and queueing delay count from then, not from submission "
               "(a running job's JCT is its remaining time)")


class WhatIfError(SpecError):
    """A request that cannot be answered. `field` names the request field at fault (dotted, e.g. `jobs.0.model`), or
    is None when the live state is the problem (e.g. no nodes registered yet)."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


# ---- the request ---------------------------------------------------------------------------------------------------


MAX_ELASTIC_GPUS = 8192  # an elastic bound, as a submission's (web.limits.MAX_JOB_GPUS)
MAX_ELASTIC_SIZES = 64  # sizes listed (web.limits.MAX_ELASTIC_SIZES)


class HypotheticalJob(BaseModel):
    """A job that does not exist yet: would it fit, and how long would it take?"""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=200)
    model: str
    num_gpus: float
    duration_s: float = Field(gt=0, allow_inf_nan=False, description="isolated run time (an estimate, as any job's)")
    submit_in_s: float = Field(0.0, ge=0, allow_inf_nan=False, description="arrival, seconds from now")
    # Elastic (`scheduler.core.elastic`), as a submission's: the core checks how they go together when the job is built.
    min_gpus: int | None = Field(None, ge=1, le=MAX_ELASTIC_GPUS)
    max_gpus: int | None = Field(None, ge=1, le=MAX_ELASTIC_GPUS)
    sizes: tuple[int, ...] = Field((), max_length=MAX_ELASTIC_SIZES)
    resize_pause_s: float | None = Field(None, ge=0, le=86400.0, allow_inf_nan=False)
    # Where it may run (`scheduler.core.constraints`), as a submission gives it; the core checks it.
    constraints: dict[str, Any] | None = None

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        if v not in known_profiles():
            raise ValueError(f"unknown model {v!r}; choose one of {', '.join(known_profiles())}")
        return v

    @field_validator("num_gpus")
    @classmethod
    def _gpu_count(cls, v: float) -> float:
        if not (math.isfinite(v) and (0 < v < 1 or (v >= 1 and float(v).is_integer()))):
            raise ValueError("must be a whole number of GPUs >= 1, or a fraction strictly between 0 and 1")
        return float(v)


class WhatIfRequest(BaseModel):
    """Every field is optional: the empty request asks how the present queue plays out under the active policy."""

    model_config = ConfigDict(extra="forbid")

    policy: str | None = Field(None, min_length=1, max_length=300, description="default: the active policy")
    extra_nodes: int = Field(0, ge=0, le=MAX_EXTRA_NODES, description="nodes like the last live node, added now")
    jobs: list[HypotheticalJob] = Field(default_factory=list, max_length=MAX_HYPOTHETICAL)
    trace: str | None = Field(None, min_length=1, description="replay this trace instead of the live jobs")
    limit: int | None = Field(None, ge=1, le=MAX_JOBS, description="the trace's first N jobs")
    seeds: int = Field(5, ge=1, le=MAX_SEEDS)
    horizon_s: float | None = Field(None, gt=0, allow_inf_nan=False, description="stop simulating at this time")

    @classmethod
    def parse(cls, data: dict[str, Any]) -> WhatIfRequest:
        """Validate, raising WhatIfError naming the first bad field."""
        try:
            req = cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"]) or None
            raise WhatIfError(loc, err["msg"].removeprefix("Value error, ")) from None
        if req.limit is not None and req.trace is None:
            raise WhatIfError("limit", "applies to a trace: give trace too")
        return req


# ---- the live state ------------------------------------------------------------------------------------------------


# ---- the model of the cluster --------------------------------------------------------------------------------------


@dataclass
class _World:
    """Everything one request simulates, ready to be drawn per seed."""

    cluster: Cluster
    base_cluster: Cluster
    initial: list[tuple[JobSpec, Placement, float]]  # running jobs: spec (estimate), placement, work left
    arrivals: list[JobSpec]  # pending (at 0) or trace jobs
    hypothetical: list[JobSpec]
    attained: dict[int, float]  # index into arrivals -> attained GPU-seconds (requeued jobs)
    notes: list[str]
    outages: list[Outage] = field(default_factory=list)  # the drained nodes' and faulty GPUs', for the whole run


_spec = live_spec  # (its name before it moved to scheduler.live.snapshot)


def _world(snap: Snapshot, req: WhatIfRequest, profiles: dict[str, ModelProfile]) -> _World:
    notes = [TIME_ORIGIN]
    if not snap.nodes:
        raise WhatIfError(None, "no live nodes are registered: start `corral serve` (the controller registers them)")
    for n in snap.nodes:
        if n.preset not in PRESETS:
            raise WhatIfError(None, f"node {n.name} has unknown preset {n.preset!r}")
    # What the controller models: each node as its recorded preset, in the rack it names, on the recorded fabric.
    base_cluster = snap.cluster()
    cluster = snap.cluster(req.extra_nodes) if req.extra_nodes else base_cluster
    if snap.fabric is not None:
        notes.append(f"on the {snap.fabric} fabric, as the controller models the cluster")
    if req.extra_nodes:
        last = snap.like()
        where = f" in rack {last.rack}" if last.rack else ""
        notes.append(f"{req.extra_nodes} extra {last.preset} node(s) of {len(last.gpus)} GPUs join{where} at t=0")

    model_gpu = snap.model_gpus(base_cluster)  # store GPU index -> model GPU index

    # GPUs closed now (a down node's, a drained node's, a faulty one) stay closed for the whole run, as far as anyone
    # knows; the runs on drained and faulty ones keep going (the controller has already requeued those it would).
    outages = [Outage(0.0, gpu=model_gpu[g], reason=why) for g, why in sorted(snap.closed.items()) if g in model_gpu]
    if outages:
        notes.append(f"{len(outages)} GPU(s) take no new job for the whole run (down, drained or faulty now)")
    down = snap.down_gpus()
    initial: list[tuple[JobSpec, Placement, float]] = []
    arrivals: list[JobSpec] = []
    attained: dict[int, float] = {}
    unknown = sorted({j.model for j in [*snap.running, *snap.pending]} - set(profiles))
    if unknown:
        raise WhatIfError(None, f"live jobs use models the catalog does not know: {', '.join(unknown)}")
    if req.trace is None:
        requeued: list[LiveJob] = []
        for j in snap.running:
            gpus = tuple(model_gpu.get(g, -1) for g in j.gpus)
            if not gpus or -1 in gpus or not down.isdisjoint(j.gpus):
                requeued.append(j)  # placed on a node that is down (or not yet placed): the controller requeues it
                continue
            spec = _spec(f"{j.name}#{j.id}", j.model, j.num_gpus, j.work_left, profiles, user=j.user,
                         priority=j.priority, slo_ms=j.slo_ms, preemptible=j.preemptible, time_limit_s=j.time_limit_s,
                         elastic=j.elastic, constraints=j.constraints)
            initial.append((spec, Placement(tuple(sorted(gpus)), j.share), j.work_left))
        if requeued:
            notes.append(f"{len(requeued)} running job(s) hold GPUs of nodes that are down: they queue again at t=0")
        for j in [*requeued, *snap.pending]:
            attained[len(arrivals)] = j.attained_gpu_s
            arrivals.append(_spec(f"{j.name}#{j.id}", j.model, j.num_gpus, j.work_left, profiles, user=j.user,
                                  priority=j.priority, slo_ms=j.slo_ms, preemptible=j.preemptible,
                                  time_limit_s=j.time_limit_s, elastic=j.elastic, constraints=j.constraints))
        notes.append(f"{len(initial)} running job(s) keep their GPUs at t=0; {len(arrivals)} pending job(s) arrive "
                     "at t=0 in submission order")
    else:
        from scheduler.core.traces import load_trace

        try:
            trace = load_trace(req.trace, limit=min(req.limit or MAX_JOBS + 1, MAX_JOBS + 1))
        except SpecError as exc:
            raise WhatIfError("trace", str(exc)) from None
        if len(trace.jobs) > MAX_JOBS:
            raise WhatIfError("limit", f"the trace has more than {MAX_JOBS} jobs: give limit <= {MAX_JOBS}")
        arrivals = list(trace.jobs)
        notes.append(f"the trace's {len(arrivals)} job(s) replace the live jobs, on the live cluster; the first "
                     "arrives at t=0")

    hypothetical = []
    contention: ContentionModel | None = None  # (built for the first job brought down to a size that fits)
    for i, h in enumerate(req.jobs):
        try:
            constraints = Constraints.from_json(h.constraints)
        except ConstraintError as exc:
            raise WhatIfError(f"jobs.{i}.constraints.{exc.field}", exc.why) from None
        try:
            spec = _spec(h.name or f"what-if-{i}", h.model, h.num_gpus, h.duration_s, profiles,
                         submit_s=h.submit_in_s, user="what-if",
                         elastic=Elastic(h.min_gpus, h.max_gpus, h.sizes, h.resize_pause_s), constraints=constraints)
        except ValueError as exc:  # the elastic fields' rules (`JobSpec._check_elastic`): each message names its field
            why = str(exc)
            field = next((f for f in ("min_gpus", "max_gpus", "sizes", "resize_pause_s") if why.startswith(f)),
                         "min_gpus")
            raise WhatIfError(f"jobs.{i}.{field}", why) from None
        verdict = spec_admission(cluster, spec, profiles)  # the simulator's rule on arrival, told here
        if isinstance(verdict, Fit):  # submitted at a size the cluster can hold, as the API would store it
            contention = contention or ContentionModel(cluster, profiles)
            spec = brought_down(contention, spec, verdict.size)
            notes.append(f"jobs.{i} ({spec.name}): {verdict.reason.text}")
        elif verdict is not None:
            extra = " with the extra nodes" if verdict.code == "gang" and req.extra_nodes else ""
            raise WhatIfError(f"jobs.{i}.{verdict.field}", (f"{h.model} " if verdict.field == "model" else "")
                              + verdict.why + extra)
        hypothetical.append(spec)
    if len(initial) + len(arrivals) + len(hypothetical) > MAX_JOBS:
        raise WhatIfError(None, f"more than {MAX_JOBS} jobs to simulate")
    return _World(cluster, base_cluster, initial, arrivals, hypothetical, attained, notes, outages)


# ---- running it ----------------------------------------------------------------------------------------------------


def draw_factors(seed: int, n_base: int, n_hypothetical: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean-one log-normal factors for the base jobs (running, then pending or trace) and the hypothetical ones: the
    base draws come first, so they are the same whether or not hypothetical jobs are asked about."""
    rng = np.random.default_rng(seed)
    base = np.exp(SIGMA * rng.standard_normal(n_base) - SIGMA**2 / 2)
    hypo = np.exp(SIGMA * rng.standard_normal(n_hypothetical) - SIGMA**2 / 2)
    return base, hypo


@dataclass
class _Run:
    metrics: dict[str, float]
    hypothetical_jct: list[float | None]
    hypothetical_queue: list[float | None]


def _simulate(world: _World, cluster: Cluster, policy: Policy, seed: int, *, with_hypothetical: bool,
              horizon_s: float | None, profiles: dict[str, ModelProfile],
              reservations: ReservationRule | None = None, mps_one_user: bool = False) -> _Run:
    n_init, n_arr = len(world.initial), len(world.arrivals)
    base, hypo = draw_factors(seed, n_init + n_arr, len(world.hypothetical))
    initial = []
    for (spec, placement, work), f in zip(world.initial, base[:n_init], strict=True):
        initial.append(Placed(replace(spec, duration_s=work * f), placement, work * f))
    # The drawn work is the truth the simulation runs; only oracle policies (sjf) read duration_s, and they are
    # oracles: they may know it.
    arrivals = [replace(s, duration_s=s.duration_s * f) for s, f in zip(world.arrivals, base[n_init:], strict=True)]
    extra = ([replace(s, duration_s=s.duration_s * f) for s, f in zip(world.hypothetical, hypo, strict=True)]
             if with_hypothetical else [])
    try:
        sim = Simulator(cluster, [*arrivals, *extra], policy, profiles=profiles, initial=initial,
                        outages=world.outages, on_fault=OnFault.KEEP, reservations=reservations,
                        mps_one_user=mps_one_user)
    except PlacementError as exc:
        raise WhatIfError(None, f"the store's allocations are inconsistent: {exc}") from None
    by_spec = {id(j.spec): j for j in sim.jobs}
    for i, gpu_s in world.attained.items():
        by_spec[id(arrivals[i])].attained_gpu_s = gpu_s
    try:
        with heap_frozen():  # (as `Simulator.run`)
            while not sim.done and (horizon_s is None or sim.next_event_time() <= horizon_s):
                sim.advance()
                sim.schedule()
                if sim.idle_forever():
                    # GPUs closed for the whole run (a node down, drained or faulty) may be all some job could use:
                    # it waits for them, as the controller keeps it waiting, and the policy's order may keep others
                    # behind it (fifo does). With none closed, or no queued job that needs them, the policy failed.
                    if not world.outages or all(fits_open(sim.view, j.spec) for j in sim.pending.values()):
                        stuck = next(iter(sim.pending.values()))
                        raise SimulationError(f"{policy.name} left {len(sim.pending)} job(s) queued on an idle "
                                              f"cluster, first {stuck.spec.name}")
                    if WAITING_FOR_CLOSED not in world.notes:
                        world.notes.append(WAITING_FOR_CLOSED)
                    break
    except SimulationError as exc:
        raise WhatIfError("policy", f"{policy.name} failed in the simulation: {exc}") from None
    jobs = [by_spec[id(s)] for s in extra]
    return _Run(
        run_metrics(sim, horizon_s),
        [float(j.end_s) - j.spec.submit_s if j.state is JobPhase.DONE else None for j in jobs],  # type: ignore[arg-type]
        [float(j.end_s) - j.spec.submit_s - j.run_time if j.state is JobPhase.DONE else None  # type: ignore[arg-type]
         for j in jobs],
    )


def run_metrics(sim: Simulator, horizon_s: float | None = None) -> dict[str, float]:
    """The simulator's headline metrics, also for a run stopped at `horizon_s` (then over the jobs done by then; GPU
    utilisation over [0, horizon] counts the work of jobs still running). Run to the end, they equal
    `sim.metrics()`."""
    done = [j for j in sim.jobs if j.state is JobPhase.DONE]
    rejected = sum(j.state is JobPhase.REJECTED for j in sim.jobs)
    unfinished = len(sim.jobs) - len(done) - rejected
    out: dict[str, float] = dict.fromkeys(METRICS, 0.0)
    out |= {"jobs_completed": len(done), "jobs_rejected": rejected, "jobs_unfinished": unfinished}
    if not sim.jobs:
        return out
    t0 = min(j.spec.submit_s for j in sim.jobs)
    end = max((float(j.end_s) for j in done), default=t0)  # type: ignore[arg-type]
    t_end = horizon_s if unfinished and horizon_s is not None else end
    busy = sum(j.run_time * j.spec.gpu_demand for j in done)
    busy += sum((j.run_time + max(t_end - j.last_update, 0.0)) * j.spec.gpu_demand for j in sim.running.values())
    span = t_end - t0
    out["makespan_s"] = span
    out["gpu_util"] = busy / (sim.cluster.num_gpus * span) if span > 0 else 0.0
    if done:
        jct = np.array([float(j.end_s) - j.spec.submit_s for j in done])  # type: ignore[arg-type]
        run = np.array([j.run_time for j in done])
        p50, p95, p99 = np.percentile(jct, [50, 95, 99])
        out |= {"avg_jct_s": float(jct.mean()), "p50_jct_s": float(p50), "p95_jct_s": float(p95),
                "p99_jct_s": float(p99), "avg_queue_s": float((jct - run).mean())}
    return out


def _distribution(values: list[float]) -> dict[str, Any]:
    return {"mean": float(np.mean(values)), "min": float(min(values)), "max": float(max(values)),
            "per_seed": [float(v) for v in values]}


def _distributions(runs: list[_Run]) -> dict[str, dict[str, Any]]:
    return {m: _distribution([r.metrics[m] for r in runs]) for m in METRICS}


def _mean_or_none(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return float(np.mean(got)) if got else None


def check_budget(n_jobs: int, req: WhatIfRequest, budget: int | None) -> None:
    """Refuse a request whose own jobs (hypothetical, or a trace's) x seeds exceed `budget` (None: no bound). The
    live queue is not counted here (see `cap_queue`): nothing but the request's own fields can make it fail. The
    field named is the one to lower: `seeds` when one seed fits, else what brought the jobs (`limit` for a trace,
    else `jobs`)."""
    if budget is None or n_jobs * req.seeds <= budget:
        return
    if n_jobs <= budget:
        raise WhatIfError("seeds", f"{n_jobs} jobs of the request x {req.seeds} seeds exceeds the budget of {budget} "
                                   f"jobs x seeds for non-admins: use at most {budget // n_jobs} seeds")
    field = "limit" if req.trace is not None else "jobs"
    raise WhatIfError(field, f"{n_jobs} jobs of the request exceed the budget of {budget} jobs x seeds for "
                             "non-admins even with one seed" + (": give a smaller limit" if req.trace is not None
                                                                 else ""))


def cap_queue(world: _World, cap: int | None) -> dict[str, Any]:
    """Keep the first `cap` queued jobs of `world` (requeued, then pending, in queue order) and say what was left
    out: the `bounds` block of the answer."""
    queued = len(world.arrivals)
    kept = queued if cap is None else min(queued, cap)
    if kept < queued:
        world.arrivals = world.arrivals[:kept]
        world.attained = {i: v for i, v in world.attained.items() if i < kept}
        world.notes.append(
            f"{queued - kept} of the {queued} pending job(s) were left out: a non-admin what-if simulates the first "
            f"{kept} in queue order (the server's CORRAL_WHATIF_QUEUE). The "
            "ones left out were submitted later, yet they compete for the same GPUs: queueing and JCTs here are "
            "optimistic, most of all for hypothetical jobs, which arrive after every pending job (an admin's "
            "what-if simulates the whole queue)")
    return {"queue_cap": cap, "pending_total": queued, "pending_simulated": kept, "pending_left_out": queued - kept}


def evaluate(snap: Snapshot, req: WhatIfRequest, make_policy: Callable[[str, int], Policy], *,
             default_policy: str = DEFAULT_POLICY, profiles: dict[str, ModelProfile] | None = None,
             budget: int | None = None, queue_cap: int | None = None,
             reservations: ReservationRule | None = None, mps_one_user: bool = False) -> dict[str, Any]:
    """Answer `req` about `snap` (see the module docstring); the result is plain JSON-able data. `reservations`: the
    live service's reservation rule (`corral serve --reserve-after/--reserve-share`), so a what-if schedules as the
    controller does; `mps_one_user` likewise (its job accounts' MPS rule: `scheduler.core.colocation`). With `budget`, a
    request whose own jobs (hypothetical or trace) x seeds exceed it is refused (WhatIfError) before any simulation
    runs. With `queue_cap`, only the first `queue_cap` pending jobs are simulated (the answer's `bounds` says how many
    were left out); None: all of them."""
    wall0 = time.perf_counter()
    profiles = profiles if profiles is not None else known_profiles()
    active = snap.active_policy or default_policy
    name = req.policy.strip() if req.policy is not None else active

    def policy(policy_name: str, seed: int) -> Policy:
        try:
            return make_policy(policy_name, seed)
        except (SpecError, ValueError) as exc:
            raise WhatIfError("policy", str(exc)) from None

    policy(name, 0)  # an unknown name is refused before anything is built
    world = _world(snap, req, profiles)
    own = len(world.hypothetical) + (len(world.arrivals) if req.trace is not None else 0)
    check_budget(own, req, budget)
    bounds = {"budget": budget, "request_job_seeds": own * req.seeds,
              **cap_queue(world, None if req.trace is not None else queue_cap)}
    seeds = list(range(req.seeds))
    runs = [_simulate(world, world.cluster, policy(name, s), s, with_hypothetical=True, horizon_s=req.horizon_s,
                      profiles=profiles, reservations=reservations, mps_one_user=mps_one_user) for s in seeds]
    changed = name != active or req.extra_nodes > 0 or bool(world.hypothetical)
    baseline = delta = None
    if changed:
        base_runs = [_simulate(world, world.base_cluster, policy(active, s), s, with_hypothetical=False,
                               horizon_s=req.horizon_s, profiles=profiles, reservations=reservations,
                               mps_one_user=mps_one_user) for s in seeds]
        baseline = {"policy": active, "extra_nodes": 0, "hypothetical_jobs": 0, "metrics": _distributions(base_runs)}
        delta = {m: _distribution([r.metrics[m] - b.metrics[m] for r, b in zip(runs, base_runs, strict=True)])
                 for m in METRICS}
    hypothetical = []
    for i, (h, spec) in enumerate(zip(req.jobs, world.hypothetical, strict=True)):
        jcts = [r.hypothetical_jct[i] for r in runs]
        hypothetical.append({
            "name": spec.name, "model": h.model, "num_gpus": spec.num_gpus, "duration_s": spec.duration_s,
            "submit_in_s": h.submit_in_s, "jct_s": _mean_or_none(jcts),
            "queue_s": _mean_or_none([r.hypothetical_queue[i] for r in runs]),
            "jct_s_per_seed": jcts, "completed_in": sum(v is not None for v in jcts),
        })
    if req.horizon_s is not None:
        world.notes.append(f"simulated up to t={req.horizon_s:g} s: JCT and queueing cover the jobs done by then")
    return {
        "policy": name,
        "active_policy": active,
        "seeds": seeds,
        "sigma": SIGMA,
        "time_origin": "now",
        "snapshot_at": snap.taken_at,
        "cluster": {"nodes": world.cluster.num_nodes, "gpus": world.cluster.num_gpus,
                    "down_nodes": sum(not n.alive for n in snap.nodes), "extra_nodes": req.extra_nodes,
                    "name": world.cluster.name},
        "jobs": {"running": len(world.initial), "pending": 0 if req.trace else len(world.arrivals),
                 "trace": len(world.arrivals) if req.trace else 0, "hypothetical": len(world.hypothetical)},
        "metrics": _distributions(runs),
        "hypothetical": hypothetical,
        "baseline": baseline,
        "delta": delta,
        "bounds": bounds,
        "notes": world.notes,
        "wall_s": time.perf_counter() - wall0,
    }


def what_if(store: Any, request: WhatIfRequest | dict[str, Any], make_policy: Callable[[str, int], Policy], *,
            default_policy: str = DEFAULT_POLICY, budget: int | None = None,
            queue_cap: int | None = None, reservations: ReservationRule | None = None,
            mps_one_user: bool = False) -> dict[str, Any]:
    """Snapshot `store` and answer `request` (a dict is validated first). Raises WhatIfError naming the bad field."""
    req = request if isinstance(request, WhatIfRequest) else WhatIfRequest.parse(request)
    return evaluate(snapshot(store), req, make_policy, default_policy=default_policy, budget=budget,
                    queue_cap=queue_cap, reservations=reservations, mps_one_user=mps_one_user)


# What callers reach here, also the live state's reader (`scheduler.live.snapshot`, shared with the start estimates).
__all__ = ["DEFAULT_BUDGET", "DEFAULT_POLICY", "DEFAULT_QUEUE_CAP", "MIN_WORK_S", "Elastic", "HypotheticalJob",
           "LiveJob", "LiveNode", "Snapshot", "WhatIfError", "WhatIfRequest", "evaluate", "snapshot", "what_if"]
