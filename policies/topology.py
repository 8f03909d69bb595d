"""`topology`: arrival order with backfill, each gang on as few racks, pods and nodes as it fits, rail-aligned, and
compactness required for a bounded time (`policies.compactness`). A `policies.heuristics.QueuePolicy`.

Late in a long replay most of its queue is gangs that wait for compact room, call after call. So it keeps what it read
of each job (`_Held`), what its searches found while free capacity stands still (calls that come with a wake-up, or an
arrival that waits too, change none), and what its last call said (`_Said`): a call on the same free capacity, while
every wait it said still reads the same, says those waits again and scans only the jobs that arrived since.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from policies.compactness import GANG_WAIT_S, NODE_WAIT_S, CompactnessWait, fewest_servers, servers
from policies.heuristics import QueuePolicy
from policies.placement import FitKey, Planner
from policies.queue_scan import whole_fit_key
from policies.registry import UnknownPolicyError, parse_options, register, register_prefix
from scheduler.core.decisions import Decision, Wait, WakeAt
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.priorities import lowest_preemptible
from scheduler.core.reasons import duration_words_floor
from scheduler.core.state import ClusterView

Found = tuple[Placement | None, int]  # a search's placement, and the servers it spans (0: none found)


@dataclass
class _Said:
    """A call that placed nothing: the jobs it was given and their specs, in order, what it said of them (less its
    `WakeAt`), and what holds while the view's free capacity (`changes`) stands still and the clock is in [`now`,
    `until`): whether a job waited for want of room, whether the plan was full, the earliest hold's end. `until`: the
    earliest time a hold it said ends or its words change."""

    view: ClusterView
    changes: int
    now: float
    until: float
    jobs: list[Job]
    specs: list[JobSpec]
    decisions: list[Decision]
    blocked: bool
    full: bool
    wake: float

    def tail(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Job] | None:
        """The jobs of `queue` after those said, if it begins with them (the same jobs, with the same specs) and the
        rest holds; None otherwise."""
        if view is not self.view or view.changes != self.changes or not self.now <= now < self.until:
            return None
        n, jobs, specs = len(self.jobs), self.jobs, self.specs
        if len(queue) < n or not n:
            return None
        it = iter(queue)
        for k, job in enumerate(it):
            if job is not jobs[k] or job.spec is not specs[k]:
                return None
            if k + 1 == n:
                break
        return list(it)


class _Held:
    """What `Topology` reads of a queued job, once per spec (what its searches read, `whole_fit_key`; when its
    compactness wait ends; the fewest servers it fits on), and the wait it last said for it (with the servers it
    spanned and the time left, in the words)."""

    __slots__ = ("spec", "key", "end", "fewest", "wait", "spans", "left", "floor")

    def __init__(self, spec: JobSpec, key: FitKey, end: float | None, fewest: int) -> None:
        self.spec, self.key, self.end, self.fewest = spec, key, end, fewest
        self.wait: Wait | None = None
        self.spans = 0
        self.left = self.floor = 0.0  # the time left when it was said, and down to which its words stand


@register
class Topology(QueuePolicy):
    """Topology-aware best fit (Slurm's topology/block, Kueue's TAS, KAI's and Volcano's topology-aware scheduling):
    arrival order with backfill; a gang on as few racks, then pods, then nodes as it fits, rail-aligned.

    Compactness is required for a bounded time (`policies.compactness`, the rule the `rl:` frame shares): a job that
    one server can hold waits up to `node_wait_s` from its submission for one server, and a larger gang up to
    `gang_wait_s` for the fewest servers it fits on (whole ones), rather than start spread over the fragments free
    now; the jobs behind it start meanwhile. A job that outranks a running preemptible job is never held. A GPU share
    takes a GPU of its own while one is free (MPS tenants slow each other), and packs onto the fullest GPU that holds
    it only when none is.
    """

    name = "topology"

    def __init__(self, seed: int = 0, node_wait_s: float = NODE_WAIT_S, gang_wait_s: float = GANG_WAIT_S) -> None:
        super().__init__(seed)
        self.waits = CompactnessWait(node_wait_s, gang_wait_s)
        self._lowest: tuple[Planner, float] | None = None  # this call's lowest priority a running job may be preempted at
        # Placements by what the searches read of a job (`whole_fit_key`), with the servers each spans: a deep queue holds
        # many jobs alike that wait for compact room, each asked again at every call (most of a 100,000-job replay's
        # time). Those found on a plan that has taken nothing hold while the view's free capacity stands still
        # (`ClusterView.changes`), across calls: most calls come with an arrival or a wake-up, which frees nothing.
        self._fresh: tuple[ClusterView, int, dict[FitKey, Found]] | None = None
        self._found: tuple[Planner, int, dict[FitKey, Found]] | None = None  # this plan's, once it has taken GPUs
        self._placed: tuple[Job, Found, _Held] | None = None  # the last job `place` answered, for `hold`, asked next
        self._plan: tuple[Planner, int, dict[FitKey, Found]] | None = None  # what `_known` gave for this plan
        # What each queued job's searches and hold read of it, by job id, and the wait last said for it: the same
        # ~200 gangs wait for compact room call after call late in a long replay, each read again at every call.
        self._held: dict[int, _Held] = {}
        self._held_view: ClusterView | None = None  # the view those were read on (job ids are a run's own)
        self._said: _Said | None = None  # the last call, where it placed nothing
        self._stands = math.inf  # this call's earliest time a hold it says ends or its words change

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        if not queue:
            return []
        said = self._said
        tail = said.tail(view, queue, now) if said is not None else None
        self._stands = math.inf
        if said is not None and tail is not None:  # the same free capacity, the same words: the newcomers alone
            decisions = list(said.decisions)
            scanned = self.scan(Planner(view), tail, decisions, said.blocked) if tail and not said.full else None
            if scanned is None or not scanned.placed:
                wake = said.wake if scanned is None else min(said.wake, scanned.wake)
                said.jobs += tail
                said.specs += [j.spec for j in tail]
                said.decisions = list(decisions)
                said.until = min(said.until, self._stands)
                if scanned is not None:
                    said.blocked, said.full, said.wake = scanned.blocked, scanned.full, wake
            else:
                self._said, wake = None, min(said.wake, scanned.wake)
        else:
            decisions = []
            jobs = list(self.order(queue, view))
            scanned = self.scan(Planner(view), jobs, decisions, False)
            wake = scanned.wake
            self._said = None if scanned.placed else _Said(
                view, view.changes, now, self._stands, jobs, [j.spec for j in jobs], list(decisions),
                scanned.blocked, scanned.full, wake)
        if wake < math.inf:
            decisions.append(WakeAt(wake))
        return decisions

    def order(self, queue: Collection[Job], view: ClusterView) -> Iterable[Job]:
        """The queue as it is (arrival order), what was read of jobs no longer in it forgotten now and then."""
        if view is not self._held_view:
            self._held, self._held_view = {}, view
        elif len(self._held) > 2 * len(queue) + 1024:  # jobs that left the queue unplaced (cancelled): forgotten
            held = self._held
            self._held = {j.id: held[j.id] for j in queue if j.id in held}
        return queue

    def _read(self, planner: Planner, job: Job) -> _Held:
        spec = job.spec
        held = self._held.get(job.id)
        if held is None or held.spec is not spec:  # (a job's spec is replaced, never changed, when it changes)
            c = planner.cluster
            held = self._held[job.id] = _Held(spec, whole_fit_key(planner.view, spec), self.waits.end(c, spec),
                                              fewest_servers(c, spec))
        return held

    def _known(self, planner: Planner) -> dict[FitKey, Found]:
        view = planner.view
        if planner.changes == 0:  # the plan is the view's free capacity as it stands
            fresh = self._fresh
            if fresh is None or fresh[0] is not view or fresh[1] != view.changes:
                fresh = self._fresh = (view, view.changes, {})
            return fresh[2]
        found = self._found
        if found is None or found[0] is not planner or found[1] != planner.changes:
            found = self._found = (planner, planner.changes, {})
        return found[2]

    def place(self, planner: Planner, job: Job) -> Placement | None:
        plan = self._plan  # (this plan's, while it stands: `_known` per job is most of a held job's cost)
        known = plan[2] if plan is not None and plan[0] is planner and plan[1] == planner.changes else None
        if known is None:
            known = self._known(planner)
            self._plan = (planner, planner.changes, known)
        held = self._read(planner, job)
        found = known.get(held.key)
        if found is None:  # (a search that finds nothing notes the misfit on its plan; a later plan may not know it)
            placement = self._search(planner, job.spec)
            found = known[held.key] = (placement, servers(planner.cluster, placement) if placement is not None else 0)
        self._placed = (job, found, held)
        return found[0]

    def _search(self, planner: Planner, spec: JobSpec) -> Placement | None:
        if spec.num_gpus < 1:
            return planner.empty_gpu_share(spec) or planner.packed_share(spec)
        placement = planner.topology_fit(spec)
        fewest = fewest_servers(planner.cluster, spec)
        if placement is not None and fewest > 1 and servers(planner.cluster, placement) > fewest:
            # Fewest racks came first and spread it over more servers than it needs: whole servers in more racks
            # instead, where there are enough (a spread shares NICs and uplinks, and the hold would refuse it). A job
            # one server holds is spread only when no server has room, and whole servers cannot help it.
            return planner.whole_servers_fit(spec) or placement
        return placement

    def hold(self, planner: Planner, job: Job, placement: Placement) -> Wait | None:
        spec = job.spec
        placed = self._placed
        if placed is not None and placed[0] is job and placed[1][0] is placement:
            spans, held = placed[1][1], placed[2]
        else:
            spans, held = servers(planner.cluster, placement), self._read(planner, job)
        # `CompactnessWait.compact` and `.until`, on what was read of the job once
        end, now = held.end, planner.view.now
        if end is None or spans <= held.fewest or now >= end or spec.priority > self._lowest_preemptible(planner):
            return None
        # The words quote the time left, which reads the same for a second to 6 minutes: the wait said last is said
        # again while it does (`duration_words_floor`).
        left = end - now
        if held.wait is None or held.spans != spans or not held.floor < left <= held.left:
            held.wait = Wait(job.id, self.waits.words(planner.cluster, spec, end, now, spans), end)
            held.spans, held.left, held.floor = spans, left, duration_words_floor(left)[1]
        self._stands = min(self._stands, end - max(held.floor, 0.0))
        return held.wait

    def _lowest_preemptible(self, planner: Planner) -> float:
        if self._lowest is None or self._lowest[0] is not planner:  # one planner per scheduling call
            self._lowest = planner, lowest_preemptible(planner.view)
        return self._lowest[1]

    def reason(self, planner: Planner, job: Job, placement: Placement) -> str:
        # What spanning costs, as the model predicts it with the jobs running now (this call's earlier placements
        # are not in the model yet: the words can only understate).
        return planner.view.fabric_words(job.spec, placement)


def make_topology(arg: str, seed: int = 0) -> Topology:
    """`topology:node_wait=S,gang_wait=S`: how long (seconds, 0 for never) a job waits for one server, and a larger
    gang for the fewest servers, before it starts spread; the instance reports its canonical name."""
    opts = parse_options("topology", arg, numbers=("node_wait", "gang_wait"))
    for key, (value,) in opts.items():
        if value < 0:
            raise UnknownPolicyError(f"policy 'topology:{arg}': option {key!r}: {value:g} is negative")
    node = opts["node_wait"][0] if "node_wait" in opts else NODE_WAIT_S
    gang = opts["gang_wait"][0] if "gang_wait" in opts else GANG_WAIT_S
    policy = Topology(seed=seed, node_wait_s=node, gang_wait_s=gang)
    named = ",".join(f"{k}={opts[k][0]:g}" for k in ("node_wait", "gang_wait") if k in opts)
    policy.name = f"topology:{named}"  # type: ignore[misc]  # instances report the name they were asked for
    return policy


register_prefix("topology", make_topology)
