"""Durations learned from history: how long a new job will run, predicted from the earlier jobs alike that ended.

A job's `duration_s` is optional for a command job (3,600 s when not given), yet start estimates, Gittins' index, the
`rl:` features and backfill all read it. `DurationPredictor` learns run times online, one `observe` per job that
ended, and `predict` answers for a new job with the run times of the most specific group of earlier jobs alike that
has enough of them: same user and name pattern, then broader groups, down to every job so far (`LEVELS`). The answer
is a distribution, not a number (`DurationEstimate`: quantiles in log space, the sample count, the 95% interval of the
median, and which traits the group shares), so a reader that wants uncertainty has it, and `estimate_text` renders
it for people ("similar jobs ran 41 min median (n = 23)").

What a job is, to the predictor, is its `traits`: text values by name, known at submission (user, name pattern,
model, GPU count or share, and a trace's own columns such as Alibaba's `qos`, `cpu_milli`, `memory_mib`). A level
applies to a job only when it has every trait the level names (a job without a user skips the user levels), so
the same levels serve the live service (users, names, models) and traces (their columns).

Bounded and deterministic: each group keeps the run times of its last `window` jobs (a ring, not a random reservoir,
so a replay predicts the same every time and recent jobs count, as run times drift), at most `max_groups` groups are
kept (the least recently used is dropped first; every job so far is one group that is never dropped), and a trait's
value is cut to `MAX_TRAIT_CHARS`: nothing a user sends makes it grow without bound. Run times are learned in log
space, where they are roughly symmetric (they span seconds to weeks).
"""

from __future__ import annotations

import heapq
import math
import re
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.jobs import JobSpec
from scheduler.core.reasons import duration_words

# Groups from most specific to broadest; the first with `min_samples` run times answers, else every job so far.
# `qos, cpu_milli, memory_mib, gpus` is an Alibaba pod's template (a deployment's pods share it); the trace has no
# users or telling names. On its held-out part (benchmarks/durations.py) the template is what helps: `qos` alone or
# `qos, gpus` leave a median log-error 0.62-0.66 of the global median's, the template 0.53. (`gpus` holds
# Alibaba's `num_gpu` and `gpu_milli`.)
LEVELS: tuple[tuple[str, ...], ...] = (
    ("user", "pattern", "model", "gpus"),
    ("user", "pattern"),
    ("qos", "cpu_milli", "memory_mib", "gpus"),
    ("user", "model", "gpus"),
    ("qos", "gpus"),
    ("user",),
    ("pattern", "model", "gpus"),
    ("qos",),
    ("model", "gpus"),
    ("gpus",),
)
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)  # the distribution an estimate carries
MIN_SAMPLES = 5
WINDOW = 64  # run times kept per group: the distribution's shape
# The last run times of a group whose median centres its estimate: run times drift, and on the held-out Philly trace
# the last 8 cut the median log-error from 0.53 to 0.28 of the global median's (all 64 kept: 0.53); Alibaba: even.
RECENT = 8
ALL_WINDOW = 1024  # run times kept of every job so far (the last resort: one group, so it may keep more)
MAX_GROUPS = 4096
MAX_TRAIT_CHARS = 128
_Z95 = 1.96

_DIGITS = re.compile(r"\d+")


def name_pattern(name: str) -> str:
    """A job's name with every run of digits made `#`: `sweep-lr3-seed17` and `sweep-lr5-seed2` are one pattern, and
    so are an array's tasks (`train[4]`, `train[12]`) and the numbered reruns of a job."""
    return _DIGITS.sub("#", name.strip())[:MAX_TRAIT_CHARS]


def traits(spec: JobSpec, features: Mapping[str, str] | None = None, *, model_given: bool = True) -> dict[str, str]:
    """What the predictor reads of a job, known at its submission: user, name pattern, model (only where the user
    named it; `model_given=False` for a trace whose models the loader drew at random), GPU count or share, and a
    trace's own columns (`Trace.features`). Empty values are left out: a level needs every trait it names."""
    out = {k: v for k, v in (features or {}).items() if v}
    out["pattern"] = name_pattern(spec.name)
    out["gpus"] = f"{spec.num_gpus:g}"
    if spec.user:
        out["user"] = spec.user
    if model_given and spec.model:
        out["model"] = spec.model
    return {k: v for k, v in out.items() if v}


@dataclass(frozen=True, slots=True)
class DurationEstimate:
    """A predicted run time: the run times of `n` earlier jobs sharing the traits `basis` (() = every job so far).

    `quantiles_s` are at `QUANTILES` (the 0.5 one is `median_s`); `median_low_s`..`median_high_s` is the 95%
    interval of the median (distribution-free, from order statistics), which narrows as `n` grows, whereas the
    quantiles are the spread of the jobs themselves and do not. Quantiles read the group's last `WINDOW` run times;
    `n` counts all it saw."""

    quantiles_s: tuple[float, ...]
    median_low_s: float
    median_high_s: float
    n: int
    basis: tuple[str, ...]

    @property
    def median_s(self) -> float:
        return self.quantiles_s[QUANTILES.index(0.5)]

    def text(self) -> str:
        return estimate_text(self)


_BASIS_WORDS = {"user": "user", "pattern": "name pattern", "model": "model", "gpus": "size", "qos": "QoS",
                "cpu_milli": "CPU", "memory_mib": "memory"}


def estimate_text(e: DurationEstimate) -> str:
    """The estimate in words, the one place they are made: "similar jobs (same user, name pattern) ran 41 min median
    (n = 23), 80% between 12 min and 2.1 h"."""
    lo, hi = e.quantiles_s[QUANTILES.index(0.1)], e.quantiles_s[QUANTILES.index(0.9)]
    who = "similar jobs" if e.basis else "jobs so far"
    if e.basis:
        who += f" (same {', '.join(_BASIS_WORDS.get(b, b) for b in e.basis)})"
    return (f"{who} ran {duration_words(e.median_s)} median (n = {e.n}), "
            f"80% between {duration_words(lo)} and {duration_words(hi)}")


class _Group:
    """One group's last `window` log run times (a ring) and how many it saw."""

    __slots__ = ("logs", "n", "sorted")

    def __init__(self, window: int) -> None:
        self.logs: deque[float] = deque(maxlen=window)
        self.n = 0
        self.sorted: list[float] | None = None  # cached for reads, dropped on a write

    def add(self, log_s: float) -> None:
        self.logs.append(log_s)
        self.n += 1
        self.sorted = None

    def estimate(self, basis: tuple[str, ...], recent: int) -> DurationEstimate:
        """The group's distribution: its shape (quantiles, the median's interval) from every run time it keeps,
        centred on the median of its last `recent` ones."""
        xs = self.sorted if self.sorted is not None else sorted(self.logs)
        self.sorted = xs
        mid = _quantile(xs, 0.5)
        last = sorted(list(self.logs)[-recent:])
        shift = _quantile(last, 0.5) - mid
        qs = tuple(math.exp(_quantile(xs, q) + shift) for q in QUANTILES)
        # The median's 95% interval: order statistics n/2 -+ 1.96 sqrt(n)/2 (binomial), clamped to the sample.
        m = len(xs)
        half = _Z95 * math.sqrt(m) / 2
        lo = xs[max(0, math.floor(m / 2 - half))]
        hi = xs[min(m - 1, math.ceil(m / 2 + half) - 1)]
        return DurationEstimate(qs, math.exp(lo + shift), math.exp(hi + shift), self.n, basis)


def _quantile(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), on a sorted non-empty sequence."""
    pos = q * (len(xs) - 1)
    i = math.floor(pos)
    j = min(i + 1, len(xs) - 1)
    return xs[i] + (xs[j] - xs[i]) * (pos - i)


class DurationPredictor:
    """Run times learned online from jobs that ended; see the module docstring. Not thread-safe: one owner feeds it.

    `levels`: the groups to try, most specific first (`LEVELS`); `min_samples`: the run times a group needs to answer;
    `window`: run times kept per group (`all_window` of every job so far); `max_groups`: groups kept over all levels
    (least recently used dropped)."""

    def __init__(self, levels: Sequence[Sequence[str]] = LEVELS, *, min_samples: int = MIN_SAMPLES,
                 window: int = WINDOW, recent: int = RECENT, all_window: int = ALL_WINDOW,
                 max_groups: int = MAX_GROUPS) -> None:
        for name, value, least in (("min_samples", min_samples, 1), ("window", window, 1), ("recent", recent, 1),
                                   ("all_window", all_window, 1), ("max_groups", max_groups, 1)):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if min_samples > window:
            raise ValueError(f"min_samples ({min_samples}) must not exceed window ({window}): no group could answer")
        self.levels = tuple(tuple(lv) for lv in levels)
        if any(not lv for lv in self.levels):
            raise ValueError("levels: an empty level is every job so far, which is always the last resort; leave it out")
        self.min_samples = min_samples
        self.window = window
        self.recent = recent
        self.max_groups = max_groups
        self._all = _Group(all_window)
        self._groups: OrderedDict[tuple[int, tuple[str, ...]], _Group] = OrderedDict()

    def __len__(self) -> int:
        """Groups kept (every job so far not counted)."""
        return len(self._groups)

    @property
    def observed(self) -> int:
        return self._all.n

    def _keys(self, job: Mapping[str, str]) -> Iterator[tuple[int, tuple[str, ...]]]:
        for i, level in enumerate(self.levels):
            if all(job.get(t) for t in level):
                yield i, tuple(job[t][:MAX_TRAIT_CHARS] for t in level)

    def observe(self, job: Mapping[str, str], duration_s: float) -> None:
        """Learn that a job with these `traits` ran `duration_s` seconds (> 0); ValueError naming the field else."""
        if not (isinstance(duration_s, int | float) and math.isfinite(duration_s) and duration_s > 0):
            raise ValueError(f"duration_s must be a positive finite number of seconds, got {duration_s!r}")
        x = math.log(duration_s)
        self._all.add(x)
        for key in self._keys(job):
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _Group(self.window)
                if len(self._groups) > self.max_groups:
                    self._groups.popitem(last=False)
            else:
                self._groups.move_to_end(key)
            group.add(x)

    def predict(self, job: Mapping[str, str]) -> DurationEstimate | None:
        """The run times of the most specific group alike with `min_samples` of them, else of every job so far;
        None before any job ended (the caller keeps its default)."""
        for key in self._keys(job):
            group = self._groups.get(key)
            if group is not None and len(group.logs) >= self.min_samples:
                self._groups.move_to_end(key)
                return group.estimate(self.levels[key[0]], self.recent)
        return self._all.estimate((), self.recent) if self._all.n else None


def ended_before(jobs: Sequence[JobSpec]) -> Iterator[tuple[int, list[int]]]:
    """Walk jobs in submission order as a live service would see them end: yields (i, ended), `ended` the indices of
    the jobs that ended since the previous step, at or before job i's submission, in the order they ended. A job ends
    at `submit_s + duration_s` (had it started on arrival: the earliest it could end). Feed `ended` to `observe`, then
    `predict` job i: every prediction reads only jobs that finished before it was submitted."""
    running: list[tuple[float, int]] = []
    last = -math.inf
    for i, spec in enumerate(jobs):
        if spec.submit_s < last:
            raise ValueError(f"jobs: job {i} ({spec.name!r}) is submitted before job {i - 1}; sort them by submit_s")
        last = spec.submit_s
        ended: list[int] = []
        while running and running[0][0] <= spec.submit_s:
            ended.append(heapq.heappop(running)[1])
        yield i, ended
        heapq.heappush(running, (spec.submit_s + spec.duration_s, i))
