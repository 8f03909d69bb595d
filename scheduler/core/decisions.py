"""What a policy returns, and the shape of a policy, as the core sees it.

These live in the core so that the simulator and the controller can apply decisions without importing `policies`
(imports point one way); this is the one import path for them, policy authors' too.
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.reasons import Code, Reason
from scheduler.core.state import ClusterView


@dataclass(frozen=True, slots=True)
class Candidate:
    """A placement a policy weighed, with what the contention model predicted for it (kept for explanations)."""

    placement: Placement
    slowdown: float  # the job's own predicted slowdown there
    others_added: float  # extra slowdown it would inflict on the jobs already there
    neighbours: tuple[int, ...] = ()  # the jobs the prediction was made against (sharing its GPUs or links)

    @classmethod
    def scored(cls, view: ClusterView, spec: JobSpec, placement: Placement) -> Candidate:
        """`placement` with the contention model's prediction for `spec` there, now, and whom it was made against."""
        pred = view.predict(spec, placement)
        return cls(placement, pred.slowdown, pred.others_added, tuple(sorted(pred.others_before)))


@dataclass(frozen=True, slots=True)
class Place:
    job_id: int
    placement: Placement
    reason: str = ""
    candidates: tuple[Candidate, ...] = ()  # what else the policy considered, if it says


@dataclass(frozen=True, slots=True)
class Preempt:
    """Take a running job off its GPUs (checkpointed, back to the queue). A policy's preemption makes room for the
    placement that follows it; one with no placement after it names the job it makes room for in `for_job` (the
    priority rule's, whose placement the wrapped policy decides at the next round)."""

    job_id: int
    reason: str = ""
    for_job: int | None = None


@dataclass(frozen=True, slots=True)
class Resize:
    """Run a running elastic job at another size, on `placement` (`scheduler.core.resizing` has the rules): it stops
    at a checkpoint and restarts there, making no progress for its resize pause. A grow takes idle GPUs; a shrink
    gives GPUs back to make room for the start that follows it, of the job `for_job` names (for the priority and
    team rules a shrink is a preemption of the GPUs it gives back). `placement` keeps the GPUs it stays on."""

    job_id: int
    placement: Placement
    reason: str = ""
    for_job: int | None = None


_POLICY = Code.POLICY  # (an enum member read once: `Wait.why` runs for every waiting job at every pass)


@dataclass(frozen=True, slots=True)
class Wait:
    """The job stays queued; `reason` is what the dashboard shows as its pending reason. `until`: the latest time
    (the simulator's or the controller's clock) the policy keeps it waiting for this reason, where it bounds the wait
    (`topology` holding a job that fits now only spread: it starts then, spread if it must); None: no such bound.
    `code` and `params`: the reason as data (`scheduler.core.reasons`), where a rule of the core waits the job
    (`because` makes one: the reservation rule's); a policy's wait leaves them, and its words are its reason."""

    job_id: int
    reason: str
    until: float | None = None
    code: Code = Code.POLICY
    params: Mapping[str, Any] | None = None

    @classmethod
    def because(cls, job_id: int, why: Reason, until: float | None = None) -> Wait:
        """A wait for `why`, its words rendered once."""
        return cls(job_id, why.text, until, why.code, why.params)

    @property
    def why(self) -> Reason:
        """The reason as data: the policy's own words, unless the wait was made `because` of one."""
        return Reason(_POLICY, {"text": self.reason}) if self.params is None else Reason(self.code, self.params)


@dataclass(frozen=True, slots=True)
class WakeAt:
    """Ask to be called again at `time` even if nothing else happens (e.g. a Tiresias queue demotion)."""

    time: float


Decision = Place | Preempt | Resize | Wait | WakeAt


def acted(decisions: Iterable[Decision]) -> bool:
    """Whether `decisions` change the cluster (a start, a preemption or a resize): the frames ask their policy again,
    on the state those leave, rather than ask it more at the same call on a state that no longer holds."""
    return kinds_among(decisions, Place, Preempt, Resize)


def kinds_among(decisions: Iterable[Decision], *kinds: type) -> bool:
    """Whether any of `decisions` is one of `kinds` (or a subclass). Read by their few distinct types: a deep queue's
    call returns hundreds of `Wait`s, and every frame asks this of each call's decisions."""
    return any(issubclass(t, kinds) for t in {type(d) for d in decisions})


@runtime_checkable
class Policy(Protocol):
    """A policy reads a `ClusterView` and the pending queue and returns decisions; it never mutates anything.

    The caller applies the decisions and asks again, until a call returns no placement or preemption: a policy may
    return one decision per call and always see fresh state, or plan a whole batch at once (`policies.placement`).
    """

    # Read-only to callers. Most policies set both on the class; a wrapper (`TenancyFrame`) or a loaded agent
    # (`rl:NAME`) sets them per instance.
    @property
    def name(self) -> str: ...

    @property
    def oracle(self) -> bool:
        """True if it reads what a real scheduler cannot know (e.g. job durations)."""
        ...

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        """Decisions for this instant. `queue` holds the pending jobs in arrival order (iterate it; no indexing)."""
        ...


# A policy's decisions at one call, worked out as a generator: it yields each question its agent must answer (an RL
# decision point) and returns the decisions (`scheduler.core.runner`).
Deliberation = Generator[Any, Any, list[Decision]]


@runtime_checkable
class Deliberating(Policy, Protocol):
    """A policy whose decisions come from an agent's answers to questions (the `rl:` policies): `deliberate` yields
    each question and takes its answer back; `answer` is the policy's own agent. The RL environment answers in the
    agent's place, one `step` at a time; everyone else lets `answer` do it (`scheduler.core.runner.answered`).
    A wrapper (the tenancy frame) deliberates by yielding its wrapped policy's questions."""

    def deliberate(self, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation: ...

    def answer(self, question: Any) -> Any: ...
