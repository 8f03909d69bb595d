"""`guarded:POLICY`: POLICY (a learned one, typically `rl:default`) under the guard of `scheduler.core.guard`, which
replays each window of recent arrivals under it and under the candidate fallbacks, and hands the decisions to the
best fallback while POLICY is losing by more than the threshold with enough evidence, and back when that turns.

The fallback is the best of `DEFAULT_CANDIDATES` on the windows kept (the best heuristic for the cluster's recent
workload), or the one policy `guarded:POLICY` is built with (`Guarded(..., candidates=("tiresias",))`, `corral
simulate --guard tiresias`). `verdicts` holds the guard's verdict after each window (data; `Verdict.text` says it);
`fallback_s` the time the fallback acted.

Each replay asks new instances of the policies (what a policy keeps between calls, such as indexes by job id, belongs
to one simulation); a loaded agent's share its model (`RLPolicy.fresh`). A switch takes effect at the next instant the policy is
asked: policies are asked afresh at each instant, as the live controller's policy switch relies on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from typing import Any

from policies.registry import make_policy, register_prefix
from scheduler.core.decisions import Decision, Deliberation, Policy
from scheduler.core.guard import GuardRule, GuardSettings, Verdict, replay_window
from scheduler.core.model import Job, JobSpec
from scheduler.core.replay import Present, present
from scheduler.core.simulator import SimulationError
from scheduler.core.state import ClusterView

DEFAULT_CANDIDATES = ("tiresias", "gittins", "fifo-backfill", "contention-greedy")
MAX_SEEN = 100_000  # job ids remembered as seen; beyond, only those still queued are kept


class Guarded:
    """`learned` under the guard, with `candidates` as its fallbacks (the module docstring)."""

    def __init__(self, learned: str, seed: int = 0, candidates: Sequence[str] = DEFAULT_CANDIDATES,
                 settings: GuardSettings | None = None) -> None:
        self.learned_name = learned
        self.learned: Policy = make_policy(learned, seed=seed)
        self.fallbacks: dict[str, Policy] = {c: make_policy(c, seed=seed) for c in candidates}
        self.seed = seed
        self.rule = GuardRule(tuple(candidates), settings or GuardSettings())
        self.name = f"guarded:{learned}"
        self.oracle = self.learned.oracle or any(p.oracle for p in self.fallbacks.values())
        self.fallback_s = 0.0
        self.failed: deque[str] = deque(maxlen=100)  # the latest windows whose replays failed, and why
        self._seen: set[int] = set()
        self._window: list[JobSpec] = []  # the arrivals since the window's start
        self._start: Present | None = None  # the cluster at the window's start, and when that was
        self._start_at = 0.0
        self._last_now: float | None = None

    @property
    def active(self) -> Policy:
        return self.learned if self.rule.fallback is None else self.fallbacks[self.rule.fallback]

    @property
    def time_sharing(self) -> bool:
        # (Read by the priority frame at each check: the acting policy's, which a switch changes.)
        return bool(getattr(self.active, "time_sharing", False))

    @property
    def verdicts(self) -> deque[Verdict]:
        return self.rule.verdicts

    def _look(self, view: ClusterView, queue: Collection[Job], now: float) -> None:
        """Take in the arrivals since the last call; at a full window, replay it and let the rule decide."""
        if self._last_now is not None and self.rule.fallback is not None:
            self.fallback_s += max(0.0, now - self._last_now)
        self._last_now = now
        if self._start is None:  # the first call: the window starts from what is queued now
            self._start, self._start_at = present(view, queue, now), now
            self._seen.update(job.id for job in queue)
        for job in queue:
            if job.id not in self._seen:  # an arrival (a preempted job back in the queue was seen before)
                self._seen.add(job.id)
                self._window.append(job.spec)
        if len(self._seen) > MAX_SEEN:
            self._seen = {job.id for job in queue}
        if len(self._window) >= self.rule.settings.every_jobs:
            try:
                learned, others = replay_window(self._start, self._start_at, self._window, now,
                                                self._fresh(self.learned, self.learned_name),
                                                {c: self._fresh(p, c) for c, p in self.fallbacks.items()})
            except SimulationError as exc:  # a replay the rules could not finish: this window tells nothing
                self.failed.append(f"window ending at {now:g}: {exc}")
            else:
                self.rule.observe(now, learned, others)
            self._start, self._start_at, self._window = present(view, queue, now), now, []

    def _fresh(self, policy: Policy, name: str) -> Policy:
        """An instance of `policy` for one replay: what a policy keeps between calls (indexes by job id) belongs to one
        simulation. A loaded agent makes one sharing its model (`fresh`) rather than loading it again."""
        fresh = getattr(policy, "fresh", None)
        return fresh() if fresh is not None else make_policy(name, seed=self.seed)

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        self._look(view, queue, now)
        return self.active.schedule(view, queue, now)

    def deliberate(self, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation:
        self._look(view, queue, now)
        active = self.active
        deliberate = getattr(active, "deliberate", None)
        if deliberate is None:
            return active.schedule(view, queue, now)
        decisions: list[Decision] = yield from deliberate(view, queue, now)
        return decisions

    def answer(self, question: Any) -> Any:
        return self.active.answer(question)  # type: ignore[attr-defined]  # (only a deliberating policy asks)


register_prefix("guarded", lambda arg, seed: Guarded(arg, seed=seed), wraps=True)
