"""Gittins index scheduling (Tiresias' discretised 2D-Gittins index, NSDI'19), with a learned job-size distribution.

When job sizes are unknown but their distribution is, the policy that minimises mean completion time on one server
serves the job with the highest **Gittins index** of its attained service `a` (Gittins, Glazebrook and Weber,
*Multi-armed bandit allocation indices*; Tiresias applies it to GPU jobs with 2D service, GPUs x time):

    G(a) = max over Δ of  P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a]

the best ratio, over how much more service Δ to give, of the chance of finishing within it to the service it would
cost. Δ ranges over the distribution's support (quantile) points. For heavy-tailed sizes G falls as a grows (least
attained service is the special case); for sizes known to be short it favours them from the start.

**The size distribution** (`SizeDistribution`) is that of a job's total service S in GPU-seconds (`duration_s` x
`num_gpus`), conditioned on what is known at submit time: its GPU class (fractional, 1 GPU, 2-4, 5-8, more than 8).
A class with fewer than `MIN_SAMPLES` samples uses the pooled distribution of all jobs. Each class is kept as a
quantile table (`QUANTILES` + 1 values at evenly spaced probabilities, from the smallest sample to the largest) and
read as a piecewise-linear CDF between them, so that `index` and `expected_remaining` are exact integrals of that CDF
and the table is small enough to ship in JSON (`to_dict` / `from_dict`). Beyond the largest sample the distribution
says nothing; a job that has outlived every sample is taken to be as far from its end as from its start (a Pareto tail
of shape 2): `expected_remaining(a) = a` and the index is 1 / a (`index()` never above its last bucket's).

The default table (`policies/data/size_distribution.json`, `SizeDistribution.default()`) is fitted by
`benchmarks/fit_sizes.py` on the first three quarters only (`scheduler.core.traces.HOLDOUT_FROM`, the part training may see)
of the Microsoft Philly trace (`../shared/traces/philly_day60.csv`: day-60 slice, ATC'19, CC BY 4.0) and of the Alibaba
GPU-sharing trace v2023 (`../shared/traces/alibaba_openb_before_day130.csv`, ATC'23), plus a synthetic workload
(`scheduler.core.traces.synthetic`). The constructor takes any other `SizeDistribution`, e.g. one learned from the live
store's history (`SizeDistribution.from_jobs`).

**The policy** (`gittins`): pending jobs are served in descending Gittins index of their attained service (ties:
arrival), placed with `Planner.best_fit`. For preemption the index is discretised into priority queues, as Tiresias
discretises attained service: a job's queue is set by its *rank* 1 / G (GPU-seconds; `thresholds`), and a pending job
may preempt running jobs only from strictly lower-priority queues (lowest first, then latest arrival, and never
freeing GPUs no pending job would take where fewer would do: Tiresias' `pick_victims`), which keeps it from
thrashing. Running jobs are indexed by queue incrementally (Tiresias' machinery); when someone waits, the policy asks
to be woken when the next running job changes queue, so preemption is reconsidered then.

**Reading the index.** `index()` is read per attained-service *bucket*, the interval between two consecutive quantile
points, valued at its lower edge: exact at the quantile points, constant in between (`exact_index()` gives the value
anywhere). That makes it one binary search per job (a policy reads it for every queued job at every decision),
makes a running job change queue only at quantile points, so the policy knows exactly when to wake up, and avoids the
spike just before a point mass of the table (many samples of one size), where the exact index grows without bound.

Options (`gittins:KEY=VALUE,...`, as `tiresias:`): `thresholds=R1,R2,...` sets the queue thresholds on the rank
(GPU-seconds, positive, increasing; default `DEFAULT_RANK_THRESHOLDS`); `starvation=F` (off by default, as in
Tiresias) promotes a pending job that has waited F times the wall time of its expected remaining service on its GPUs
to the head of the line and the top queue, so a large gang that small jobs keep overtaking gets in.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from policies.heuristics import wait_reason
from policies.placement import Planner
from policies.queue_scan import whole_fit_key
from policies.registry import UnknownPolicyError, parse_options, register, register_prefix
from policies.tiresias import Tiresias, check_thresholds, format_thresholds
from scheduler.core.decisions import Decision, Wait, WakeAt
from scheduler.core.model import Job, JobSpec, SpecError
from scheduler.core.state import ClusterView
from scheduler.core.victims import queue_demands

FORMAT = "corral-size-distribution/1"
CLASSES = ("frac", "1", "2-4", "5-8", "9+")  # GPU classes known at submit time
CLASS_LABELS = {"frac": "fractional (< 1 GPU)", "1": "1 GPU", "2-4": "2-4 GPUs", "5-8": "5-8 GPUs",
                "9+": "more than 8 GPUs"}
POOLED = "pooled"
MIN_SAMPLES = 30  # a class with fewer samples falls back to the pooled distribution
QUANTILES = 200  # quantile intervals per class (QUANTILES + 1 values stored)
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "size_distribution.json"

# Queue thresholds on the rank 1 / index, in GPU-seconds: queue 0 holds the jobs expected to need little more service.
# Tiresias' thresholds (1 and 10 GPU-hours) plus one at 100. On training windows (500 jobs, 10 per workload of Philly,
# Alibaba and synthetic, loads 0.8-2.2, two draws) `gittins` averaged 0.978 and 0.984 x tiresias' avg JCT with these,
# 0.990 and 0.983 without the third; coarser ladders (1e4, 1e5) or a single threshold lost to tiresias (1.08-1.19),
# finer ones (100-1e5, 300-3e4, 1800-1.8e4) too (1.03-1.05). `starvation=2` gave 0.968 and 0.967.
DEFAULT_RANK_THRESHOLDS: tuple[float, ...] = (3600.0, 36000.0, 360000.0)


def size_class(spec: JobSpec) -> str:
    """The job's GPU class: fractional, 1 GPU, 2-4, 5-8, more than 8."""
    n = spec.num_gpus
    if n < 1:
        return "frac"
    if n == 1:
        return "1"
    if n <= 4:
        return "2-4"
    if n <= 8:
        return "5-8"
    return "9+"


def service_gpu_s(spec: JobSpec) -> float:
    """Total service a job needs alone: its isolated duration times its GPUs (a share counts as that fraction)."""
    return spec.duration_s * spec.gpu_demand


class _Table:
    """One class's distribution: knots `t` (nondecreasing GPU-seconds) with CDF values `p` (0 to 1, evenly spaced),
    read as a piecewise-linear CDF; `area[j]` = integral of the survival function 1 - F from t[0] to t[j].

    Reads are plain-Python binary searches (a policy or an RL encoding calls them for every queued job)."""

    def __init__(self, knots: Sequence[float] | np.ndarray, samples: int) -> None:
        t = np.asarray(knots, dtype=np.float64)
        if t.ndim != 1 or t.size < 2 or not np.all(np.isfinite(t)) or t[0] <= 0 or np.any(np.diff(t) < 0):
            raise ValueError("quantiles must be at least 2 finite positive nondecreasing numbers")
        self.t = t
        self.p = np.linspace(0.0, 1.0, t.size)
        self.samples = samples
        seg = np.diff(t) * (2.0 - self.p[:-1] - self.p[1:]) / 2.0  # trapezoids of 1 - F (exact: F is linear)
        self.area = np.concatenate(([0.0], np.cumsum(seg)))
        self._t, self._p, self._area = self.t.tolist(), self.p.tolist(), self.area.tolist()
        self._ranks: list[float] | None = None

    def _terms(self, a: float) -> tuple[int, float, float] | None:
        """(first knot above a, F(a), integral of 1 - F from a to that knot), or None beyond the support."""
        t, p = self._t, self._p
        k = bisect.bisect_right(t, a)
        if k >= len(t):
            return None
        fa = 0.0 if k == 0 else p[k - 1] + (p[k] - p[k - 1]) * (a - t[k - 1]) / (t[k] - t[k - 1])
        return k, fa, (t[k] - a) * (2.0 - fa - p[k]) / 2.0

    def exact_index(self, a: float) -> float:
        terms = self._terms(a)
        if terms is None:
            return 1.0 / a
        k, fa, first = terms
        done = self.p[k:] - fa  # P(a < S <= t_j), for Δ = t_j - a
        cost = first + self.area[k:] - self.area[k]  # E[min(S - a, Δ); S > a]; both lack the same 1 / P(S > a)
        return float(np.max(done / cost))

    def expected_remaining(self, a: float) -> float:
        terms = self._terms(a)
        if terms is None:
            return float(a)
        k, fa, first = terms
        return (first + self._area[-1] - self._area[k]) / (1.0 - fa)

    @property
    def ranks(self) -> list[float]:
        """Rank (1 / index) of each bucket, valued at its lower edge: bucket 0 is [0, t[0]), bucket b is
        [t[b-1], t[b]); `bisect_right(t, a)` finds a's bucket (len(t): beyond the support)."""
        if self._ranks is None:
            edges = [0.0, *self._t[:-1]]
            self._ranks = [1.0 / self.exact_index(e) for e in edges]
        return self._ranks

    def bucket_rank(self, a: float) -> float:
        b = bisect.bisect_right(self._t, a)
        ranks = self.ranks
        return ranks[b] if b < len(ranks) else max(float(a), ranks[-1])


@dataclass(frozen=True)
class ClassInfo:
    samples: int
    fallback: bool  # True: too few samples, the pooled distribution stands in


class SizeDistribution:
    """Distribution of a job's total service (GPU-seconds) per GPU class, as quantile tables (module docstring)."""

    def __init__(self, tables: Mapping[str, _Table], classes: Mapping[str, ClassInfo],
                 sources: Sequence[Any] = (), min_samples: int = MIN_SAMPLES) -> None:
        if POOLED not in tables:
            raise ValueError("a size distribution needs a pooled table")
        self._tables = dict(tables)
        self.classes = dict(classes)
        self.sources = list(sources)
        self.min_samples = min_samples

    # ---- building --------------------------------------------------------------------------------------------------

    @classmethod
    def from_samples(cls, samples: Mapping[str, Sequence[float]], sources: Sequence[Any] = (),
                     quantiles: int = QUANTILES, min_samples: int = MIN_SAMPLES) -> SizeDistribution:
        """From raw service samples (GPU-seconds) by class key (`CLASSES`); the pooled table uses all of them."""
        unknown = set(samples) - set(CLASSES)
        if unknown:
            raise ValueError(f"unknown size classes {sorted(unknown)}; choose from {', '.join(CLASSES)}")
        arrays = {c: np.asarray(samples.get(c, ()), dtype=np.float64) for c in CLASSES}
        pooled = np.concatenate(list(arrays.values()))
        if pooled.size == 0:
            raise ValueError("no samples to learn a size distribution from")
        if quantiles < 1:
            raise ValueError(f"quantiles must be at least 1, got {quantiles}")
        if not np.all(np.isfinite(pooled)) or np.any(pooled <= 0):
            raise ValueError("service samples must be finite and positive")
        probs = np.linspace(0.0, 1.0, quantiles + 1)
        tables = {POOLED: _Table(_round(np.quantile(pooled, probs)), int(pooled.size))}
        info = {}
        for c, v in arrays.items():
            info[c] = ClassInfo(int(v.size), v.size < min_samples)
            if v.size >= min_samples:
                tables[c] = _Table(_round(np.quantile(v, probs)), int(v.size))
        return cls(tables, info, sources, min_samples)

    @classmethod
    def from_jobs(cls, jobs: Iterable[JobSpec], sources: Sequence[Any] = (), quantiles: int = QUANTILES,
                  min_samples: int = MIN_SAMPLES) -> SizeDistribution:
        """Learned from jobs' isolated durations x GPUs (e.g. a trace's training part, or the store's finished jobs)."""
        samples: dict[str, list[float]] = {c: [] for c in CLASSES}
        for spec in jobs:
            samples[size_class(spec)].append(service_gpu_s(spec))
        return cls.from_samples(samples, sources, quantiles, min_samples)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SizeDistribution:
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(f"not a size distribution (expected \"format\": \"{FORMAT}\")")
        raw = data.get("classes")
        if not isinstance(raw, Mapping) or POOLED not in raw:
            raise ValueError("a size distribution needs \"classes\" with a \"pooled\" entry")
        tables, info = {}, {}
        for key, entry in raw.items():
            if key != POOLED and key not in CLASSES:
                raise ValueError(f"unknown size class {key!r}; choose from {', '.join(CLASSES)}")
            try:
                n = int(entry["samples"])
                if "quantiles" in entry:
                    tables[key] = _Table([float(x) for x in entry["quantiles"]], n)
                elif key == POOLED:
                    raise ValueError("the pooled class needs quantiles")
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"size class {key!r}: {exc}") from None
            if key != POOLED:
                info[key] = ClassInfo(n, "quantiles" not in entry)
        for c in CLASSES:
            info.setdefault(c, ClassInfo(0, True))
        return cls(tables, info, list(data.get("sources", [])), int(data.get("min_samples", MIN_SAMPLES)))

    def to_dict(self) -> dict[str, Any]:
        classes: dict[str, Any] = {}
        for key in (POOLED, *CLASSES):
            if key in self._tables:
                tab = self._tables[key]
                classes[key] = {"samples": tab.samples, "quantiles": [_compact(x) for x in tab.t]}
            else:
                classes[key] = {"samples": self.classes[key].samples, "fallback": POOLED}
        return {
            "format": FORMAT,
            "unit": "GPU-seconds of service (isolated duration_s x num_gpus)",
            "quantiles": "values at evenly spaced probabilities 0, 1/Q, ..., 1 (piecewise-linear CDF between them)",
            "min_samples": self.min_samples,
            "sources": self.sources,
            "classes": classes,
        }

    @classmethod
    def load(cls, path: str | Path) -> SizeDistribution:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            raise SpecError(f"size distribution {path}: {exc}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @staticmethod
    def default() -> SizeDistribution:
        """The shipped table (module docstring); loaded once."""
        return _default()

    # ---- reading ---------------------------------------------------------------------------------------------------

    def table_key(self, spec: JobSpec) -> str:
        """The class whose table serves `spec`: its own, or "pooled" when its class had too few samples."""
        c = size_class(spec)
        return c if c in self._tables else POOLED

    def table(self, key: str) -> _Table:
        return self._tables[key]

    def index(self, attained_gpu_s: float, spec: JobSpec) -> float:
        """Gittins index (per GPU-second) of a job of `spec`'s class that has attained this much service, Δ over the
        quantile points. Read per bucket (module docstring): the exact index at the lower edge of the quantile interval
        holding `attained_gpu_s` (at a quantile point, exactly its index). Beyond the largest sample: 1 / attained,
        but never above the last bucket's."""
        return 1.0 / self._tables[self.table_key(spec)].bucket_rank(max(float(attained_gpu_s), 0.0))

    def exact_index(self, attained_gpu_s: float, spec: JobSpec) -> float:
        """The index at exactly this attained service (inside a quantile interval it generally rises towards the next
        point, without bound before a point mass)."""
        return self._tables[self.table_key(spec)].exact_index(max(float(attained_gpu_s), 0.0))

    def expected_remaining(self, attained_gpu_s: float, spec: JobSpec) -> float:
        """E[S - a | S > a] in GPU-seconds. Beyond the largest sample the job is assumed to need as much again as
        it has had (Pareto tail of shape 2): the attained service itself."""
        return self._tables[self.table_key(spec)].expected_remaining(max(float(attained_gpu_s), 0.0))


def default_sizes() -> SizeDistribution:
    """The shipped size distribution (`SizeDistribution.default()`)."""
    return _default()


def _round(values: np.ndarray) -> np.ndarray:
    """Six significant digits (keeps the JSON small; rounding keeps the order, so the table stays nondecreasing; four
    digits were too coarse: the gaps between close quantiles, hence the density, came out uneven)."""
    return np.array([float(f"{v:.6g}") for v in values])


def _compact(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)


@cache
def _default() -> SizeDistribution:
    return SizeDistribution.load(DEFAULT_PATH)


# ---- the policy ------------------------------------------------------------------------------------------------------


class _ClassQueues:
    """A class's buckets read as queues: the rank and queue of each bucket, and the bucket at which the queue next
    changes (len(t): not before the support ends)."""

    def __init__(self, table: _Table, thresholds: Sequence[float]) -> None:
        self.t = table.t.tolist()
        self.ranks = table.ranks
        self.thresholds = list(thresholds)
        self.levels = [bisect.bisect_right(self.thresholds, r) for r in self.ranks]
        n = len(self.t)
        nxt = [n] * n
        for b in range(n - 2, -1, -1):
            nxt[b] = b + 1 if self.levels[b + 1] != self.levels[b] else nxt[b + 1]
        self.next_change = nxt
        self.last_rank = self.ranks[-1]

    def rank_level(self, a: float) -> tuple[float, int]:
        b = bisect.bisect_right(self.t, a)
        if b < len(self.t):
            return self.ranks[b], self.levels[b]
        rank = max(a, self.last_rank)
        return rank, bisect.bisect_right(self.thresholds, rank)

    def level_and_next(self, a: float) -> tuple[int, float | None]:
        t, n = self.t, len(self.t)
        b = bisect.bisect_right(t, a)
        if b < n:
            level, j = self.levels[b], self.next_change[b]
            if j < n:
                return level, t[j - 1]  # bucket j starts at t[j - 1]
            start = t[-1]  # same queue to the end of the support; past it the rank is max(a, last rank)
            if bisect.bisect_right(self.thresholds, max(start, self.last_rank)) != level:
                return level, start
        else:
            start = a
            level = bisect.bisect_right(self.thresholds, max(a, self.last_rank))
        k = bisect.bisect_right(self.thresholds, max(start, self.last_rank))
        return level, (self.thresholds[k] if k < len(self.thresholds) else None)


@register
class Gittins(Tiresias):
    """Discretised 2D-Gittins index with preemption across queues (module docstring)."""

    name: ClassVar[str] = "gittins"
    oracle: ClassVar[bool] = False

    def __init__(self, seed: int = 0, sizes: SizeDistribution | None = None,
                 thresholds: Sequence[float] = DEFAULT_RANK_THRESHOLDS, starvation: float | None = None) -> None:
        super().__init__(seed=seed, thresholds=thresholds)
        self.starve_factor = starvation or 0.0
        self.sizes = sizes if sizes is not None else SizeDistribution.default()
        self._queues: dict[str, _ClassQueues] = {}
        self._keys: dict[int, tuple[Any, ...]] = {}  # pending job id -> its sort key (`schedule`)
        self._keys_view: ClusterView | None = None  # the view the keys' groups were read on (their keys read it)
        self._groups: dict[tuple[Any, ...], int] = {}  # group (`_group_of`) -> its number, for this view

    def _class_queues(self, spec: JobSpec) -> _ClassQueues:
        key = self.sizes.table_key(spec)
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _ClassQueues(self.sizes.table(key), self.thresholds)
        return q

    def rank_level(self, spec: JobSpec, attained: float) -> tuple[float, int]:
        """(1 / index of the job's bucket, its queue)."""
        return self._class_queues(spec).rank_level(attained)

    def level_and_next(self, spec: JobSpec, attained: float) -> tuple[int, float | None]:
        return self._class_queues(spec).level_and_next(attained)

    def _promotion(self, job: Job, attained: float) -> float:
        """When a pending job counts as starving: after waiting `starvation` times the wall time its expected remaining
        service takes on its GPUs (at least a minute). Never without the option."""
        if not self.starve_factor:
            return math.inf
        wall = self.sizes.expected_remaining(attained, job.spec) / job.spec.gpu_demand
        return job.queued_since + self.starve_factor * max(wall, 60.0)

    def _group_number(self, view: ClusterView, spec: JobSpec, level: int) -> int:
        """The number of the job's group (`_group_of`) on this view."""
        groups = self._groups
        return groups.setdefault(_group_of(view, spec, level), len(groups))

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        self._sync(view, now)
        if not queue:
            return []
        self._queue = queue_demands(queue)  # who else would take GPUs a preemption frees beyond its job's need
        if self._keys_view is not view:  # (a new view: the groups read the old one's memory needs)
            self._keys, self._keys_view, self._groups = {}, view, {}
        keys = self._keys
        if len(keys) > 2 * len(queue) + 1024:  # forget jobs that left the queue now and then
            ids = {job.id for job in queue}
            self._keys = keys = {i: k for i, k in keys.items() if i in ids}
        # One cached sort key per pending job, rebuilt only when its attained service or queueing changed (both are
        # frozen while it waits): (rank, arrival, id, queue, job, group, attained, queued since, promotion time). Ids
        # are unique, so sorting the tuples never compares further than the id. The group (`_group_of`, by number:
        # a tuple of tuples is hashed anew at every look-up) is what the job's fate in a call depends on but the plan.
        order = []
        promoted = []
        smallest = math.inf  # the smallest demand queued
        for job in queue:
            if job.spec.num_gpus < smallest:
                smallest = job.spec.num_gpus
            key = keys.get(job.id)
            if key is None or key[6] != job.attained_gpu_s or key[7] != job.queued_since:
                a = job.attained_gpu_s
                rank, lv = self.rank_level(job.spec, a)
                group = self._group_number(view, job.spec, lv)
                key = keys[job.id] = (rank, job.spec.submit_s, job.id, lv, job, group, a, job.queued_since,
                                      self._promotion(job, a))
            if now >= key[8]:  # starving: first in line, top queue
                promoted.append((-1.0, *key[1:3], 0, key[4], self._group_number(view, job.spec, 0), *key[6:]))
            else:
                order.append(key)
        order.sort()  # descending index = ascending rank; ties: arrival, then id
        if promoted:
            order = sorted(promoted) + order
        planner = Planner(view)
        decisions: list[Decision] = []
        preempted: set[int] = set()
        blocked = False
        # Queues only get lower along the order, so victims only get scarcer (a job may preempt only from queues
        # strictly below its own), and free capacity only shrinks (what preemption frees, the preempting job takes):
        # once preempting for a demand failed, larger demands fail for the rest of the call.
        level, can_preempt, no_victims_from = -1, False, math.inf
        # A job whose group failed on the plan as it stands (group -> `Planner.changes` then) fails as that one did,
        # with nothing to say (the call named its first waiting job already): alike in all the call reads of it, on
        # the same plan, the same victims left (victims only leave while the plan stays: a preemption changes it) and
        # no more to hope for (`no_victims_from` only falls). Passed over unread: a call tries each group once per
        # plan, not each of tens of queued jobs (most of them fail, late in a busy run).
        failed: dict[int, int] = {}
        reasons: dict[tuple[int, float], str] = {}  # (queue, rank) -> the reason's text: made once, not per start
        for rank, _, _, job_level, job, group, _, _, _ in order:
            if failed.get(group) == planner.changes:
                continue
            if job_level != level:
                level = job_level
                can_preempt = self._has_victims_below(level)
            spec = job.spec
            if planner.full() and (not can_preempt or no_victims_from <= smallest):
                # Nothing fits, and neither this job nor any after it can preempt now: it waits, and the call asks to
                # be woken when a running job changes queue (it may become preemptable).
                if not blocked:
                    decisions.append(Wait(job.id, wait_reason(planner, spec)))
                blocked = True
                break
            plan = planner.changes
            placement, no_victims_from = self._fit_or_preempt(view, planner, job, level, can_preempt,
                                                              no_victims_from, preempted, decisions)
            if placement is None:
                if not blocked:
                    decisions.append(Wait(job.id, wait_reason(planner, spec)))
                blocked = True
                if planner.changes == plan:  # (a preemption undone changed the plan: its group is tried again)
                    failed[group] = plan
                continue
            reason = reasons.get((level, rank))
            if reason is None:
                reason = reasons[(level, rank)] = f"queue {level}, Gittins rank {rank:.3g} GPU-s"
            self._start(planner, job, placement, reason, decisions)
        if blocked and self._demote:
            decisions.append(WakeAt(self._demote[0][0] + 1e-6))
        return decisions


def _group_of(view: ClusterView, spec: JobSpec, level: int) -> tuple[Any, ...]:
    """What a pending job's fate in a call depends on but the plan (`Tiresias._group`'s, at its Gittins queue): the
    queue it preempts from (victims strictly below it), its priority (whom it may preempt) and what the placement and
    victim searches read of it (`queue_scan.whole_fit_key`, which fixes its demand, hence what the others would
    take)."""
    return level, spec.priority, whole_fit_key(view, spec)


def make_gittins(arg: str, seed: int = 0) -> Gittins:
    """`gittins:thresholds=R1,R2,...`: queue thresholds on the rank 1 / index, in GPU-seconds."""
    opts = parse_options("gittins", arg, lists=("thresholds",), numbers=("starvation",))
    thresholds = check_thresholds("gittins", arg, opts.get("thresholds", list(DEFAULT_RANK_THRESHOLDS)),
                                  unit="GPU-seconds of rank 1/index")
    starvation = opts["starvation"][0] if "starvation" in opts else None
    if starvation is not None and not starvation > 0:
        raise UnknownPolicyError(f"policy 'gittins:{arg}': option 'starvation': {starvation:g} is not positive")
    policy = Gittins(seed=seed, thresholds=thresholds, starvation=starvation)
    parts = [f"thresholds={format_thresholds(thresholds)}"] if "thresholds" in opts else []
    parts += [f"starvation={starvation:g}"] if starvation is not None else []
    policy.name = "gittins:" + ",".join(parts)  # type: ignore[misc]  # instances report the name they were asked for
    return policy


register_prefix("gittins", make_gittins)
