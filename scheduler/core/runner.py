"""The ask-apply loop: at one instant, ask the policy, apply its decisions, and ask again until it stops acting.

One loop for everyone who schedules: the simulator (and so what-if, which runs it) around its virtual clock, the live
controller around its store and backend, and the RL environment, which steps the same loop one agent decision at a
time. The loop is a generator (`rounds`): it yields each question a deliberating policy's agent must answer (an RL
decision point, `scheduler.core.decisions.Deliberating`) and takes the answer back; `settle` runs it with the policy
answering its own questions, which is what every caller but the environment does.

The policy is asked while jobs are queued, or while a running elastic job could grow into a free GPU (with an empty
queue, then). A round that changes nothing (no placement, preemption or resize) ends the instant: the policy has said
all it will say until something changes. A policy that keeps acting for `MAX_ROUNDS` rounds at one instant is broken.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Generator
from typing import Any, TypeVar

from scheduler.core.decisions import Decision, Deliberation, Policy
from scheduler.core.model import Job
from scheduler.core.state import ClusterView

MAX_ROUNDS = 100_000  # rounds at one instant before we call the policy broken

# Applies one round's decisions; given the seconds the policy took to decide; True if anything changed.
Apply = Callable[[list[Decision], float], bool]
T = TypeVar("T")


class RoundLimitError(RuntimeError):
    """The policy kept acting at one instant for `MAX_ROUNDS` rounds."""


def deliberation(policy: Policy, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation:
    """The policy's decisions at this call as a deliberation: a deliberating policy's own (yielding its questions),
    or, for any other policy, its `schedule` (which asks none)."""
    deliberate = getattr(policy, "deliberate", None)
    if deliberate is None:
        return policy.schedule(view, queue, now)
    return (yield from deliberate(view, queue, now))


def answered(asking: Generator[Any, Any, T], answer: Callable[[Any], Any]) -> T:
    """Run a deliberation (or `rounds`) to its end, answering each of its questions with `answer`; its result."""
    try:
        question = next(asking)
        while True:
            question = asking.send(answer(question))
    except StopIteration as done:
        result: T = done.value
        return result


def rounds(policy: Policy, view: ClusterView, queue: Callable[[], Collection[Job]], now: float, apply: Apply,
           who: str | None = None) -> Generator[Any, Any, int]:
    """The ask-apply loop at instant `now`, yielding each question the policy's agent must answer; returns the number
    of rounds. `queue()` gives the pending jobs in queue order (asked afresh each round: decisions change it);
    RoundLimitError, naming `who` (default: the policy's name), if the policy never stops acting."""
    for n in range(MAX_ROUNDS):
        pending = queue()
        if not pending and not view.growable:  # (with none queued, only a grow could still use the free GPUs)
            return n
        t0 = time.perf_counter()
        decisions = yield from deliberation(policy, view, pending, now)
        if not apply(decisions, time.perf_counter() - t0):
            return n + 1
    raise RoundLimitError(f"{who or policy.name} kept acting at t={now:g} for {MAX_ROUNDS} rounds")


class PolicyFrame:
    """A policy around another, as the frames are (priorities, reservations, tenancy): `name` and `oracle` are the
    wrapped policy's, `deliberate` (the subclass's) decides, yielding the wrapped policy's questions, and its agent
    answers them when the frame is asked through `schedule`."""

    def __init__(self, inner: Policy, named_as: Policy | None = None) -> None:
        self.inner = inner
        shown = named_as if named_as is not None else inner
        self.name = shown.name
        self.oracle = shown.oracle

    def deliberate(self, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation:
        raise NotImplementedError

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        return answered(self.deliberate(view, queue, now), self.answer)

    def answer(self, question: Any) -> Any:
        """The wrapped policy's agent answers its questions (only a deliberating policy asks any)."""
        return self.inner.answer(question)  # type: ignore[attr-defined]


def settle(policy: Policy, view: ClusterView, queue: Callable[[], Collection[Job]], now: float, apply: Apply,
           who: str | None = None) -> int:
    """`rounds`, with the policy's own agent answering its questions: the instant's scheduling, done."""
    answer = getattr(policy, "answer", _no_questions)
    return answered(rounds(policy, view, queue, now, apply, who), answer)


def _no_questions(question: Any) -> Any:
    raise TypeError(f"a policy that does not deliberate asked {question!r}")
