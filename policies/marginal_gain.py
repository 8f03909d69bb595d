"""marginal-gain: each GPU to the job whose completion it speeds most (Optimus, EuroSys'18; Pollux, OSDI'21, less
its goodput model), the heuristic that sizes elastic jobs (issue 49).

At each call, on the plan of the free GPUs (`policies.placement.Planner`):

1. **Starts.** The queue, least remaining work first (shortest-remaining-first is what minimises average JCT); each
   job starts at its smallest size (`min_gpus`; a rigid job at its one size) on the best-fit placement, while one
   fits. Scaling is sublinear (`scheduler.core.elastic`), so a GPU does the most work in a small job: a queue is
   drained at small sizes first.
2. **Room by shrinking.** The first job that does not fit makes room by shrinking running elastic jobs of its team
   (of no higher priority, preemptible, above their minimum, not resized within the resize interval, and with more
   work left than it has), those that lose least time per GPU given back first, each by the GPUs still lacking (to
   its minimum at most), as few as make room. A shrink is a partial preemption: the job keeps running, on fewer GPUs,
   after its pause.
3. **Grows.** The whole GPUs still free go, one step at a time, to the job whose next size saves the largest share
   of its time left per added GPU (seconds saved over seconds still to run: the gain weighted by remaining work, so
   a GPU goes where it shortens a completion most, relatively, and a short job is not starved by a long one's larger
   absolute gain). A job started at this call grows for free (it starts at the larger size); a running one pays its
   resize pause, so its step is its best whole jump net of the pause, taken only where the resize rules allow it
   (`scheduler.core.resizing`: worth its pause, not within the interval). GPUs left idle while a job waits out its
   interval: the policy asks to be called when the interval ends.

It reads each job's remaining work (`oracle`), as Optimus reads its predicted remaining iterations;
`marginal-gain-expected` reads instead the work a job is expected to have left given the service it attained, under
the size distribution Gittins' index uses (`policies.gittins`), and starts jobs in Gittins' order: the same rules
with what a scheduler knows, so it may teach the learned policy (`agents.imitation`), which is refused an oracle
teacher. It reallocates GPUs among jobs of
equal priority, so it is a time-sharing policy for the priority rules (`time_sharing`). Tuned on
training windows only (Philly's first three quarters, synthetic seeds below 2**31): arrival order, and growth by
absolute seconds saved, were each 5-10% worse in average JCT there.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from policies.gittins import SizeDistribution, default_sizes
from policies.placement import Planner
from policies.registry import make_policy, register, register_prefix
from policies.sizing import extra_gpus, kept_gpus, room
from scheduler.core.decisions import Decision, Place, Resize, Wait, WakeAt, acted
from scheduler.core.elastic import sized, sizes_within
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.priorities import may_preempt
from scheduler.core.resizing import regrow_at, remaining_s, too_soon
from scheduler.core.standing import TenancyStanding
from scheduler.core.state import ClusterView


@dataclass
class Sizing:
    """A job this call may size: started now (`fresh`: no pause) or running, with its planned GPUs."""

    job: Job
    gpus: list[int]
    fresh: bool
    done: bool = False  # a running job grows once a call


def _room(told: TenancyStanding | None, s: Sizing) -> int:
    """How many more GPUs a sizing may take (`policies.sizing.room`)."""
    return room(told, s.job, s.fresh, len(s.gpus))


@register
class MarginalGain:
    name: ClassVar[str] = "marginal-gain"
    oracle: ClassVar[bool] = True  # reads remaining work
    time_sharing: ClassVar[bool] = True  # shrinks jobs of equal priority (`scheduler.core.priorities`)

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def left(self, view: ClusterView, job: Job, now: float) -> float:
        """Isolated seconds of work (at its submitted size) `job` has left: its true remaining work."""
        return remaining_s(job, now) if job.id in view.running else job.work_left

    @staticmethod
    def gain(view: ClusterView, job: Job, k: int, left: float) -> float:
        """Wall seconds a run of `job` at `k` GPUs would finish sooner with `left` work to do than at its size now
        (`scheduler.core.resizing.gain_s`'s rule, on that work)."""
        if left <= 0.0 or job.rate <= 0.0:
            return 0.0
        submitted = job.submitted or job.spec
        new_rate = job.rate * view.speedup(submitted, k) / job.speedup
        return left / job.rate - left / new_rate

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        planner = Planner(view)
        decisions: list[Decision] = []
        sizing: list[Sizing] = []
        waiting: Job | None = None
        for job in self.order(view, queue, now):
            spec = job.spec
            small = sized(spec, spec.size_choices()[0]) if spec.elastic else spec
            placement = planner.best_fit(small) if planner.may_fit(small) else None
            if placement is None:
                if waiting is None:
                    waiting = job
                continue
            planner.take(small, placement)
            if spec.elastic:
                sizing.append(Sizing(job, list(placement.gpus), fresh=True))
            else:
                decisions.append(Place(job.id, placement))
        if waiting is not None:
            made = self.make_room(view, planner, waiting, now)
            if made:  # asked again on the state they leave (the runner asks after every change)
                return [*decisions, *(Place(s.job.id, Placement(tuple(s.gpus))) for s in sizing), *made]
            least = waiting.spec.size_choices()[0]
            decisions.append(Wait(waiting.id, f"waiting for {least} GPUs ({planner.free_whole} free; no elastic "
                                              "job may give back enough)"))
        return decisions + self.grown(view, planner, sizing, now)

    def grown(self, view: ClusterView, planner: Planner, sizing: list[Sizing], now: float) -> list[Decision]:
        """The starts of `sizing` (jobs started at this call) and the grows of the running elastic jobs the resize
        interval allows, at the sizes the free GPUs of `planner` give them (`_grow`), and when to ask again if GPUs
        stay idle."""
        sizing = sizing + [Sizing(j, list(view.placement(j.id).gpus), fresh=False) for j in view.elastic.values()
                           if not too_soon(view, j, now)]
        self._grow(view, planner, sizing, now)
        decisions: list[Decision] = []
        regrow = regrow_at(view, now) if planner.free_whole > 0 else None  # GPUs left idle
        if regrow is not None:
            decisions.append(WakeAt(regrow))
        for s in sizing:
            if s.fresh:
                decisions.append(Place(s.job.id, Placement(tuple(s.gpus)),
                                       f"elastic: {len(s.gpus)} GPUs, where the next GPU saves most"))
            elif len(s.gpus) != s.job.spec.workers:
                decisions.append(Resize(s.job.id, Placement(tuple(s.gpus)),
                                        f"grown to {len(s.gpus)} GPUs: the idle GPUs save it most time"))
        return decisions

    def order(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Job]:
        """The order jobs start in: least remaining work first (then arrival)."""
        return sorted(queue, key=lambda j: (self.left(view, j, now), j.spec.submit_s, j.id))

    # ---- grows -------------------------------------------------------------------------------------------------

    def _grow(self, view: ClusterView, planner: Planner, sizing: list[Sizing], now: float) -> None:
        """Give the free whole GPUs, step by step, to the sizing whose step is worth most (`step`), within what its
        team may take beyond its jobs' sizes (`standing.growth_room`; no bound without teams)."""
        told = view.tenancy
        while planner.free_whole > 0:
            best: tuple[float, Sizing, int] | None = None
            for s in sizing:
                if s.done:
                    continue
                step = self.step(view, s, min(planner.free_whole, _room(told, s)), now)
                if step is not None and (best is None or step[0] > best[0]):
                    best = (step[0], s, step[1])
            if best is None or best[0] <= 0.0:
                return
            _, s, k = best
            extra = extra_gpus(planner, s.gpus, k - len(s.gpus), s.job.spec)
            if extra is None:
                s.done = True
                continue
            planner.take(s.job.spec, Placement(tuple(extra)))
            if told is not None:
                spec = s.job.submitted or s.job.spec
                base = max(spec.workers if s.fresh else s.job.spec.workers, len(s.gpus))
                told = told.grown(told.of(spec).name, max(0, k - base))
            s.gpus += extra
            s.done = not s.fresh

    def step(self, view: ClusterView, s: Sizing, free: int, now: float) -> tuple[float, int] | None:
        """(value, size) of the sizing's best next step within `free` GPUs; None: none. The value is the share of
        its time left the step saves, per added GPU: seconds saved over seconds still to run at the new size (the
        module docstring's weighting by remaining work)."""
        job, k = s.job, len(s.gpus)
        submitted = job.submitted or job.spec
        bigger = sizes_within(submitted, k + 1, k + free)
        if not bigger:
            return None
        if s.fresh:  # not running yet: its work at the size it would start at, no pause
            n = bigger[0]
            here, there = view.speedup(submitted, k), view.speedup(submitted, n)
            return (there / here - 1.0) / (n - k), n
        left, pause = self.left(view, job, now), view.resize_pause_s(submitted)
        if left <= 0.0:
            return None
        best: tuple[float, int] | None = None
        for n in bigger:  # (a gain over the pause is the resize rules' own test: `scheduler.core.resizing`)
            net = self.gain(view, job, n, left) - pause
            still = left * job.speedup / (job.rate * view.speedup(submitted, n))
            if net > 0 and (best is None or net / still / (n - k) > best[0]):
                best = (net / still / (n - k), n)
        return best

    # ---- shrinks -----------------------------------------------------------------------------------------------

    def make_room(self, view: ClusterView, planner: Planner, waiting: Job, now: float) -> list[Decision]:
        """Shrink running elastic jobs to start `waiting` at its smallest size: those losing least time per GPU
        given back first, each by no more than the GPUs still lacking (to its minimum at most), as few as make room.
        [] if they cannot."""
        spec = waiting.spec
        small = sized(spec, spec.size_choices()[0]) if spec.elastic else spec
        if small.num_gpus < 1:
            return []
        offers: list[tuple[float, Job, Sequence[int]]] = []  # (seconds lost per GPU given back, job, its sizes)
        for j in view.elastic.values():
            choices = (j.submitted or j.spec).size_choices()
            if (j.spec.workers <= choices[0] or j.spec.team != spec.team or not may_preempt(j.spec, spec, equals=True)
                    or too_soon(view, j, now)):
                continue
            left = self.left(view, j, now)
            if left <= self.left(view, waiting, now):  # (it would finish first anyway: shortest remaining work first)
                continue
            lost = view.resize_pause_s(j.submitted or j.spec) - self.gain(view, j, choices[0], left)
            offers.append((lost / (j.spec.workers - choices[0]), j, choices))
        offers.sort(key=lambda o: (o[0], o[1].id))
        scratch = planner.without([])
        chosen: list[tuple[Job, list[int]]] = []
        lacking = small.workers - scratch.free_whole
        for _, j, choices in offers:
            keep = max(j.spec.workers - max(lacking, 1), choices[0])  # (what it keeps if it gives back all it lacks)
            size = sizes_within(j.submitted or j.spec, choices[0], keep)[-1]
            kept = kept_gpus(view, view.placement(j.id).gpus)[:size]
            scratch.give_back(j)
            scratch.take(j.spec, Placement(tuple(kept)))
            chosen.append((j, kept))
            lacking -= j.spec.workers - size
            placement = scratch.best_fit(small)
            if placement is not None:
                return [*(Resize(v.id, Placement(tuple(sorted(gpus))), f"shrunk to {len(gpus)} GPUs to start "
                                 f"{spec.name}", for_job=waiting.id) for v, gpus in chosen),
                        Place(waiting.id, placement, "started on GPUs elastic jobs gave back")]
        return []


@register
class MarginalGainExpected(MarginalGain):
    """`marginal-gain` on the work each job is expected to have left (module docstring): no oracle."""

    name: ClassVar[str] = "marginal-gain-expected"
    oracle: ClassVar[bool] = False

    def __init__(self, seed: int = 0, sizes: SizeDistribution | None = None) -> None:
        super().__init__(seed)
        self.sizes = sizes or default_sizes()
        # Pending job id -> (its spec and attained service, its sort key in `order`): a waiting job's index is read
        # once, not at every call (both are frozen while it waits; a new spec or service reads it again).
        self._keys: dict[int, tuple[JobSpec, float, tuple[float, float, int]]] = {}

    def left(self, view: ClusterView, job: Job, now: float) -> float:
        spec = job.submitted or job.spec
        return self.sizes.expected_remaining(view.attained_gpu_s(job), spec) / spec.gpu_demand

    def order(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Job]:
        """Gittins' order (the highest index first, then arrival): without a job's true remaining work, the order
        that minimises expected average completion time given the service each attained (`policies.gittins`). On 16
        training windows of the elastic mix (Philly's first three quarters and synthetic seeds, loads 1.0-1.7) it had
        1.04x the `gittins` policy's average JCT, the least expected work left first 1.08x."""
        keys, index = self._keys, self.sizes.index
        if len(keys) > 2 * len(queue) + 1024:  # forget the jobs that left the queue now and then
            keys.clear()

        def key(j: Job) -> tuple[float, float, int]:
            spec, a = j.spec, j.attained_gpu_s
            known = keys.get(j.id)
            if known is None or known[0] is not spec or known[1] != a:
                known = keys[j.id] = (spec, a, (-index(a, spec), spec.submit_s, j.id))
            return known[2]

        return sorted(queue, key=key)


class GrowIdle:
    """`grow:POLICY`: `POLICY`'s decisions; at a call where it starts, preempts and resizes nothing, the whole GPUs
    left idle go to the running elastic jobs by `marginal-gain-expected`'s grow rule. Any policy, its order and
    preemptions kept, made to use idle GPUs; the teacher of the learned policy's grows (`agents.imitation`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = f"grow:{inner.name}"
        self.oracle = inner.oracle
        self.time_sharing = getattr(inner, "time_sharing", False)
        self.sizer = MarginalGainExpected()

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        decisions = self.inner.schedule(view, queue, now)
        if acted(decisions) or not view.growable:
            return decisions
        return [*decisions, *self.sizer.grown(view, Planner(view), [], now)]


register_prefix("grow", lambda arg, seed: GrowIdle(make_policy(arg, seed=seed)), wraps=True)
