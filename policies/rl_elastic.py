"""The learned policy's size choices (issue 49): what encoding 8 of `policies.rl_encoding` offers for elastic jobs.

* **A start at one of several sizes.** An elastic job is offered as soon as its smallest size fits (the frame's fit
  tests, its queue rows and the preemption slots read it at that size: `least`), with candidate placements at up to
  three sizes (`start_sizes`): the size it was submitted at, its smallest, and the largest that fits now within its
  team's room. Each size keeps its own non-dominated placements (`keep_per_size`: a larger size is not "dominated"
  by a smaller one's lower slowdown), the submitted size first, so a rigid job's candidates are encoding 7's.
* **A grow** (the `grow` slot): the running elastic job whose best step saves the largest share of its expected time
  left per added GPU, net of its pause (`marginal-gain-expected`'s grow rule, `MarginalGain.step`), with placements
  at up to `MAX_CANDIDATES` larger sizes that the free GPUs hold, that step's size among them, each one the resize
  rules allow (`scheduler.core.resizing.refusal`: worth its pause, not within the interval).
* **A shrink** (the `shrink` slot): the first job of Gittins' order that fits nowhere, started at its smallest size
  on GPUs running elastic jobs give back (`shrink_room`, by `marginal-gain-expected`'s `make_room`): jobs of its
  team, of no higher priority, above their minimum, not resized within the interval and expected to run longer than
  it, those expected to lose least time per GPU given back first, each by what is still lacking, as few as make room.
  Both read the size distribution's expected remaining work, not the true one: the agent is not an oracle.

Choosing a grow or a shrink is never forced: waiting (declining it) is offered beside them, as beside a preemption.
Every size feature is 0 for a rigid job at its size (`size_features`), so a workload without elastic jobs encodes as
encoding 7 with zeros inserted.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from policies.gittins import SizeDistribution
from policies.marginal_gain import MarginalGainExpected, Sizing
from policies.placement import Planner
from policies.sizing import extra_gpus, room
from scheduler.core.contention import Prediction
from scheduler.core.decisions import Resize
from scheduler.core.elastic import sized, sizes_within
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.resizing import refusal, too_soon
from scheduler.core.state import ClusterView

GROW, SHRINK = "grow", "shrink"  # the slots that resize running elastic jobs
SIZE_CANDIDATE_FEATURES = 3  # log2 of the size over the base size, grown and shrunk apart; per-GPU speed over base's
ELASTIC_JOB_FEATURES = 3  # elastic or not, the width of its sizes, its size now over its submitted one
ELASTIC_CLUSTER_FEATURES = 2  # GPUs running elastic jobs hold, the queue's elastic share
START_SIZE_TRIES = 3  # sizes tried, largest first, for the largest start that has a placement (a bound on searches)


def least(spec: JobSpec) -> JobSpec:
    """`spec` at its smallest size (a rigid job: itself): what the frame asks whether an elastic job fits at."""
    if not spec.elastic:
        return spec
    return sized(spec, spec.size_choices()[0])


def submitted(job: Job) -> JobSpec:
    return job.submitted or job.spec


def start_sizes(view: ClusterView, planner: Planner, job: Job) -> list[int]:
    """The sizes an elastic pending job is offered a start at, the submitted one first: its submitted size if its
    placements exist, its smallest, and the largest that fits now within its team's room (tried largest first, at
    most `START_SIZE_TRIES` sizes)."""
    spec = job.spec
    choices = spec.size_choices()
    smallest, n = choices[0], spec.workers
    most = min(planner.free_whole, room(view.tenancy, job, True, 0))
    out = [k for k in (n, smallest) if k <= most]
    for k in reversed(sizes_within(spec, smallest + 1, most)[-START_SIZE_TRIES:]):
        if k == n:  # the largest that may fit is the submitted size, offered already
            break
        if planner.candidates(sized(spec, k)):
            out.append(k)
            break
    return list(dict.fromkeys(out))


def keep_per_size(cands: Sequence[Placement], preds: Sequence[Prediction], limit: int,
                  non_dominated: Callable[[Sequence[Prediction]], list[int]]) -> list[int]:
    """Indices of the candidates kept: each size's non-dominated ones (`non_dominated`), sizes in their first order;
    every size after the first keeps its best one, the first the rest of `limit`."""
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(cands):
        groups.setdefault(len(p.gpus), []).append(i)
    if len(groups) == 1:
        return non_dominated(preds)[:limit]
    kept = [[idx[i] for i in non_dominated([preds[i] for i in idx])] for idx in groups.values()]
    first = kept[0][:max(1, limit - (len(kept) - 1))]
    return sorted([*first, *(k[0] for k in kept[1:] if k)][:limit], key=lambda i: i)


def size_features(view: ClusterView, spec: JobSpec, base: int, k: int) -> tuple[float, float, float]:
    """A placement at `k` GPUs of a job whose size is `base` now (a start: its submitted size): log2 of the growth,
    of the shrink, and how far its speed per GPU is from the base size's (|ratio - 1|: the efficiency a grow loses to
    sublinear scaling, or a shrink gains); all 0 at the base size, so for every rigid job."""
    if k == base:
        return 0.0, 0.0, 0.0
    ratio = math.log2(k / base)
    per_gpu = (view.speedup(spec, k) / k) / (view.speedup(spec, base) / base)
    return max(ratio, 0.0) / 2.0, max(-ratio, 0.0) / 2.0, 1.0 - per_gpu if per_gpu < 1.0 else per_gpu - 1.0


def job_size_features(job: Job) -> tuple[float, float, float]:
    spec = submitted(job)
    if not spec.elastic:
        return 0.0, 0.0, 0.0
    choices = spec.size_choices()
    now = job.spec.workers
    return 1.0, math.log2(choices[-1] / choices[0]) / 4.0, abs(math.log2(now / spec.workers)) / 2.0


# ---- running jobs ---------------------------------------------------------------------------------------------------


def grow(view: ClusterView, planner: Planner, sizes: SizeDistribution, now: float, limit: int) -> Filled | None:
    """The grow slot's job and its placements at up to `limit` larger sizes the free GPUs hold, each one the resize
    rules allow; None if no running elastic job may grow. The job is the one whose best step saves the largest share
    of its expected time left per added GPU, net of its pause, that step's size among those offered (the sizing
    heuristic's choice, `marginal-gain-expected`: the agent may follow it, take another size, or decline)."""
    free = planner.free_whole
    if free <= 0 or not view.elastic:
        return None
    sizer = _sizer(sizes)
    best: tuple[float, Job, int] | None = None
    for job in view.elastic.values():
        if too_soon(view, job, now):
            continue
        held = list(view.placement(job.id).gpus)
        step = sizer.step(view, Sizing(job, held, fresh=False), min(free, room(view.tenancy, job, False, len(held))),
                          now)
        if step is not None and step[0] > 0.0 and (best is None or step[0] > best[0]):
            best = (step[0], job, step[1])
    if best is None:
        return None
    _, job, chosen = best
    k = job.spec.workers
    bigger = list(sizes_within(submitted(job), k + 1, k + min(free, room(view.tenancy, job, False, k))))
    picks = bigger if len(bigger) <= limit else sorted({chosen, *_spread(bigger, limit - 1)})
    gpus = view.placement(job.id).gpus
    cands: list[Placement] = []
    for n in picks:
        extra = extra_gpus(planner, gpus, n - len(gpus), job.spec)
        if extra is None:
            continue
        p = Placement(tuple(sorted([*gpus, *extra])))
        if refusal(view, Resize(job.id, p), now) is None:
            cands.append(p)
    if not cands:
        return None
    # Its own contention now for every size: a prediction at the new size would count its present run as another
    # job's traffic on its own GPUs (the size features say what the size changes).
    now_pred = Prediction(view.slowdown(job.id), {}, {})
    return Filled(job, cands, [now_pred] * len(cands), [], GROW)


# The sizing heuristic whose rules pick the slots' jobs, per size distribution (as `rl_encoding._gittins_queues`).
_SIZERS: weakref.WeakKeyDictionary[SizeDistribution, MarginalGainExpected] = weakref.WeakKeyDictionary()


def _sizer(sizes: SizeDistribution) -> MarginalGainExpected:
    if sizes not in _SIZERS:
        _SIZERS[sizes] = MarginalGainExpected(sizes=sizes)
    return _SIZERS[sizes]


def _spread(sizes: list[int], limit: int) -> list[int]:
    """Up to `limit` of `sizes`, the smallest and the largest included, evenly between."""
    if len(sizes) <= limit:
        return sizes
    step = (len(sizes) - 1) / (limit - 1)
    return list(dict.fromkeys(sizes[round(i * step)] for i in range(limit)))


@dataclass(frozen=True)
class Shrink:
    resizes: list[Resize]  # the shrinks, each for the job this starts
    plan: Planner  # the plan they leave (the job's placements are searched on it)


def shrink_room(view: ClusterView, planner: Planner, sizes: SizeDistribution, waiting: Job, now: float) -> Shrink | None:
    """Shrinks of running elastic jobs that make room for `waiting` at its smallest size, by the sizing heuristic's
    rule (`marginal-gain-expected`'s `make_room`), or None."""
    made = _sizer(sizes).make_room(view, planner, waiting, now)
    resizes = [d for d in made if isinstance(d, Resize)]
    if not resizes:
        return None
    plan = planner.without([])
    for r in resizes:
        plan.give_back(view.running[r.job_id])
        plan.take(view.running[r.job_id].spec, r.placement)
    return Shrink(resizes, plan)


# ---- the slots ------------------------------------------------------------------------------------------------------


class Frame(Protocol):
    """What the slots ask of `policies.rl_encoding._Frame` (which imports this module, so it is named here)."""

    view: ClusterView
    planner: Planner

    def fits(self, job: Job, predict: bool = True) -> object | None: ...

    def scored(self, job: Job, cands: list[Placement], victims: list[Job]) -> tuple[list[Placement],
                                                                                 list[Prediction], list[Job]]: ...


@dataclass(frozen=True)
class Filled:
    """What a slot holds before it is encoded: its job, candidates and their predictions, and victims (a start) or
    the jobs a shrink resizes, with its resizes (a shrink), or none (a grow)."""

    job: Job
    candidates: list[Placement]
    predictions: list[Prediction]
    victims: list[Job]
    kind: str = "start"
    resizes: tuple[Resize, ...] = ()


SHRINK_LOOK = 256  # jobs read at most for the first that fits nowhere (a bound on the shrink slot's cost)


def resize_slots(frame: Frame, sizes: SizeDistribution, jobs: list[Job], order: np.ndarray | None,
                 fits: Mapping[int, Any], refused: np.ndarray, now: float, limit: int) -> dict[str, Filled]:
    """The grow and shrink slots, where running elastic jobs may be resized. `order`: the queue (indices into `jobs`)
    in Gittins' order, the sizing heuristic's, whose first job that fits nowhere is the shrink slot's; `fits` and `refused`: what the start orders found of the jobs they asked (`rl_encoding._start_heads`);
    `limit`: candidates per slot."""
    view, planner = frame.view, frame.planner
    out: dict[str, Filled] = {}
    grown = grow(view, planner, sizes, now, limit)
    if grown is not None:
        out[GROW] = grown
    if order is None or not any(j.spec.workers > submitted(j).size_choices()[0] for j in view.elastic.values()):
        return out
    for i in order[:SHRINK_LOOK].tolist():
        fit = None if refused[i] else fits[i] if i in fits else frame.fits(jobs[i], predict=False)
        if fit is not None:
            continue
        room = shrink_room(view, planner, sizes, jobs[i], now)
        cands = room.plan.candidates(least(jobs[i].spec)) if room is not None else []
        if room is not None and cands:
            shrunk = [view.running[r.job_id] for r in room.resizes]
            chosen, preds, _ = frame.scored(jobs[i], cands, shrunk)
            out[SHRINK] = Filled(jobs[i], chosen, preds, shrunk, SHRINK, tuple(room.resizes))
        break  # (the heuristic makes room for its first waiting job only)
    return out
