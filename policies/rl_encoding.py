"""The one encoding shared by the RL environment and the RL policy: observation, action mask, action -> decisions.

At each decision point the agent picks **which pending job starts next, where, and whether to preempt for it**, or
waits. Which job: one slot per queue order (`ORDERS`), holding the first job in that order that can start now on
free GPUs:

* `las`: Tiresias' two-dimensional least attained service with its default queues (1 and 10 GPU-hours), then
  arrival;
* `las-fine`: the same with finer queues (`FINE_THRESHOLDS`), which let short jobs overtake on traces where almost
  every job stays under one GPU-hour;
* `gittins`: the highest Gittins index of attained service under the job-size distribution for the job's class
  (`policies.gittins`): the size-aware order that needs no duration from the user;
* `remaining`: the least expected remaining GPU-seconds under the same distribution;
* `fifo`: the oldest;
* `smallest`: the fewest GPUs, then arrival;

and three preemption slots, `preempt-las`, `preempt-fine` and `preempt-gittins`: the first job in that order (LAS by the
default or the fine queues, or Gittins') that fits nowhere but would fit once running jobs of strictly lower-priority
queues (of attained service, or of Gittins rank as the `gittins` policy keeps them) are preempted, chosen by Tiresias'
rule (lowest priority, then latest arrival, first), except that a slot never frees more GPUs than its job lacks, where a
set of those victims that frees fewer makes room and the other pending jobs would not take the surplus (`pick_victims`,
the rule of `scheduler.core.victims`): no action preempts a 16-GPU job for a 2-GPU one, leaving 14 GPUs idle, while a
2-GPU victim would do, so the agent cannot choose such a waste. Choosing such a slot preempts them; choosing another or
waiting does not. So every choice of `tiresias`, of Tiresias with the fine queues and of `gittins` is an action (the
warm start clones them). One job may head several orders; the slot count never depends on the queue's or the cluster's
size.

How large (encoding 8, `policies.rl_elastic`): an elastic job is asked whether it fits at its smallest size and is
offered placements at up to three sizes (submitted, smallest, largest that fits); and two slots resize running
elastic jobs: `grow` (one job's placements at larger sizes on idle GPUs, each one the resize rules allow) and `shrink`
(the first job of Gittins' order that fits nowhere, started on GPUs elastic jobs give back). Either may be declined:
waiting is offered beside them. A workload without elastic jobs encodes as encoding 7's with zeros inserted.

Where: each slot's job comes with up to `MAX_CANDIDATES` placements (the generators of
`policies.placement.Planner.candidates`), minus any placement another one beats on both the job's own predicted
slowdown and the slowdown it adds to its neighbours (`non_dominated`): no learned policy may choose a placement no
user would accept. Wait: nothing more starts until the next event (an arrival, a completion, or a running job
crossing into a lower queue); it is offered only when every start would preempt, so waiting means declining to
preempt, and the agent never holds GPUs idle while a job fits.

Observation (`OBS_SIZE` floats in [`OBS_LOW`, `OBS_HIGH`], independent of the cluster's and the queue's size; each
group's offset is named, e.g. `TEAM_JOB_AT`, `SIZE_CANDIDATE_AT`, `ELASTIC_CLUSTER_AT`):
* per job slot (`JOB_FEATURES`): valid, which orders its job heads, gang size, GPU share, inference or not, gradient
  volume, time waited, attained service, fine queue, log Gittins index, log expected remaining GPU-seconds, GPUs it
  would preempt (per GPU it asks for; a shrink slot's: the GPUs given back) and the service those victims attained;
  then its team's standing (`TEAM_JOB_FEATURES`, `team_job_features`): whether it would borrow (start beyond its
  team's quota), whether it is offered only as a swap, its team's borrowed GPUs over its quota, the borrowed share
  of what its team holds, and its team's fair-share rank among the teams with demand (0 first, 1 last); then its
  priority (`PRIORITY_JOB_FEATURES`, `Priorities`): the share of GPUs running jobs of lower priority hold (what it
  could take by the priority rule), and whether it is not preemptible; then its sizes (`ELASTIC_JOB_FEATURES`,
  encoding 8): elastic or not, the span of its sizes, its size now against its submitted one;
* then per placement slot (`CANDIDATE_FEATURES`): valid, log of its own predicted slowdown, slowdown it adds to the
  jobs it joins (per GPU of the job), nodes beyond the fewest possible, busiest NIC load among its nodes' NICs,
  whether it breaks into a wholly free node, the GPU share it strands, tenants already on its GPUs; then the fabric's
  tiers (`FABRIC_CANDIDATE_FEATURES`, encoding 7): racks beyond the fewest that could hold the job, and the busiest
  fabric link (a leaf's or pod's uplink or downlink) its traffic would cross, as the other jobs' summed duty cycles
  there (`Prediction.fabric_load`); then its size against the job's (`SIZE_CANDIDATE_FEATURES`, encoding 8: log2 of
  the growth, of the shrink, and the change of speed per GPU);
* the cluster and queue (`CLUSTER_FEATURES`): free whole GPUs, free capacity, wholly free nodes, queue length, GPUs
  the queue asks for, GPUs shared through MPS, running jobs per GPU, the queue's fraction of fractional jobs; then the
  teams (`TEAM_CLUSTER_FEATURES`): the borrowed share of the running GPUs, the idle quota lent to borrowers (per GPU),
  how many teams have demand beyond the first (log2 / 4); then the priorities (`PRIORITY_CLUSTER_FEATURES`): the share of
  GPUs held by non-preemptible runs and by runs of higher priority than any pending job (encoding 6); then the fabric
  (`FABRIC_CLUSTER_FEATURES`): the mean load of its links (encoding 7); then the elastic jobs
  (`ELASTIC_CLUSTER_FEATURES`, encoding 8): the share of GPUs running elastic jobs hold, the queue's elastic share.

Fabric: on a cluster without one (`Cluster.fabric` None: one aggregate uplink per rack) every fabric feature is 0, so
such a cluster encodes as under encoding 6 with zeros inserted, and on a one-NIC server the NIC load is that NIC's.

Compactness waits, on a fabric only (`policies.compactness`, the rule `topology` follows): a whole-GPU job waits a
bounded time from its submission (an hour for one server, a day for a larger gang's fewest servers) for room on the
fewest servers. While it waits it is offered only placements on them (a gang larger than a server also whole servers in
as few racks as they allow, as `topology` places it); where it could start spread it is not offered and nobody is
preempted for it; where it fits nowhere, a preemption slot offers it only victims that free the fewest servers (the
victim search's test of each set, `CompactnessWait.room`, then its placements on them). The policy asks to be woken
when such a wait ends. The rule adds no feature and changes nothing without a fabric: agents of this version act
under it as they are (the shipped one was trained before it and measured with it, agents/zoo/README.md).

Teams: inside the tenancy frame (`scheduler.core.tenancy`) the frame hands its policy each team's standing on the
view (`ClusterView.tenancy`) while it asks. Without teams it is None and every team feature is 0: what one team
owning the whole cluster would see (nothing borrowed or lent, one team with demand, every job offered within its
quota), so the observation does not depend on the number of teams and a cluster without them encodes as one team's.
Inside the frame the preemption slots take only victims the frame would keep (the job's own team's jobs; for a job
within its quota, borrowers' too), and when the frame asks about jobs that may start only by a swap, only the
preemption slots are offered (a start on free GPUs would be dropped: they are held for others).

Action `j * MAX_CANDIDATES + k` starts job slot `j` on its placement `k`; `WAIT` (the last) waits.

Bump `ENCODING_VERSION` whenever any of this changes: trained agents record it and refuse to load across versions.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from policies.compactness import CompactnessWait
from policies.gittins import Gittins, SizeDistribution, default_sizes
from policies.placement import FitKey, Planner, fit_key
from policies.rl_elastic import (
    ELASTIC_CLUSTER_FEATURES,
    ELASTIC_JOB_FEATURES,
    GROW,
    SHRINK,
    SIZE_CANDIDATE_FEATURES,
    Filled,
    job_size_features,
    keep_per_size,
    least,
    resize_slots,
    size_features,
    start_sizes,
)
from policies.rl_rows import QueueRows
from policies.rl_running import (
    Priorities,
    gittins_levels,
    running_index,
    running_service,
    started_now,
    synced_attained,
)
from policies.rl_scan import FITS, NONE, UNKNOWN, Scan
from policies.tiresias import DEFAULT_THRESHOLDS, las_level
from policies.victim_choice import pick_victims
from scheduler.core.constraints import Constraints
from scheduler.core.contention import Prediction
from scheduler.core.decisions import Decision, Place, Preempt, Resize
from scheduler.core.elastic import sized
from scheduler.core.model import Job, JobKind, JobSpec, Placement
from scheduler.core.priorities import lowest_preemptible, may_preempt
from scheduler.core.standing import TenancyStanding
from scheduler.core.state import EPS, ClusterView
from scheduler.core.victims import PendingDemands

ENCODING_VERSION = 8
ORDERS = ("las", "las-fine", "gittins", "remaining", "fifo", "smallest", "preempt-las", "preempt-fine",
          "preempt-gittins", GROW, SHRINK)
MAX_JOBS = len(ORDERS)  # job slots: one per order
MAX_CANDIDATES = 4  # placement slots per job
WAIT = MAX_JOBS * MAX_CANDIDATES  # the last action
N_ACTIONS = WAIT + 1
FABRIC_CANDIDATE_FEATURES = 2  # racks beyond the fewest, the busiest fabric link it crosses
CANDIDATE_FEATURES = 8 + FABRIC_CANDIDATE_FEATURES + SIZE_CANDIDATE_FEATURES
TEAM_JOB_FEATURES = 5  # the job's team's standing (`team_job_features`)
PRIORITY_JOB_FEATURES = 2  # its priority against the running jobs', and whether it may be preempted (`Priorities`)
JOB_FEATURES = 1 + len(ORDERS) + 12 + TEAM_JOB_FEATURES + PRIORITY_JOB_FEATURES + ELASTIC_JOB_FEATURES
SLOT_SIZE = JOB_FEATURES + MAX_CANDIDATES * CANDIDATE_FEATURES
TEAM_CLUSTER_FEATURES = 3  # the teams together (`team_cluster_features`)
PRIORITY_CLUSTER_FEATURES = 2  # the running GPUs no start may take back (`Priorities`)
FABRIC_CLUSTER_FEATURES = 1  # the fabric links' mean load
CLUSTER_FEATURES = (8 + TEAM_CLUSTER_FEATURES + PRIORITY_CLUSTER_FEATURES + FABRIC_CLUSTER_FEATURES
                    + ELASTIC_CLUSTER_FEATURES)
OBS_SIZE = MAX_JOBS * SLOT_SIZE + CLUSTER_FEATURES
# Where each group of features starts: in a job slot, in a placement slot (from its start), and in the observation.
TEAM_JOB_AT = JOB_FEATURES - TEAM_JOB_FEATURES - PRIORITY_JOB_FEATURES - ELASTIC_JOB_FEATURES
PRIORITY_JOB_AT = TEAM_JOB_AT + TEAM_JOB_FEATURES
ELASTIC_JOB_AT = PRIORITY_JOB_AT + PRIORITY_JOB_FEATURES
FABRIC_CANDIDATE_AT = CANDIDATE_FEATURES - FABRIC_CANDIDATE_FEATURES - SIZE_CANDIDATE_FEATURES
SIZE_CANDIDATE_AT = FABRIC_CANDIDATE_AT + FABRIC_CANDIDATE_FEATURES
ELASTIC_CLUSTER_AT = OBS_SIZE - ELASTIC_CLUSTER_FEATURES
FABRIC_CLUSTER_AT = ELASTIC_CLUSTER_AT - FABRIC_CLUSTER_FEATURES
PRIORITY_CLUSTER_AT = FABRIC_CLUSTER_AT - PRIORITY_CLUSTER_FEATURES
TEAM_CLUSTER_AT = PRIORITY_CLUSTER_AT - TEAM_CLUSTER_FEATURES
OBS_LOW, OBS_HIGH = 0.0, 8.0  # every feature is clipped into this range
THRESHOLDS = DEFAULT_THRESHOLDS  # the `las` order's queues
# Preemption queues: finer than Tiresias' and containing its thresholds, so every preemption Tiresias would make (a
# victim in a strictly lower default queue) is one this frame offers too.
# Not finer than 300 GPU-s: with 60 (tried), jobs crossing the first threshold were preempted at once and preempted
# others in turn, a round robin whose 30-s restarts cost more than it saved (thousands of preemptions a window).
FINE_THRESHOLDS: tuple[float, ...] = (300.0, 3600.0, 36000.0)
GITTINS = "gittins"  # the ladder of Gittins' queues: bands of rank (1 / index) per job class (`policies.gittins`)
PREEMPT_LADDERS: dict[str, tuple[float, ...] | str] = {
    "preempt-las": tuple(THRESHOLDS), "preempt-fine": FINE_THRESHOLDS, "preempt-gittins": GITTINS}
# A preemption slot looks at most this many jobs (that fit nowhere) deep into its order: a bound on the decision's
# cost on a deep queue. Tiresias scans the whole queue; past the first few dozen blocked jobs, the ones behind rarely
# find victims the ones ahead did not.
PREEMPT_SCAN = 32
TOLERANCE = 1e-6  # predictions closer than this are ties for dominance
COMPACTNESS = CompactnessWait()  # `topology`'s default waits for the fewest servers


@dataclass(frozen=True)
class JobSlot:
    job: Job
    candidates: list[Placement]
    victims: tuple[int, ...]  # running jobs to preempt before any candidate can start
    level: int  # the job's fine queue
    heads: tuple[str, ...]  # the orders this job heads
    # The contention model's prediction for each candidate, made at this decision point (the explanation reuses them)
    predictions: tuple[Prediction, ...] = ()
    kind: str = "start"  # or GROW (a running job, `candidates` its larger placements) or SHRINK (`resizes` first)
    resizes: tuple[Resize, ...] = ()  # a shrink slot's shrinks, for its job's start


@dataclass(frozen=True)
class DecisionPoint:
    slots: list[JobSlot | None]  # one per order in `ORDERS`; None where no job of that order can start
    obs: np.ndarray  # float32 [OBS_SIZE]
    mask: np.ndarray  # bool [N_ACTIONS]
    queue: list[Job]  # the pending jobs it is about, in queue order (inside the tenancy frame, those it was asked)

    def choice(self, action: int) -> tuple[JobSlot, Placement] | None:
        """The job and placement an action stands for; None for wait. Invalid actions are the caller's to refuse."""
        if action == WAIT:
            return None
        slot = self.slots[action // MAX_CANDIDATES]
        assert slot is not None, f"action {action} is masked"
        return slot, slot.candidates[action % MAX_CANDIDATES]

    def action_of(self, job_id: int, gpus: tuple[int, ...] | None = None, preempts: bool = False,
                  kind: str = "start") -> int | None:
        """The action that starts `job_id` (on `gpus` if that is one of its candidates, else on its first of as many
        GPUs, else on its first), from a slot that preempts or not as asked (a start) or of `kind` (GROW: resizes
        it to `gpus`; SHRINK: starts it on GPUs elastic jobs give back), or None if the job is not a candidate so."""
        for j, slot in enumerate(self.slots):
            if slot is None or slot.job.id != job_id or slot.kind != kind:
                continue
            if kind == "start" and bool(slot.victims) != preempts:
                continue
            k = next((i for i, p in enumerate(slot.candidates) if p.gpus == gpus), None)
            if k is None and gpus is not None:
                k = next((i for i, p in enumerate(slot.candidates) if len(p.gpus) == len(gpus)), None)
            return j * MAX_CANDIDATES + (k or 0)
        return None

    def quiet_action(self) -> int:
        """A safe default: wait where allowed, else the first start that preempts nobody, else the first valid."""
        if self.mask[WAIT]:
            return WAIT
        for j, slot in enumerate(self.slots):
            if slot is not None and not slot.victims and slot.kind == "start":
                return j * MAX_CANDIDATES
        return int(np.flatnonzero(self.mask)[0])

    def decisions(self, action: int, reason: str) -> list[Decision]:
        """What taking `action` means for the simulator or the controller (empty for wait)."""
        chosen = self.choice(action)
        if chosen is None:
            return []
        slot, placement = chosen
        if slot.kind == GROW:
            return [Resize(slot.job.id, placement, reason)]
        if slot.kind == SHRINK:
            return [*slot.resizes, Place(slot.job.id, placement, reason)]
        why = f"preempted for {slot.job.spec.name} (queue {slot.level})"
        return [*(Preempt(v, why) for v in slot.victims), Place(slot.job.id, placement, reason)]


# ---- placements no one would choose ---------------------------------------------------------------------------------


def non_dominated(preds: Sequence[Prediction]) -> list[int]:
    """Indices of the placements no other one beats on both the job's own slowdown and the slowdown added to its
    neighbours (at least as good on both, better on one), in their original order. Of exact ties, the first stays."""
    keep = []
    for i, p in enumerate(preds):
        dominated = False
        for j, q in enumerate(preds):
            if j == i:
                continue
            le = q.slowdown <= p.slowdown + TOLERANCE and q.others_added <= p.others_added + TOLERANCE
            lt = q.slowdown < p.slowdown - TOLERANCE or q.others_added < p.others_added - TOLERANCE
            if le and (lt or j < i):  # strictly better somewhere, or an exact tie that comes first
                dominated = True
                break
        if not dominated:
            keep.append(i)
    return keep


# ---- features -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueSummary:
    """What every decision at one instant shares: computed once per decision point."""

    length: int
    gpus: float
    fractional: float


def queue_summary(queue: Collection[Job]) -> QueueSummary:
    n = len(queue)
    frac = sum(1 for j in queue if j.spec.num_gpus < 1)
    return QueueSummary(n, float(sum(j.spec.gpu_demand for j in queue)), frac / n if n else 0.0)


def cluster_features(view: ClusterView, queued: QueueSummary, priorities: Priorities | None = None,
                     elastic_share: float = 0.0) -> np.ndarray:
    """`elastic_share`: the share of the queue's jobs that are elastic."""
    c = view.cluster
    elastic = view.elastic
    free = np.asarray(view.free_share)
    shared = float(np.count_nonzero((free > EPS) & (free < 1.0 - EPS))) / c.num_gpus
    whole_nodes = float(np.count_nonzero(np.asarray(view.node_free) == c.node_num_gpus)) / c.num_nodes
    return np.array([
        view.free_whole / c.num_gpus,
        view.free_capacity / c.num_gpus,
        whole_nodes,
        math.log1p(queued.length) / 4.0,
        queued.gpus / c.num_gpus,
        shared,
        len(view.running) / c.num_gpus,
        queued.fractional,
        *team_cluster_features(view.tenancy, c.num_gpus),
        *(priorities.cluster() if priorities is not None else (0.0, 0.0)),
        # Summed duty cycles per link, averaged: 1.0 means every uplink and downlink carries a saturating job's worth.
        min(float(np.mean(np.asarray(view.link_load)[c.fabric_links])), OBS_HIGH) if c.fabric_links.size else 0.0,
        sum(j.spec.gpu_demand for j in elastic.values()) / c.num_gpus if elastic else 0.0,
        elastic_share,
    ], dtype=np.float32)


# Without teams (`view.tenancy` None) every team feature takes the value one team owning the whole cluster would give
# it (nothing borrowed or lent, one team with demand, every job the policy is offered within its quota, none a swap),
# so an agent sees a cluster without teams as that one team's.
NO_TEAM_JOB = (0.0,) * TEAM_JOB_FEATURES
NO_TEAM_CLUSTER = (0.0,) * TEAM_CLUSTER_FEATURES


def team_cluster_features(tenancy: TenancyStanding | None, num_gpus: int) -> tuple[float, ...]:
    """The fraction of running GPUs that are borrowed, the idle quota lent to borrowers (per cluster GPU), and how
    many teams have demand beyond the first (log2 / 4)."""
    if tenancy is None:
        return NO_TEAM_CLUSTER
    in_use = tenancy.in_use_gpus
    return (
        tenancy.borrowed_gpus / in_use if in_use > EPS else 0.0,
        tenancy.lent_gpus / num_gpus,
        math.log2(max(tenancy.teams_with_demand, 1)) / 4.0,
    )


def team_job_features(tenancy: TenancyStanding | None, job: Job) -> tuple[float, ...]:
    """The job's standing in the frame: whether it would borrow (start beyond its team's quota), whether it is
    offered only as a swap (by preempting its own team's jobs), its team's borrowed GPUs over its quota (a team
    without quota that borrows: the top of the range), the borrowed share of what its team holds, and its team's
    fair-share rank among the teams with demand (0 first, 1 last)."""
    if tenancy is None:
        return NO_TEAM_JOB
    team = tenancy.of(job.spec)
    if team.quota_gpus > EPS:
        over = team.borrowed_gpus / team.quota_gpus
    else:
        over = OBS_HIGH if team.borrowed_gpus > EPS else 0.0
    return (
        0.0 if job.id in tenancy.within_quota else 1.0,
        1.0 if job.id in tenancy.swaps else 0.0,
        over,
        team.borrowed_gpus / team.in_use_gpus if team.in_use_gpus > EPS else 0.0,
        team.rank,
    )


def job_features(view: ClusterView, sizes: SizeDistribution, job: Job, now: float, level: int,
                 heads: Sequence[str], victims: Sequence[Job], priorities: Priorities | None = None,
                 given: float | None = None) -> np.ndarray:
    """`given`: the GPUs the victims give back, where they are shrunk instead of preempted (a SHRINK slot)."""
    spec = job.submitted or job.spec
    prof = view.profile(spec)
    attained = view.attained_gpu_s(job)
    victim_gpus = sum(v.spec.gpu_demand for v in victims) if given is None else given
    victim_service = sum(view.attained_gpu_s(v) for v in victims)
    return np.array([
        1.0,
        *(1.0 if o in heads else 0.0 for o in ORDERS),
        math.log2(spec.workers) / 4.0,
        spec.share,
        1.0 if spec.kind is JobKind.INFERENCE else 0.0,
        math.log10(1.0 + prof.grad_mb * spec.compression) / 2.0,
        math.log1p(max(0.0, now - job.queued_since) / 60.0) / 4.0,
        math.log1p(attained / 3600.0) / 4.0,
        level / len(FINE_THRESHOLDS),
        # The index is a completion rate (per GPU-second): its log, shifted so typical values land in [0, 8].
        (math.log10(max(sizes.index(attained, spec), 1e-12)) + 9.0) / 2.0,
        math.log1p(sizes.expected_remaining(attained, spec) / 3600.0) / 4.0,
        victim_gpus / spec.gpu_demand,
        math.log1p(victim_service / 3600.0) / 4.0,
        1.0 if victims else 0.0,
        *team_job_features(view.tenancy, job),
        *(priorities.job(spec) if priorities is not None else (0.0, 0.0)),
        *job_size_features(job),
    ], dtype=np.float32)


def candidate_features(view: ClusterView, job: Job, placement: Placement, pred: Prediction,
                       partial_fit: bool, base: int | None = None) -> np.ndarray:
    """`partial_fit`: some partly used node could hold the whole gang (so breaking into a free node is a choice).
    `base`: the size the placement's is weighed against (`rl_elastic.size_features`), by default the job's own."""
    spec = at_size(job.spec, placement)
    c = view.cluster
    nodes = placement.nodes(c)
    fewest = -(-spec.workers // c.max_gpus_per_node)
    nic_load = float(np.max(np.asarray(view.link_load)[c.nics_of(nodes)]))
    breaks_node = partial_fit and any(view.node_free[n] == c.node_num_gpus[n] for n in nodes)
    first = placement.gpus[0]
    stranded = (1.0 - spec.share) if spec.num_gpus < 1 and view.free_share[first] >= 1.0 - EPS else 0.0
    tenants = sum(len(view.tenants(g)) for g in placement.gpus) / len(placement.gpus)
    racks_beyond = 0
    if c.fabric is not None:  # without one, racks are only the old aggregate uplinks: encoding 6's view
        racks_beyond = len(set(c.node_rack[nodes].tolist())) - -(-spec.workers // c.max_rack_gpus)
    return np.array([
        1.0,
        # Clipped before the log: a prediction can be huge (a service far over its SLO) or, fuzzed, not finite.
        math.log(min(max(pred.slowdown, 1e-3), 1e3)) + 1.0,
        min(pred.others_added, 1e3) / spec.gpu_demand,
        (len(nodes) - fewest) / 4.0,
        min(nic_load, 1e3),
        1.0 if breaks_node else 0.0,
        stranded,
        tenants / 4.0,
        racks_beyond / 4.0,
        min(pred.fabric_load, 1e3),
        *size_features(view, job.submitted or job.spec, job.spec.workers if base is None else base, spec.workers),
    ], dtype=np.float32)


def at_size(spec: JobSpec, placement: Placement) -> JobSpec:
    """`spec` at the size of `placement` (an elastic job's candidates come at several sizes)."""
    k = len(placement.gpus)
    return spec if k == spec.workers or spec.num_gpus < 1 else sized(spec, k)


# ---- the decision point ---------------------------------------------------------------------------------------------


Choice = tuple[list[Placement], list[Prediction], list[Job]]  # candidates, their predictions, victims

@dataclass(frozen=True)
class _Unscored:
    """Candidates whose predictions are still to be computed (`ClusterView.predict_later`)."""

    candidates: list[Placement]
    predictions: list[Callable[[], Prediction]]


class _Fitting:
    """A job that fits on free capacity, asked by a preemption order, which passes over it: no prediction made."""


FITTING = _Fitting()
_UNASKED = object()  # (`_Frame._passing`: a class not asked yet on this plan)


class _Frame:
    """One decision point's working state: the planner, and which jobs can start (with which victims)."""

    def __init__(self, view: ClusterView, preempt: bool, queues: Gittins, queue: Sequence[Job],
                 demands: np.ndarray, lowest: float) -> None:
        """`demands`: the queue's GPU demands, `lowest` its lowest priority (`_orders` reads them)."""
        self.view = view
        # Who else would take GPUs a preemption frees beyond its job's need.
        self.pending = PendingDemands(lambda: demands)
        self.queues = queues
        self.planner = Planner(view)
        self.preempt = preempt and bool(view.running)
        # Some running job is protected by the priority rules (`scheduler.core.priorities`): not preemptible, or of
        # a higher priority than some pending job. Checked once; without priorities no victim is filtered.
        self._running: tuple[Sequence[Job], np.ndarray, np.ndarray] | None = None  # jobs, attained, submit
        self.protected = False
        if self.preempt:  # over `running_service`'s index (its columns), not a loop over the running jobs
            self._running = running_service(view)
            index = running_index(view)
            alive = index.alive
            self.protected = bool((index.pinned[alive] | (index.priority[alive] > lowest)).any())
        self._by_ladder: dict[tuple[float, ...] | str, tuple[np.ndarray, np.ndarray]] = {}  # levels, order
        self._by_submit: np.ndarray | None = None  # the running jobs, latest arrival first (`_ranked`)
        # Smallest demand that found no victims, per ladder, queue and (inside the tenancy frame) which victims the
        # job may take (`_may_take`).
        self._no_victims_from: dict[tuple[tuple[float, ...] | str, int, tuple[str, bool], int, bool,
                                          Constraints | None], float] = {}
        self.scanned = 0  # preemption attempts at this decision point (bounded by PREEMPT_SCAN per order)
        self._lowest: float | None = None  # the lowest priority a running job may be preempted at (`compactness`)
        # Jobs waiting for compact room (`policies.compactness`) with free GPUs enough to start spread, and when their
        # waits end: offered only placements on the fewest servers, and not preempted for.
        self.held: dict[int, float] = {}
        self._predicted: dict[tuple[int, Placement], Prediction] = {}  # `_scored`'s, by job id and placement
        # What `fits` without a prediction found for jobs alike (`_passing`), while the plan is unchanged: FITTING or
        # None. A deep queue holds many jobs alike, and the preemption orders ask each one they pass.
        self._passed: dict[FitKey, _Fitting | None] = {}
        self._passed_at = -1  # the plan's `changes` when `_passed` was filled

    def _waits_until(self, spec: JobSpec) -> float | None:
        """When `spec`'s compactness wait ends if it waits now (`policies.compactness`), else None. Only on a fabric
        (`Cluster.fabric`), whose tiers the model prices a spread by: elsewhere the frame is encoding 7's as it was."""
        if spec.num_gpus < 1 or self.view.cluster.fabric is None:
            return None
        if self._lowest is None:
            self._lowest = lowest_preemptible(self.view)
        return COMPACTNESS.until(self.view, spec, self._lowest)

    def scored(self, job: Job, cands: list[Placement], victims: list[Job]) -> Choice:
        # The prediction counts the victims' contention still (the view does not know they would leave), which
        # errs on the side of caution. So it depends on the job and the placement alone while the decision point
        # lasts (the model does not change in it), and the ladders' preemption slots, which often pick the same job
        # and victims, predict each placement once: on a queue of big gangs that wait for room (none is preempted
        # for), these predictions were much of a decision's time, and many of them repeats.
        preds = []
        for p in cands:
            key = (job.id, p)
            if key not in self._predicted:
                self._predicted[key] = self.view.predict(at_size(job.spec, p), p)
            preds.append(self._predicted[key])
        keep = keep_per_size(cands, preds, MAX_CANDIDATES, non_dominated)
        return [cands[i] for i in keep], [preds[i] for i in keep], victims

    def fits(self, job: Job, predict: bool = True) -> Choice | _Unscored | _Fitting | None:
        """The job's non-dominated candidate placements on free capacity (`chosen` makes them a Choice), or None if
        it fits nowhere now; without `predict`, FITTING where it fits (for an order that only passes over it). An
        elastic job fits where its smallest size does, and is offered several sizes (`rl_elastic.start_sizes`)."""
        spec = least(job.spec)
        if not self.planner.may_fit(spec):
            return None
        until = self._waits_until(spec)
        if until is None and not predict:
            return self._passing(spec)
        if until is not None:
            cands = COMPACTNESS.candidates(self.planner, spec)
            if not cands and self.planner.fits_once_freed(spec, ()):
                self.held[job.id] = until  # it could start spread: it waits for the fewest servers instead
        elif spec is not job.spec and predict:
            cands = [p for k in start_sizes(self.view, self.planner, job)
                     for p in self.planner.candidates(sized(job.spec, k))]
        else:
            cands = self.planner.candidates(spec)
        # Predicted only if the job heads an order: the preemption orders ask whether each job they pass fits, and
        # on a cluster with room for many, predicting all of their candidates was most of the slowest decisions.
        if not cands:
            return None
        if not predict:  # (held for compact room: its candidates are its own)
            return FITTING
        return _Unscored(cands, [self.view.predict_later(at_size(job.spec, p), p) for p in cands])

    def _passing(self, spec: JobSpec) -> _Fitting | None:
        """`fits` without a prediction for a job that does not wait for compact room: FITTING or None, from whether
        the plan has room (`Planner.has_room`, no placement searched). Jobs alike in what that reads (`fit_key`) fit
        or not together, so each class is asked once per plan."""
        if self._passed_at != self.planner.changes:
            self._passed.clear()
            self._passed_at = self.planner.changes
        key = fit_key(self.view, spec)
        found = self._passed.get(key, _UNASKED)
        if found is _UNASKED:
            found = self._passed[key] = FITTING if self.planner.has_room(spec) else None
        return found  # type: ignore[return-value]

    @staticmethod
    def chosen(fit: Choice | _Unscored) -> Choice:
        if isinstance(fit, _Unscored):
            preds = [later() for later in fit.predictions]
            keep = keep_per_size(fit.candidates, preds, MAX_CANDIDATES, non_dominated)
            return [fit.candidates[i] for i in keep], [preds[i] for i in keep], []
        return fit

    def _may_take(self, job: Job) -> tuple[Callable[[Job], bool] | None, tuple[str, bool]]:
        """Which running jobs `job` may preempt inside the tenancy frame (None: any), as the frame keeps them: its
        own team's, or, for a job within its team's quota and not in a swap, those of teams that borrow. A slot
        whose preemption the frame would drop would be an action that does nothing. With the key that names that
        set of victims."""
        tenancy = self.view.tenancy
        if tenancy is None:
            return None, ("", True)
        mine = tenancy.of(job.spec).name
        within = job.id in tenancy.within_quota and not tenancy.swap_call
        if not within:
            return (lambda v: tenancy.of(v.spec).name == mine), (mine, False)

        def may(v: Job) -> bool:
            theirs = tenancy.of(v.spec)
            return theirs.name == mine or theirs.borrowed_gpus > EPS

        return may, (mine, True)

    def level(self, job: Job, ladder: tuple[float, ...] | str) -> int:
        if ladder == GITTINS:
            return self.queues.level_and_next(job.spec, self.view.attained_gpu_s(job))[0]
        return las_level(self.view.attained_gpu_s(job), ladder)  # type: ignore[arg-type]

    def _ranked(self, ladder: tuple[float, ...] | str) -> tuple[np.ndarray, np.ndarray]:
        """Running jobs lowest priority first (highest queue, then latest arrival), as indices into
        `running_service`'s jobs, and their queues in that order."""
        if ladder not in self._by_ladder:
            if self._running is None:
                self._running = running_service(self.view)
            _, attained, submit = self._running
            if ladder == GITTINS:
                levels = gittins_levels(self.view, self.queues)
            else:
                levels = np.searchsorted(np.asarray(ladder), attained, side="right")
            # A job started at this instant is nobody's victim at it: with three ladders, a job preempted by one
            # rule may outrank its preemptor by another, and the two would preempt each other back and forth
            # without the clock moving (seen with a first-valid-action policy).
            levels = np.where(started_now(self.view), -1, levels)
            # Level descending, then submit descending (then position): the arrival order, sorted once for every
            # ladder, sorted again by level (stably), is `np.lexsort((-submit, -levels))`'s, for less.
            if self._by_submit is None:
                self._by_submit = np.argsort(-submit, kind="stable")
            order = self._by_submit[np.argsort(-levels[self._by_submit], kind="stable")]
            self._by_ladder[ladder] = levels[order], order
        return self._by_ladder[ladder]

    def top_level(self, ladder: tuple[float, ...] | str) -> int:
        """The lowest-priority queue a running job is in under `ladder` (-1: only jobs started at this instant)."""
        return int(self._ranked(ladder)[0][0])

    def preempting(self, job: Job, ladder: tuple[float, ...] | str) -> Choice | None:
        """Candidates once running jobs of strictly lower-priority queues (of attained service under the thresholds
        `ladder`, or of Gittins rank) are preempted, chosen by `pick_victims` (Tiresias' order, never freeing GPUs
        that neither the job nor the rest of the queue would take where fewer would do); None if no such set makes
        room."""
        if not self.preempt or job.id in self.held:
            return None
        view, planner, spec = self.view, self.planner, least(job.spec)  # (an elastic job: at its smallest size)
        level = self.level(job, ladder)
        levels, order = self._ranked(ladder)
        if levels[0] <= level:  # (levels descending) no running job is in a lower-priority queue: no victims
            return None
        may_take, whose = self._may_take(job)
        if self.protected:  # the priority rules: never a higher priority, never a non-preemptible job
            frame_take = may_take
            may_take = (lambda v: may_preempt(v.spec, spec, equals=True)) if frame_take is None else (
                lambda v: may_preempt(v.spec, spec, equals=True) and frame_take(v))
        waits = self._waits_until(spec) is not None
        key = (ladder, level, whose, spec.priority, waits, spec.constraints)  # (constrained: fewer victims help)
        if spec.num_gpus >= self._no_victims_from.get(key, math.inf):
            return None
        count = int(np.count_nonzero(levels > level))
        running = self._running[0]  # type: ignore[index]
        # Lazily: Tiresias' rule stops at the first victims that make room, usually a handful of thousands (it reads
        # on only when those would free more GPUs than the job lacks).
        ranked = (running[k] for k in order[:count])
        # Waiting for compact room, victims make room only where they free the fewest servers.
        fits = (lambda vs: COMPACTNESS.room(planner, spec, vs)) if waits else None
        victims = pick_victims(view, planner, spec, filter(may_take, ranked) if may_take else ranked,
                               self.pending, fits) if count else []
        if not victims:
            # Within a level (and a set of teams it may take from) victims are the same set, so a larger demand finds
            # none either.
            self._no_victims_from[key] = spec.num_gpus
            return None
        # On a scratch plan: this one stays as it is, since other jobs' candidates must not count these GPUs. Waiting
        # for compact room, it is offered only the fewest servers, freed or not.
        freed = planner.without(victims)
        cands = COMPACTNESS.candidates(freed, spec) if waits else freed.candidates(spec)
        return self.scored(job, cands, victims) if cands else None  # none: fragmentation, preempting won't help


# The last queue's rows (`policies.rl_rows`), per size distribution.
_SIZE_KEYS: weakref.WeakKeyDictionary[SizeDistribution, QueueRows] = weakref.WeakKeyDictionary()


def _orders(view: ClusterView, sizes: SizeDistribution,
            jobs: list[Job]) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Each order as indices into `jobs` (which are in arrival order, so a stable sort breaks ties by arrival), and
    each job's GPUs (`num_gpus`; an elastic job's smallest size), priority, class (`policies.rl_scan`; columns
    without and with the user) and attained service; and the share of the jobs that are elastic."""
    n = len(jobs)
    rows = _SIZE_KEYS.get(sizes)
    if rows is None:
        rows = _SIZE_KEYS[sizes] = QueueRows()
    table = rows.rows(sizes, jobs)
    attained, index, remaining, demand, num, priority = table[:, :6].T
    coarse = np.argsort(np.searchsorted(np.asarray(THRESHOLDS), attained, side="right"), kind="stable")
    gittins = np.argsort(-index, kind="stable")
    fine = np.argsort(np.searchsorted(np.asarray(FINE_THRESHOLDS), attained, side="right"), kind="stable")
    return {
        "las": coarse,
        "las-fine": fine,
        "gittins": gittins,
        "remaining": np.argsort(remaining, kind="stable"),  # already GPU-seconds
        "fifo": np.arange(n),
        "smallest": np.argsort(demand, kind="stable"),
        "preempt-las": coarse,
        "preempt-fine": fine,
        "preempt-gittins": gittins,
    }, num, priority, table[:, 6:8].astype(np.intp), attained, float(table[:, 8].mean())


_QUEUES: weakref.WeakKeyDictionary[SizeDistribution, Gittins] = weakref.WeakKeyDictionary()


def _gittins_queues(sizes: SizeDistribution) -> Gittins:
    """Gittins' queue rule for these sizes (the `gittins` policy's own, so its preemptions are actions here)."""
    if sizes not in _QUEUES:
        _QUEUES[sizes] = Gittins(sizes=sizes)
    return _QUEUES[sizes]


def decision_point(
    view: ClusterView, queue: Collection[Job], now: float, sizes: SizeDistribution | None = None,
    preempt: bool = True, held: dict[int, float] | None = None,
) -> DecisionPoint | None:
    """The agent's choice at this instant, or None if no pending job can start (even by preempting or shrinking) and
    no running elastic job may grow.

    `queue` holds the pending jobs in arrival order. Waiting is not offered on an idle cluster: nothing would ever
    change. `held`, if given, receives the jobs the frame held for compact room (of those it looked at), each with
    when its wait ends.
    """
    jobs = list(queue)
    if not jobs and not view.growable:
        return None
    sizes = sizes or default_sizes()
    swap_call = view.tenancy is not None and view.tenancy.swap_call
    if jobs:
        orders, num, priority, classes, attained, elastic_share = _orders(view, sizes, jobs)
        frame = _Frame(view, preempt, _gittins_queues(sizes), jobs, num, float(priority.min()))
        heads, fits, refused = _start_heads(frame, jobs, orders, num, classes, attained, swap_call)
        top: float | None = float(priority.max())
    else:
        frame = _Frame(view, False, _gittins_queues(sizes), jobs, np.zeros(0), 0.0)
        heads, fits, refused, orders, num, elastic_share, top = {}, {}, np.zeros(0, bool), {}, np.zeros(0), 0.0, None
    if held is not None:
        held.update(frame.held)
    slots_of: dict[str, Filled] = {name: Filled(jobs[i], *choice) for name, (i, choice) in heads.items()}
    if view.elastic and not swap_call:
        slots_of.update(resize_slots(frame, sizes, jobs, orders["gittins"] if jobs else None, fits, refused, now,
                                     MAX_CANDIDATES))
    if not slots_of:
        return None
    headed: dict[int, list[str]] = {}
    for name, held_by in slots_of.items():
        if held_by.kind != GROW:
            headed.setdefault(held_by.job.id, []).append(name)
    c = view.cluster
    partial: dict[int, bool] = {}
    # (The frame synced the running index at this instant where it may preempt, so there are running jobs.)
    prio = Priorities(view, jobs, top=top, index=running_index(view) if frame.preempt else None)
    obs = np.zeros(OBS_SIZE, dtype=np.float32)
    mask = np.zeros(N_ACTIONS, dtype=bool)
    slots: list[JobSlot | None] = []
    for j, name in enumerate(ORDERS):
        filled = slots_of.get(name)
        if filled is None:
            slots.append(None)
            continue
        job, cands, preds, victims = filled.job, filled.candidates, filled.predictions, filled.victims
        level = las_level(view.attained_gpu_s(job), FINE_THRESHOLDS)
        base = j * SLOT_SIZE
        obs[base:base + JOB_FEATURES] = job_features(
            view, sizes, job, now, level, headed.get(job.id, [name]), victims, prio,
            given=sum(v.spec.workers - len(r.placement.gpus) for v, r in zip(victims, filled.resizes, strict=True))
            if filled.resizes else None)
        workers = least(job.spec).workers
        if workers not in partial:
            node_free = frame.planner.node_free
            partial[workers] = job.spec.num_gpus >= 1 and bool(
                np.any((node_free >= workers) & (node_free < c.node_num_gpus)))
        for k, (p, pred) in enumerate(zip(cands, preds, strict=False)):
            at = base + JOB_FEATURES + k * CANDIDATE_FEATURES
            obs[at:at + CANDIDATE_FEATURES] = candidate_features(view, job, p, pred, partial[workers])
            mask[j * MAX_CANDIDATES + k] = True
        slots.append(JobSlot(job, cands, tuple(v.id for v in victims) if filled.kind == "start" else (), level,
                             tuple(headed.get(job.id, [name])), tuple(preds), filled.kind, filled.resizes))
    # The queue's summary from `_orders`' columns: the same sum, in the same order, as `queue_summary`'s.
    summary = QueueSummary(len(jobs), float(sum(num.tolist())),
                           float(np.count_nonzero(num < 1)) / len(jobs) if jobs else 0.0)
    obs[MAX_JOBS * SLOT_SIZE:] = cluster_features(view, summary, prio, elastic_share)
    np.nan_to_num(obs, copy=False, nan=OBS_LOW, posinf=OBS_HIGH, neginf=OBS_LOW)
    np.clip(obs, OBS_LOW, OBS_HIGH, out=obs)
    # Waiting declines preemption, a grow or a shrink; it is not offered while a job can start on free GPUs (holding
    # GPUs idle for a better moment lengthened average JCT on both real traces, for contention-greedy and for version
    # 2's agent, and an agent that may idle GPUs can starve the cluster), nor on an idle cluster, where nothing would
    # ever change.
    mask[WAIT] = bool(view.running) and all(slot is None or slot.victims or slot.kind != "start" for slot in slots)
    return DecisionPoint(slots, obs, mask, jobs)


def _start_heads(frame: _Frame, jobs: list[Job], orders: dict[str, np.ndarray], num: np.ndarray, classes: np.ndarray,
                 attained: np.ndarray, swap_call: bool,
                 ) -> tuple[dict[str, tuple[int, Choice]], dict[int, Choice | _Unscored | _Fitting | None], np.ndarray]:
    """The head of each start and preemption order (as an index into `jobs`, with its choice); what the scans found of
    each job they asked (`fits`), and which they passed over without asking (`refused`)."""
    view, planner = frame.view, frame.planner
    # Jobs that fit nowhere, known without a search: `Planner.may_fit` refuses them (and nothing else about them is
    # computed). A whole-GPU job asking for more GPUs than are wholly free stays so for the whole decision point (a
    # preemption is weighed on a scratch plan; the exact test of a GPU share's victims gives them back and takes them
    # again, which restores the count of whole GPUs exactly); a GPU share larger than any GPU has free is refused so
    # until the first preemption is tried (that round trip may move free shares by a rounding error), so that test
    # serves only the orders scanned before it.
    never = (num >= 1) & (num > planner.free_whole)
    not_now = never | ((num < 1) & (num > planner.max_free_share + EPS))
    # fits[i]: job i's candidates on free capacity (None: it fits nowhere), in the order the scans below first ask.
    # `refused[i]` marks jobs the scans passed over by the tests above; they count as asked (None) from then on.
    fits: dict[int, Choice | _Unscored | _Fitting | None] = {}
    refused = never.copy()
    heads: dict[str, tuple[int, Choice]] = {}
    # Offered only as swaps (`scheduler.core.tenancy`), a job starts only by preempting its own team's jobs: the frame
    # would drop a start on free GPUs, so only the preemption slots are offered.
    scan: Scan | None = None  # the preemption orders' (`policies.rl_scan`)
    for name in ORDERS:
        if name in (GROW, SHRINK):
            continue
        ladder = PREEMPT_LADDERS.get(name)
        if ladder is None:
            if swap_call:
                continue
            order = orders[name]
            # The first job in this order that fits: only the jobs not refused are asked, in order, as they were.
            looked = order[~not_now[order]]
            for i in looked.tolist():
                if i not in fits or fits[i] is FITTING:  # (the preemption orders, which leave FITTING, come last)
                    fits[i] = frame.fits(jobs[i])
                if fits[i] is not None:
                    fits[i] = frame.chosen(fits[i])  # type: ignore[arg-type]
                    heads[name] = (i, fits[i])  # type: ignore[assignment]
                    # Every job ahead of it in this order was passed over (the refused ones without asking).
                    refused[order[:int(np.flatnonzero(order == i)[0])]] = True
                    break
            else:
                refused[order] = True
            continue
        if not frame.preempt:
            continue
        if scan is None:  # what the orders above found: FITS for their heads, NONE for the jobs they refused
            known = np.where(refused, NONE, UNKNOWN).astype(np.int8)
            for i, fit in fits.items():
                known[i] = NONE if fit is None else FITS
            alone = (num >= 1) if view.cluster.fabric is not None else np.zeros(len(jobs), dtype=bool)
            scan = Scan(frame, jobs, known, classes[:, 1 if planner.mps.one_user else 0], alone, swap_call, attained)
        found = scan.head(orders[name], ladder, PREEMPT_SCAN)
        if found is not None:
            heads[name] = found
    return heads, fits, refused


def next_wait_end(view: ClusterView, queue: Collection[Job], now: float) -> float | None:
    """When the next compactness wait (`policies.compactness`) of a pending job that has free GPUs enough to start
    spread ends: from then it may, a wake-up time. (A job without them starts only once a run ends, which wakes the
    policy anyway.)"""
    c, free = view.cluster, view.free_whole
    if c.fabric is None:
        return None
    ends = (COMPACTNESS.end(c, j.spec) for j in queue if 1 <= j.spec.num_gpus <= free)
    return min((e for e in ends if e is not None and e > now), default=None)


def next_demotion(view: ClusterView, now: float, thresholds: Sequence[float] = FINE_THRESHOLDS,
                  synced: bool = False) -> float | None:
    """When the next running job crosses into a lower-priority queue (and may become a victim): a wake-up time.

    Over `running_service`'s arrays (a loop over the running jobs here was the largest cost of a decision on 2,048
    GPUs). `now` is the view's clock. `synced`: the running index was synced at this instant with nothing changed
    since (a decision point was just built), so it is read as it is."""
    if not view.running:
        return None
    attained = synced_attained(view) if synced else running_service(view)[1]
    index = running_index(view)
    rate = index.rate[np.flatnonzero(index.alive)]
    th = np.asarray(thresholds, dtype=float)
    level = np.searchsorted(th, attained, side="right")
    crossing = level < len(th)
    if not crossing.any():
        return None
    best = float(np.min(now + (th[level[crossing]] - attained[crossing]) / rate[crossing]))
    # At least a second ahead: a job a rounding error short of its threshold would otherwise ask for wake-ups a
    # microsecond apart, forever.
    return max(best, now + 1.0)
