"""Classic queue-order heuristics: fifo, fifo-backfill, sjf, consolidate, topology, gandiva, random.

Each one is a queue order, a placement rule and whether the first job that does not fit blocks the ones behind it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import ClassVar

import numpy as np

from policies.compactness import GANG_WAIT_S, NODE_WAIT_S, CompactnessWait, fewest_servers, servers
from policies.placement import FitKey, Planner, fit_key
from policies.queue_mirror import QueueMirror, room
from policies.registry import UnknownPolicyError, parse_options, register, register_prefix
from scheduler.core.decisions import Decision, Place, Wait, WakeAt
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.priorities import lowest_preemptible
from scheduler.core.reasons import duration_words_floor
from scheduler.core.state import ClusterView

Found = tuple[Placement | None, int]  # a search's placement, and the servers it spans (0: none found)


def wait_reason(planner: Planner, spec: JobSpec) -> str:
    if spec.constraints is not None:
        where = f" on nodes matching {spec.constraints.words()}"
        if spec.num_gpus < 1:
            return f"waiting for a GPU with {spec.share:g} free share{where}"
        return f"waiting for {spec.workers} GPUs{where}"
    if spec.num_gpus < 1:
        return f"waiting for a GPU with {spec.share:g} free share and {planner.view.mem_need(spec):g} GB free"
    if planner.free_whole < spec.workers:
        return f"waiting for {spec.workers} GPUs ({planner.free_whole} free)"
    return f"waiting for {spec.workers} GPUs with {planner.view.mem_need(spec):g} GB each"


class QueuePolicy:
    """Walk the queue in `order`; place each job that fits with `place`; if `strict`, the first misfit blocks."""

    name: ClassVar[str]
    oracle: ClassVar[bool] = False
    strict: ClassVar[bool] = False

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def order(self, queue: Collection[Job], view: ClusterView) -> Iterable[Job]:
        return queue

    def place(self, planner: Planner, job: Job) -> Placement | None:
        return planner.best_fit(job.spec)

    def reason(self, planner: Planner, job: Job, placement: Placement) -> str:
        """Why this placement, for the job's explanation ('' : nothing beyond the policy's rule)."""
        return ""

    def hold(self, planner: Planner, job: Job, placement: Placement) -> Wait | None:
        """Why `job` stays queued although `placement` fits it now, and until when at most (`Wait.until`: the policy
        asks to be called again then); None: it starts. The jobs behind it go on."""
        return None

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        decisions: list[Decision] = []
        if not queue:
            return decisions
        planner = Planner(view)
        blocked: Job | None = None
        wake = math.inf
        for job in self.order(queue, view):
            if planner.full():
                break
            placement = self.place(planner, job) if planner.may_fit(job.spec) else None
            if placement is None:
                if blocked is None:
                    blocked = job
                    decisions.append(Wait(job.id, wait_reason(planner, job.spec)))
                if self.strict:
                    break
                continue
            held = self.hold(planner, job, placement)
            if held is not None:
                decisions.append(held)
                if held.until is not None and held.until < wake:
                    wake = held.until
                continue
            decisions.append(Place(job.id, placement, self.reason(planner, job, placement)))
            planner.take(job.spec, placement)
        if wake < math.inf:
            decisions.append(WakeAt(wake))
        return decisions


@register
class Fifo(QueuePolicy):
    """Strict arrival order: the head waits until enough GPUs are free anywhere, then takes the fewest nodes."""

    name = "fifo"
    strict = True

    def place(self, planner: Planner, job: Job) -> Placement | None:
        return planner.first_fit(job.spec)


@register
class FifoBackfill(QueuePolicy):
    """Arrival order, but jobs behind a blocked head start if they fit now (backfill without reservations)."""

    name = "fifo-backfill"

    def place(self, planner: Planner, job: Job) -> Placement | None:
        return planner.first_fit(job.spec)


@register
class ShortestJobFirst(QueuePolicy):
    """Shortest isolated duration first, with backfill. An ORACLE: real schedulers do not know durations."""

    name = "sjf"
    oracle = True

    def order(self, queue: Collection[Job], view: ClusterView) -> Iterable[Job]:
        return sorted(queue, key=lambda j: (j.spec.duration_s, j.spec.submit_s))


@register
class Consolidate(QueuePolicy):
    """Slurm-like topology best fit: arrival order with backfill; the tightest node, else the best-fitting rack."""

    name = "consolidate"


class _Held:
    """What `Topology` reads of a queued job, once per spec (`fit_key` as it searches, when its compactness wait ends,
    the fewest servers it fits on), and the wait it last said for it (with the servers it spanned and the time left,
    in the words)."""

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
        # Placements by what the searches read of a job (`fit_key`), with the servers each spans: a deep queue holds
        # many jobs alike that wait for compact room, each asked again at every call (most of a 100,000-job replay's
        # time). Those found on a plan that has taken nothing hold while the view's free capacity stands still
        # (`ClusterView.changes`), across calls: most calls come with an arrival or a wake-up, which frees nothing.
        self._fresh: tuple[ClusterView, int, dict[FitKey, Found]] | None = None
        self._found: tuple[Planner, int, dict[FitKey, Found]] | None = None  # this plan's, once it has taken GPUs
        self._placed: tuple[Job, Found, _Held] | None = None  # the last job `place` answered, for `hold`, asked next
        # What each queued job's searches and hold read of it, by job id, and the wait last said for it: the same
        # ~200 gangs wait for compact room call after call late in a long replay, each read again at every call.
        self._held: dict[int, _Held] = {}
        self._held_view: ClusterView | None = None  # the view those were read on (job ids are a run's own)

    def order(self, queue: Collection[Job], view: ClusterView) -> Iterable[Job]:
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
            held = self._held[job.id] = _Held(spec, self._key(planner, spec), self.waits.end(planner.cluster, spec),
                                              fewest_servers(planner.cluster, spec))
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

    @staticmethod
    def _key(planner: Planner, spec: JobSpec) -> FitKey:
        """`fit_key`, less a whole-GPU job's memory where every GPU holds it: this policy's whole-GPU searches
        (`Planner.topology_fit`, `Planner.whole_servers_fit`) read memory only through the nodes a job may use, all of
        them then. A deep queue's gangs of one size but many models are one search, not one each."""
        key = fit_key(planner.view, spec)
        if spec.num_gpus >= 1 and key[3] <= planner.min_gpu_mem:
            return key[:3] + (0.0,) + key[4:]
        return key

    def place(self, planner: Planner, job: Job) -> Placement | None:
        known = self._known(planner)
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


@register
class Gandiva(QueuePolicy):
    """Gandiva-style packing with affinity: fractional jobs packed onto shared GPUs (best fit), whole-GPU jobs
    preferably on nodes already running jobs of the same size. Gandiva's time slicing and migration are not modelled.
    """

    name = "gandiva"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        # Job size -> node -> how many running jobs of that size it holds (a node is in the size's affinity while
        # one does), kept up to date from the running jobs' placements as they were read (`_sync`).
        self._affinity: dict[int, dict[int, int]] = {}
        self._read: dict[int, tuple[int, list[int]]] = {}  # job id -> (size, nodes) as counted
        self._seen: tuple[ClusterView, int] | None = None  # the view read last, and its `moves` then

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        if queue:
            self._sync(view)
        return super().schedule(view, queue, now)

    def _sync(self, view: ClusterView) -> None:
        """Count the running jobs' nodes by size, reading again only the jobs allocated or released since the last
        call (`ClusterView.moved_since`: starts, ends, resizes): the nodes of every running job, read at every call,
        were most of a 100,000-job replay's time (thousands run). Another view, or one whose record no longer reaches
        back, is read whole."""
        moved = view.moved_since(self._seen[1]) if self._seen is not None and self._seen[0] is view else None
        if moved is None:
            self._affinity, self._read = {}, {}
            moved = list(view.running)
        for job_id in dict.fromkeys(moved):  # (a job once, in order)
            seen = self._read.pop(job_id, None)
            if seen is not None:
                self._count(*seen, -1)
            job = view.running.get(job_id)
            if job is not None and job.placement is not None:
                self._read[job_id] = (job.spec.workers, job.placement.nodes(view.cluster))
                self._count(*self._read[job_id], 1)
        self._seen = (view, view.moves)

    def _count(self, size: int, nodes: list[int], by: int) -> None:
        counts = self._affinity.setdefault(size, {})
        for n in nodes:
            left = counts.get(n, 0) + by
            if left:
                counts[n] = left
            else:
                del counts[n]

    def place(self, planner: Planner, job: Job) -> Placement | None:
        spec = job.spec
        if spec.num_gpus < 1 or spec.workers > planner.cluster.max_gpus_per_node:
            return planner.best_fit(spec)
        nodes = [n for n in self._affinity.get(spec.workers, ()) if planner.node_free[n] >= spec.workers]
        if spec.constraints is not None:  # only the nodes its constraints allow
            usable = planner.usable_nodes(spec)
            nodes = [n for n in nodes if usable[n]]
        if nodes:
            node = min(nodes, key=lambda n: (planner.node_free[n], n))
            return Placement(tuple(planner.gpus_in_node(node, spec.workers)))
        return planner.best_fit(spec)


@register
class RandomPolicy(QueuePolicy):
    """Random queue order, random free GPUs: the floor any policy should beat."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._mirror = QueueMirror()

    def order(self, queue: Collection[Job], view: ClusterView) -> Iterable[Job]:
        jobs = list(queue)
        self.rng.shuffle(jobs)
        return jobs

    def place(self, planner: Planner, job: Job) -> Placement | None:
        if job.spec.num_gpus < 1:
            return planner.random_share(job.spec, self.rng)
        return planner.spread(job.spec, self.rng)

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        """`QueuePolicy.schedule` over `order`, the same decisions from the same draws, without reading a deep
        queue's jobs one by one: once a job is named as waiting, the walk visits only the jobs `room` says may fit
        as the plan stood at its last `take` (it only shrinks); any other would be passed over, or, the plan full,
        end the walk, as the next one visited does alike (nothing changes in between). The sizes come from the
        mirror of the queue (`policies.queue_mirror`), not read again at each call."""
        decisions: list[Decision] = []
        if not queue:
            return decisions
        jobs, sizes = self._mirror.follow(queue)
        order = self.rng.permutation(len(jobs))  # the very draws `rng.shuffle(list(queue))` makes (`order`)
        need = sizes[order]
        planner = Planner(view)
        blocked = False
        wake = math.inf
        nxt = 0  # the next position in `order` to weigh
        ahead: list[int] | None = None  # once blocked: the positions from `nxt` on that may fit, as the plan stands
        k = 0
        while True:
            if not blocked:
                if nxt == len(jobs):
                    break
                i = nxt
            else:
                if ahead is None:
                    ahead, k = (np.flatnonzero(room(need[nxt:], planner)) + nxt).tolist(), 0
                if k == len(ahead):
                    break
                i, k = ahead[k], k + 1
            nxt = i + 1
            job = jobs[order[i]]
            if planner.full():
                break
            placement = self.place(planner, job) if planner.may_fit(job.spec) else None
            if placement is None:
                if not blocked:
                    blocked = True
                    decisions.append(Wait(job.id, wait_reason(planner, job.spec)))
                continue
            held = self.hold(planner, job, placement)
            if held is not None:
                decisions.append(held)
                if held.until is not None and held.until < wake:
                    wake = held.until
                continue
            decisions.append(Place(job.id, placement, self.reason(planner, job, placement)))
            planner.take(job.spec, placement)
            self._mirror.placed(job)
            ahead = None
        if wake < math.inf:
            decisions.append(WakeAt(wake))
        return decisions
