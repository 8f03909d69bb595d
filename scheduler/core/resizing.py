"""The rules every resize of an elastic job follows, whoever decides it (a heuristic, the learned policy, an admin's
policy): the policies choose sizes, these rules bound them, once, for the simulator, the RL environment, what-if and
the live controller alike. `scheduler.core.priorities`' frame, which wraps every policy, applies them.

1. **Its sizes.** Never below `min_gpus` nor above `max_gpus`, only the `sizes` it accepts, and always another size
   than the one it runs at (the book refuses anything else: that is a policy's bug, not a choice).
2. **Worth its pause.** A grow must save more time than its pause costs: the job's remaining work at its present
   rate, against its pause plus that work at the new size. The new rate is the present one times the ratio of the
   two sizes' speedups alone and packed (`scheduler.core.elastic.speedup`): the contention it meets now is assumed
   to stay; the run then meets whatever the contention model computes for its new placement. A shrink costs its own
   job time by design: its gain is the start it makes room for, which must follow it in the same decisions
   (`Resize.for_job`); a shrink for no start is dropped.
3. **No thrashing.** A job resized less than the cluster's resize interval ago (`ClusterView.resize_interval_s`) is not
   resized again. The default, `elastic.RESIZE_INTERVAL_S` (600 s), is a stated choice, not a measurement: first
   set at ten times the pause then assumed for a small model (30 s plus its checkpoint), so that a job spends at most
   about a tenth of its time pausing however a policy behaves. The pause measured since (`elastic.pause_fit`, 11-13 s
   on one GPU) leaves it at a fiftieth, with room for what that measurement did not see (a rendezvous across nodes,
   shared storage). `corral serve --resize-interval` and the simulator's `resize_interval_s` set another.
4. **Priorities and teams.** A shrink is a preemption of the GPUs it gives back: rule 2 of
   `scheduler.core.priorities` (only downwards; of equal priority only by a time-sharing policy; never a
   non-preemptible job) and the tenancy frame's (a victim of the job's own team, or a borrower's job when the start
   is within its team's quota) apply to it as written. A grow is a start on idle GPUs: inside the tenancy frame it
   takes only GPUs no team's queued jobs within their quota are owed, and only within the team's quota, or its
   borrowing limit for a preemptible job (`scheduler.core.tenancy.frame`). A team taking its quota back shrinks
   elastic borrowers by what their teams borrow before it preempts any borrower (`TenancyFrame.reclaim`).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.decisions import Preempt, Resize
from scheduler.core.model import Job
from scheduler.core.reasons import Code, Reason
from scheduler.core.state import ClusterView


def remaining_s(job: Job, now: float) -> float:
    """Isolated seconds of work a running job has left at `now`, by its accounting (the simulator's and the
    controller's: a job's work is its stated duration), at its present rate since that was last brought up to date
    (none while it pauses for a resize: `last_update` is then the pause's end)."""
    return max(0.0, job.work_left - max(0.0, now - job.last_update) * job.rate)


def gain_s(view: ClusterView, job: Job, k: int, now: float) -> float:
    """Wall seconds a run of `job` at `k` GPUs would finish sooner than at the size it runs at, before the pause
    (negative for a shrink): rule 2's estimate (module docstring)."""
    left = remaining_s(job, now)
    if left <= 0.0 or job.rate <= 0.0:
        return 0.0
    submitted = job.submitted or job.spec
    new_rate = job.rate * view.speedup(submitted, k) / job.speedup
    return left / job.rate - left / new_rate


def shrinks(view: ClusterView, d: Resize) -> bool:
    """Whether `d` gives GPUs back (a running job to fewer GPUs than it holds); a resize of a job that is not
    running counts as a grow, for the book to refuse."""
    job = view.running.get(d.job_id)
    return job is not None and len(d.placement.gpus) < job.spec.workers


def refusal(view: ClusterView, d: Resize, now: float) -> Reason | None:
    """Why rule 2 or 3 refuses `d` now (None: they allow it). A shrink's priorities and teams are the frames'."""
    job = view.running.get(d.job_id)
    if job is None:
        return None  # not the rules' to say: the book refuses it as a policy's bug
    k = len(d.placement.gpus)
    said = {"job": job.spec.name, "to": k}
    if too_soon(view, job, now):
        assert job.resized_s is not None
        return Reason(Code.RESIZE_REFUSED, said | {"rule": "interval", "ago_s": now - job.resized_s,
                                                   "interval_s": view.resize_interval_s})
    if k < job.spec.workers:
        if d.for_job is None:
            return Reason(Code.RESIZE_REFUSED, said | {"rule": "no_start"})
        return None
    gain, pause = gain_s(view, job, k, now), view.resize_pause_s(job.submitted or job.spec)
    if gain <= pause:
        return Reason(Code.RESIZE_REFUSED, said | {"rule": "gain", "gain_s": gain, "pause_s": pause})
    return None


def too_soon(view: ClusterView, job: Job, now: float) -> bool:
    """Rule 3: was `job` resized less than the cluster's resize interval ago?"""
    return job.resized_s is not None and now - job.resized_s < view.resize_interval_s


def regrow_at(view: ClusterView, now: float) -> float | None:
    """When the first running elastic job below its largest size that rule 3 keeps from growing now may grow again
    (a policy that leaves GPUs idle asks to be called then), or None."""
    ends = [j.resized_s + view.resize_interval_s for j in view.elastic.values() if j.resized_s is not None
            and too_soon(view, j, now) and j.spec.workers < (j.submitted or j.spec).size_choices()[-1]]
    return min(ends, default=None)


def gives_back(view: ClusterView, d: Preempt | Resize) -> float:
    """The GPU share a preemption or a shrink frees (0 for a job that is not running)."""
    job = view.running.get(d.job_id)
    if job is None:
        return 0.0
    return job.spec.gpu_demand - (len(d.placement.gpus) if isinstance(d, Resize) else 0.0)


def kept_gpus(view: ClusterView, gpus: Sequence[int]) -> list[int]:
    """`gpus` with those of the node holding most of them first: what a shrink keeps (the densest part of a gang, so
    its ring leaves the fewest servers), for every caller that shrinks (the tenancy frame's reclaim, the policies)."""
    count: dict[int, int] = {}
    for g in gpus:
        node = int(view.cluster.gpu_node[g])
        count[node] = count.get(node, 0) + 1
    return sorted(gpus, key=lambda g: (-count[int(view.cluster.gpu_node[g])], g))
