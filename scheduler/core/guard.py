"""A guard for learned policies: run a fallback heuristic in shadow and switch to it while the learned policy is losing.

Deployed RL schedulers do better than heuristics where the workload matches their training and worse where it shifts;
`rl:default` loses 1-5% to the best heuristic on some held-out regimes. The guard notices. Each `every_jobs` arrivals
it replays the window just past through the simulator, from the cluster as it was at the window's start (its running
jobs and queue, `scheduler.core.replay`) with the window's arrivals on top, under the learned policy and under each
candidate fallback, and keeps each replay's average JCT, projected where the replay's bounded horizon cuts a job short
(`window_time`). The learned
policy's log-ratio against the best candidate
(the one with the lowest geometric mean over the kept windows) is one paired sample per window; the guard decides on
the latest `keep` of them:

* **switch to the fallback** when the one-sided `1 - alpha` lower bound of the mean log-ratio (Student's t over the
  windows) is above `log(threshold)`: the learned policy is worse by more than the threshold, with that confidence;
* **switch back** when the upper bound falls below `log(threshold)`: the evidence has turned.

Nothing switches before `min_windows` windows. Both replays of a window start from the same state, whichever policy
made it; they carry what `scheduler.core.replay` says (not teams, reservations, outages or dependencies; the job specs
carry priorities, so the priority rules apply): they compare the policies on the same recent jobs, they do not
predict the cluster. The rule is written here once; `policies.guarded` is the policy wrapper that applies it (in
`corral simulate --guard` and the benchmarks alike).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from scheduler.core.decisions import Policy
from scheduler.core.model import JobSpec
from scheduler.core.replay import Present, projected_end, replay

THRESHOLD = 1.02  # the learned policy is losing when its replays' JCTs are more than this times the fallback's
MIN_WINDOWS = 4
KEEP = 12
ALPHA = 0.05
EVERY_JOBS = 50  # arrivals per window
MAX_VERDICTS = 1_000  # verdicts kept (the latest)
HORIZON_WINDOWS = 20.0  # a replay runs for this many times its window's span ...
MIN_HORIZON_S = 86400.0  # ... and at least this long


@dataclass(frozen=True, slots=True)
class GuardSettings:
    threshold: float = THRESHOLD
    min_windows: int = MIN_WINDOWS
    keep: int = KEEP
    alpha: float = ALPHA
    every_jobs: int = EVERY_JOBS

    def __post_init__(self) -> None:
        for name, ok in (("threshold", self.threshold >= 1.0), ("min_windows", self.min_windows >= 2),
                         ("keep", self.keep >= self.min_windows), ("alpha", 0.0 < self.alpha < 0.5),
                         ("every_jobs", self.every_jobs >= 1)):
            if not ok:
                raise ValueError(f"guard: {name} out of range: {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The guard after a window: which policy acts (`fallback` None: the learned one), the learned policy's JCT over
    the best candidate's (geometric mean of the kept windows, with its two-sided `1 - 2 alpha` interval), how many
    windows that rests on, and whether this window switched."""

    at: float
    fallback: str | None
    best: str
    ratio: float
    low: float
    high: float
    windows: int
    switched: bool

    def text(self, learned: str) -> str:
        acting = learned if self.fallback is None else self.fallback
        verb = "switched to" if self.switched else "keeps"
        return (f"guard {verb} {acting}: {learned} ran {self.ratio:.3f}x the JCT of {self.best} "
                f"[{self.low:.3f}, {self.high:.3f}] over the last {self.windows} windows")


class GuardRule:
    """The switch, from paired windows (module docstring)."""

    def __init__(self, candidates: Sequence[str], settings: GuardSettings | None = None) -> None:
        if not candidates:
            raise ValueError("guard: name at least one fallback")
        self.settings = settings = settings or GuardSettings()
        self.candidates = tuple(candidates)
        self._learned: deque[float] = deque(maxlen=settings.keep)  # log average (projected) JCT per window
        self._others: dict[str, deque[float]] = {c: deque(maxlen=settings.keep) for c in self.candidates}
        self.fallback: str | None = None
        self.windows = 0  # windows observed, ever
        self.verdicts: deque[Verdict] = deque(maxlen=MAX_VERDICTS)  # the latest (a service runs for months)

    def observe(self, at: float, learned_time: float, fallback_times: Mapping[str, float]) -> Verdict:
        """One window's average JCT under the learned policy and each candidate; the verdict after it."""
        self._learned.append(math.log(learned_time))
        for c in self.candidates:
            self._others[c].append(math.log(fallback_times[c]))
        best = min(self.candidates, key=lambda c: (float(np.mean(self._others[c])), self.candidates.index(c)))
        diffs = np.array(self._learned) - np.array(self._others[best])
        n = diffs.size
        mean = float(diffs.mean())
        half = float(stats.t.ppf(1 - self.settings.alpha, n - 1) * diffs.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf
        low, high = mean - half, mean + half
        bar = math.log(self.settings.threshold)
        before = self.fallback
        if n >= self.settings.min_windows:
            if self.fallback is None and low > bar:
                self.fallback = best
            elif self.fallback is not None and high < bar:
                self.fallback = None
            elif self.fallback is not None:
                self.fallback = best  # still losing: to the best candidate now
        verdict = Verdict(at, self.fallback, best, math.exp(mean), math.exp(low), math.exp(high), n,
                          switched=(before is None) != (self.fallback is None))
        self.verdicts.append(verdict)
        self.windows += 1
        return verdict


def window_time(start: Present, at: float, arrivals: Sequence[JobSpec], policy: Policy, horizon: float) -> float:
    """The average JCT, from the window's start, of the jobs pending then and of the window's arrivals, replayed
    under `policy` from the cluster as it was (`scheduler.core.replay`) for `horizon` seconds: a job not done by then
    counts as ending when its work left would (`projected_end`: at its rate if running, no sooner than its work if
    waiting), so the replay's cost is bounded by the horizon and queueing and contention both count."""
    jobs = replay(start, at, arrivals, policy, until=horizon)
    times = [projected_end(j, horizon) - j.spec.submit_s for j in jobs]
    return max(float(np.mean(times)) if times else 0.0, 1e-9)


def replay_window(start: Present, at: float, arrivals: Sequence[JobSpec], now: float, learned: Policy,
                  candidates: Mapping[str, Policy]) -> tuple[float, dict[str, float]]:
    """The window from `start` (taken at `at`) to `now`, replayed under the learned policy and under each candidate
    from the same start (instances for replays: not the ones acting), each scored by `window_time` over
    `HORIZON_WINDOWS` times the window's span (at least `MIN_HORIZON_S`)."""
    horizon = max(HORIZON_WINDOWS * (now - at), MIN_HORIZON_S)
    return (window_time(start, at, arrivals, learned, horizon),
            {c: window_time(start, at, arrivals, p, horizon) for c, p in candidates.items()})
