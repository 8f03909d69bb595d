"""The preemption orders' scan of the `rl:` frame (`policies.rl_encoding`), over arrays.

A preemption order reads its jobs in order, passes over every one that fits on free capacity (asking `_Frame.fits`
without a prediction), and tries victims for each one that does not, until one finds some or `PREEMPT_SCAN` did not.
On a deep queue most jobs it reads fit, and asking each was a Python call per queued job and order: most of a
decision's time. What that question answers is the same for jobs alike while nothing it reads changes, so the scan
asks it once per class of jobs alike and finds the next job to try with numpy.

Jobs alike (`_Frame.fits`' class): equal in all that `Planner.may_fit` and `_Frame._passing` read (model, hence
memory; GPUs, workers, share, constraints; the user where the one-user MPS rule is on; and compression, which
the frame no longer reads: a finer class is still one of jobs alike). Within one
decision point the frame's plan does not change (a preemption is weighed on a scratch plan), so their answer changes
only when a search notes a misfit on the plan (`Planner.may_fit` then refuses more): the scan forgets every class's
answer then. A whole-GPU job on a fabric may wait for compact room (`policies.compactness`), which depends on the job itself: it is asked
alone, as before. Every question the scan asks is one the loop over the jobs asked, in the same order, and every one
it skips was answered from `_Frame._passing`'s table with nothing done, so the decisions are the same.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from policies.placement import Planner
from scheduler.core.model import Job


class Frame(Protocol):
    """What the scan asks of `policies.rl_encoding._Frame` (which imports this module, so it is named here)."""

    planner: Planner

    def fits(self, job: Job, predict: bool = True) -> object | None: ...

    def preempting(self, job: Job, ladder: tuple[float, ...] | str) -> Any | None: ...

    def top_level(self, ladder: tuple[float, ...] | str) -> int: ...

UNKNOWN, FITS, NONE = 0, 1, 2  # a job's (or a class's) answer: not asked yet, fits on free capacity, fits nowhere
_WINDOW = 64  # jobs of an order read at once at first (`Scan.head`)
# Up to this many queued jobs the scan asks each job in turn, as the frame did before it: on a short queue the arrays'
# fixed costs were more than the questions they save (the Philly and synthetic replays ran 6-12% slower).
_LOOP = 256


class Scan:
    """What the preemption orders of one decision point share: each job's answer so far (`known`, by job), and each
    class's while the plan's misfits stay as they are."""

    def __init__(self, frame: Frame, jobs: list[Job], known: np.ndarray, classes: np.ndarray, alone: np.ndarray,
                 swap_call: bool, attained: np.ndarray) -> None:
        """`known`: per job, UNKNOWN, FITS or NONE as the orders before found (the refused ones NONE); `classes`: per
        job, its class (small ints); `alone`: per job, whether it is asked by itself (its class's answer is not its);
        `attained`: per job, its attained service (pending: frozen)."""
        self.frame, self.jobs, self.known, self.classes, self.alone = frame, jobs, known, classes, alone
        self.swap_call, self.attained = swap_call, attained
        self._hopeless_by: dict[tuple[float, ...] | str, list[bool]] = {}
        self._answers = np.zeros(int(classes.max()) + 1 if classes.size else 1, dtype=np.int8)
        self._each: list[int] | None = None  # `known` as `_head_each` keeps it (every order of a short queue)

    def head(self, order: np.ndarray, ladder: tuple[float, ...] | str, budget: int) -> tuple[int, Any] | None:
        """The first job in `order` that fits nowhere on free capacity and finds victims under `ladder`, with its
        choice; None once `budget` such jobs found none (or the order ends)."""
        frame, jobs, known = self.frame, self.jobs, self.known
        if not self.swap_call and order.size <= _LOOP:
            return self._head_each(order, ladder, budget)
        hopeless = self._hopeless(ladder) if self.swap_call else None  # (else read at the first job tried)
        if self.swap_call:  # free GPUs are held for others: every job is one only a swap may start
            for i in order[:budget].tolist():
                choice = None if hopeless and hopeless[i] else frame.preempting(jobs[i], ladder)
                if choice is not None:
                    return i, choice
            return None
        attempts = 0
        pos = 0
        width = _WINDOW
        classes, alone = self.classes[order], self.alone[order]
        answers, planner = self._answers, frame.planner
        while pos < order.size:
            # A window of the order at a time, widened while it holds no job to stop at: a stop is usually near.
            part = order[pos:pos + width]
            status = known[part]
            asked = (status == UNKNOWN) & ~alone[pos:pos + width]
            part_classes = classes[pos:pos + width]
            status[asked] = answers[part_classes[asked]]
            stops = np.flatnonzero(status != FITS)
            if not stops.size:
                known[part] = FITS  # (as below)
                pos += width
                width *= 4
                continue
            width, start, end = _WINDOW, pos, pos + part.size
            # The window's stops in order, from this one reading: an answer for a class is written into the window
            # as it comes; a misfit noted (which may change any class's) has the window read again.
            stale = False
            for s in stops.tolist():
                if status[s] == FITS:  # a job alike to one answered since the window was read
                    continue
                p = start + s
                # Those passed over keep their answer for the orders after this one, as the loop kept it (a
                # class's is forgotten when the misfits change; theirs was given before).
                known[order[pos:p]] = FITS
                i = int(order[p])
                if status[s] == UNKNOWN:  # not asked, nor any job alike since the misfits last changed
                    before = planner.misfits
                    answer = FITS if frame.fits(jobs[i], predict=False) is not None else NONE
                    known[i] = status[s] = answer
                    if planner.misfits != before:
                        answers[:] = UNKNOWN
                        stale = True
                    elif asked[s]:
                        answers[part_classes[s]] = answer
                        alike = asked[s + 1:] & (part_classes[s + 1:] == part_classes[s])
                        status[s + 1:][alike] = answer
                    if answer == FITS:
                        pos = p + 1
                        if stale:
                            break
                        continue
                known[i] = NONE
                before = planner.misfits
                if hopeless is None:
                    hopeless = self._hopeless(ladder)
                choice = None if hopeless and hopeless[i] else frame.preempting(jobs[i], ladder)
                if planner.misfits != before:
                    answers[:] = UNKNOWN
                    stale = True
                if choice is not None:
                    return i, choice
                attempts += 1
                if attempts >= budget:
                    return None
                pos = p + 1
                if stale:
                    break
            if not stale:  # every stop of the window taken: those after the last pass over, and on after them
                known[order[pos:end]] = FITS
                pos = end
        return None

    def _head_each(self, order: np.ndarray, ladder: tuple[float, ...] | str, budget: int) -> tuple[int, Any] | None:
        """`head` asking each job it passes in turn (`_Frame.fits` answers jobs alike from its own table)."""
        frame, jobs = self.frame, self.jobs
        if self._each is None:
            self._each = self.known.tolist()
        known = self._each
        hopeless = None  # (read at the first job tried)
        attempts = 0
        for i in order.tolist():
            status = known[i]
            if status == UNKNOWN:
                status = known[i] = FITS if frame.fits(jobs[i], predict=False) is not None else NONE
            if status == FITS:
                continue
            if hopeless is None:
                hopeless = self._hopeless(ladder)
            choice = None if hopeless and hopeless[i] else frame.preempting(jobs[i], ladder)
            if choice is not None:
                return i, choice
            attempts += 1
            if attempts >= budget:
                return None
        return None

    def _hopeless(self, ladder: tuple[float, ...] | str) -> list[bool]:
        """Per job, whether `ladder` puts it in no higher-priority queue than every running job (its queue against the
        running jobs' lowest-priority one, `_Frame.top_level`): `_Frame.preempting` finds no victims for such a job
        and answers None, so it is not asked (it still counts as an attempt). On a deep queue most jobs are such, and
        each question read the job's queue and the running jobs' ranking again. Under thresholds of attained service
        the queue is `las_level`'s; Gittins' queues depend on each job's class, so there every job is known hopeless
        only when no running job is past the first queue, and otherwise none is (empty: each is asked)."""
        found = self._hopeless_by.get(ladder)
        if found is None:
            top = self.frame.top_level(ladder)
            if isinstance(ladder, str):
                found = [True] * len(self.jobs) if top <= 0 else []
            else:
                attained = self.attained
                levels = np.where(attained != 0, np.searchsorted(np.asarray(ladder), attained, side="right"), 0)
                found = (levels >= top).tolist()
            self._hopeless_by[ladder] = found
        return found
