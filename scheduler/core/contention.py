"""Predicted slowdown of every running job for a set of placements: MPS co-location plus network sharing.

A job's iteration on its placement takes

    compute * mps + max(0, comm - overlap * compute * mps)

* `compute` is its profile's V100 compute time divided by the speed of its slowest GPU (synchronous data parallelism
  runs at the pace of the slowest worker).
* `mps` is the slowdown from the other tenants of its GPUs (the worst of its GPUs). Two effects multiply:
  - capacity: SM and memory bandwidth are shared max-min fairly among the tenants' demands (SM demand capped by each
    tenant's MPS thread percentage, i.e. its share); a tenant slows by demand / allocation of the scarcer resource;
  - interference: a tenant whose kernels lean on memory bandwidth (`membw`) loses a further `mps_interference *
    membw * sum of the other tenants' SM demand` (caches and DRAM pages thrashed, kernels of different contexts
    serialised). Gavel's V100 co-location pairs show this term dominates: two heavy tenants can each keep well under
    half of their isolated speed, which fair sharing alone cannot produce.
  - plus `mps_overhead` per extra tenant (context switching);
  - and, alone or not, a tenant whose SM demand exceeds its thread percentage runs `(sm / share) **
    mps_share_cap` times slower: the cap takes SMs it would use. Measured on an H200 (docs/contention-model.md, "Hopper
    fit"), a job at 25% of the SMs keeps 0.37 to 0.89 of its whole-GPU speed. The V100 fit has no capped runs to
    learn this from, so its default exponent is 0 (off) and the published calibration is unchanged.
* `comm` is the time its collective traffic needs on its bottleneck link. Gradients are all-reduced hierarchically: a
  ring inside each node (over NVLink ports, or through the PCIe switches and the CPU-socket link), then a ring across
  the job's nodes through their NICs, and across racks through the rack uplinks. Inter-server links (NICs, uplinks)
  run below line rate for a ring over many servers: a synchronous ring step waits for its slowest hop, so a job whose
  ring spans k servers sees `1 + ring_straggler * (k - 2)` times its two-server transfer time there (DeepShare's
  isolated runs: spreading an 8-GPU job from 2 to 8 servers costs communication-heavy models far more than the
  2(k-1)/k volume growth alone). A link is shared with the jobs whose traffic crosses it: job j sees its isolated time
  on the link stretched by `1 + sum of the other jobs' duty cycles` on that link, the time-averaged form of max-min
  fair sharing between flows that are active part of the time.

The slowdown reported for a job is its iteration time divided by its *reference* iteration time: alone on the cluster,
packed on as few nodes as possible, on the cluster's reference GPU. A spread job therefore shows the spread penalty
even when it is alone. Everything is incremental: adding or removing a job recomputes only the jobs that share a link
or a GPU with it. The constants in `ContentionParams` and the profiles in the catalog are fitted by
`python -m scheduler.core.calibrate` (DeepShare and Gavel measurements; see docs/contention-model.md, the fit report).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from scheduler.core.collectives import collective_flows
from scheduler.core.generic import known_profiles
from scheduler.core.model import INTER_SERVER, Cluster, JobSpec, Placement
from scheduler.core.workloads import ModelProfile


@dataclass(frozen=True, slots=True)
class ContentionParams:
    """Model constants; the defaults are the values `python -m scheduler.core.calibrate` fits (docs/contention-model.md
    has the fit report)."""

    mps_overhead: float = 0.0  # per extra tenant on a GPU (context switching); the fit puts it all in interference
    mps_interference: float = 8.7  # slowdown per unit of (own membw x co-tenants' SM demand) on a shared GPU
    ring_straggler: float = 0.0324  # inter-server transfer time grows by this per server beyond two in a job's ring
    mps_share_cap: float = 0.0  # exponent of the thread-percentage cap's slowdown (sm / share) when share < sm


@dataclass(frozen=True, slots=True)
class Footprint:
    """What one placed job puts on the cluster and how fast it runs alone there."""

    gpus: tuple[int, ...]
    share: float
    links: np.ndarray  # [k] link ids its collective traffic crosses
    link_time: np.ndarray  # [k] seconds per iteration its traffic needs on each link alone
    duty: np.ndarray  # [k] fraction of its isolated iteration each link is busy with its traffic
    compute_s: float  # per-iteration compute alone on these GPUs
    overlap: float
    ref_iter_s: float  # reference iteration time (alone, packed, reference GPU)
    sm: float
    membw: float
    sm_demand: float  # SM demand on each of its GPUs: min(sm, share), the MPS thread percentage caps it
    by_link: dict[int, tuple[float, float]]  # link -> (link_time, duty), as Python floats (`ContentionModel._moved`)


@dataclass(frozen=True, slots=True)
class Prediction:
    """What placing a job would do: its own slowdown and the new slowdown of every job it would touch."""

    slowdown: float
    others_before: dict[int, float]
    others_after: dict[int, float]
    fabric_load: float = 0.0  # the busiest fabric link its traffic would cross: the other jobs' duty cycles summed

    @property
    def others_added(self) -> float:
        """Total extra slowdown inflicted on the jobs it joins (sum over them of after - before)."""
        return sum(self.others_after[j] - self.others_before[j] for j in self.others_after)


FOOTPRINT_CACHE = 1024  # expected footprints kept (`ContentionModel.footprint`); all dropped when full
_NO_LINKS = np.zeros(0, dtype=np.int64)
_NO_TIMES = np.zeros(0, dtype=np.float64)
_NO_LINKS.flags.writeable = False
_NO_TIMES.flags.writeable = False
_PROBE = -1  # the job id a prediction places and takes off again


def _water_fill(demands: list[float]) -> list[float]:
    """Max-min fair split of a capacity of 1 among demands."""
    n = len(demands)
    alloc = [0.0] * n
    remaining = 1.0
    for rank, i in enumerate(sorted(range(n), key=demands.__getitem__)):
        give = min(demands[i], remaining / (n - rank))
        alloc[i] = give
        remaining -= give
    return alloc


class ContentionModel:
    """Tracks running jobs' placements and predicts each one's slowdown; shared by simulator, env and controller."""

    def __init__(
        self,
        cluster: Cluster,
        profiles: Mapping[str, ModelProfile] | None = None,
        params: ContentionParams | None = None,
        enabled: bool = True,
        hashed_flows: bool = False,
    ) -> None:
        self.cluster = cluster
        # True (the simulator): a placed job's fabric flows take the links ECMP hashes them to, by job id; False (the
        # live controller, which cannot see the switches' hashes): the expected spread. Predictions are expected.
        self.hashed_flows = hashed_flows
        self.profiles = profiles if profiles is not None else known_profiles()
        self.params = params or ContentionParams()
        self.enabled = enabled
        self._cap = cluster.link_capacity
        # 1.0 on inter-server links (NICs, rack uplinks), 0.0 inside servers: where the ring-straggler term applies
        self._inter = np.array([k in INTER_SERVER for k in cluster.link_kind], dtype=np.float64)
        self._load = np.zeros(cluster.num_links)  # sum of duty cycles of the jobs crossing each link
        self._link_jobs: dict[int, set[int]] = {}
        self._gpu_jobs: dict[int, list[int]] = {}
        self._fp: dict[int, Footprint] = {}
        self._slowdown: dict[int, float] = {}
        # Per job, its GPUs' term (MPS tenancy and the share cap): a function of its GPUs' tenants alone, so it stays
        # valid until a tenant joins or leaves one of them (`_add`, `_remove` drop it then). A job whose traffic
        # shares a link with a change needs only its links' term again: on a large fabric, most jobs a placement
        # touches are such, and recomputing every GPU's tenancy for each was most of a prediction's cost.
        self._mps: dict[int, float] = {}
        # Per job, its communication time and the link that sets it (its bottleneck, -1 without links), and the jobs
        # whose communication hides under their compute (comm <= overlap * compute * mps: the iteration is their
        # compute alone), as last computed. With them a change of load passes over, exactly, the jobs it cannot slow
        # or speed (`_moved`, `_stale`): on a busy cluster ~90% of the jobs sharing a link with a start or an end.
        self._neck: dict[int, tuple[float, int]] = {}
        self._hidden: set[int] = set()
        # A GPU's tenants (in order) -> their slowdowns there: valid until the next add or remove. A gang probed on
        # another gang's GPUs (a preemption's candidate, before its victims leave) shares hundreds of GPUs with the
        # same tenants; one water-fill serves them all.
        self._shared: dict[tuple[int, ...], list[float]] = {}
        self._ref_cache: dict[tuple[str, int, float], float] = {}
        # Expected footprints by (model, compression, workers, GPUs, share): a scheduler weighs the same candidate
        # placements of a pending job at decision after decision, and a large gang's flows over a fabric cost the
        # most of a prediction to trace.
        self._fp_cache: dict[tuple[str, float, int, tuple[int, ...], float], Footprint] = {}
        self._changes = 0  # placements added or removed so far (`predict_later` checks the model did not change)
        # Finished predictions by footprint key, valid while `_changes` stays at `_predicted_at` (`predict_later`): a
        # deep queue's preemption slots weigh the same placements at decision after decision between two changes.
        self._predicted: dict[tuple[str, float, int, tuple[int, ...], float], Prediction] = {}
        self._predicted_at = -1
        self._tiers: np.ndarray | None = None  # per link, its fabric tier (`_link_tiers`)

    # ---- read side -------------------------------------------------------------------------------------------------

    @property
    def link_load(self) -> np.ndarray:
        """Sum of duty cycles per link (1.0 = one job's worth of saturating traffic). Read-only view."""
        view = self._load.view()
        view.flags.writeable = False
        return view

    def link_jobs(self, link: int) -> tuple[int, ...]:
        """The jobs whose collective traffic crosses `link`."""
        return tuple(sorted(self._link_jobs.get(link, ())))

    def slowdown(self, job_id: int) -> float:
        return self._slowdown[job_id]

    def slowdowns(self) -> dict[int, float]:
        return dict(self._slowdown)

    def tenants(self, gpu: int) -> list[int]:
        return list(self._gpu_jobs.get(gpu, ()))

    # ---- footprints ------------------------------------------------------------------------------------------------

    def _iteration(self, compute_s: float, overlap: float, comm_s: float, mps: float = 1.0) -> float:
        c = compute_s * mps
        return c + max(0.0, comm_s - overlap * c)

    def _link_times(self, gpus: Iterable[int], grad_gb: float, flow_key: int | None = None,
                    ideal: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Links a job's collective traffic crosses, the seconds per iteration it needs on each alone (with the
        expected ECMP collisions unless `ideal` or its flows are hashed by `flow_key`), and the seconds its bytes keep
        each busy (what other jobs on the link see: the same but for the expected collisions)."""
        gpus = list(gpus)
        traffic, stretch = collective_flows(self.cluster, gpus, grad_gb, flow_key)
        if not traffic:
            return _NO_LINKS, _NO_TIMES, _NO_TIMES
        links = np.fromiter(traffic.keys(), dtype=np.int64, count=len(traffic))
        link_time = np.fromiter(traffic.values(), dtype=np.float64, count=len(traffic)) / self._cap[links]
        straggler = self.params.ring_straggler
        if straggler:
            servers = len({int(self.cluster.gpu_node[g]) for g in gpus})
            if servers > 2:
                link_time *= 1.0 + straggler * (servers - 2) * self._inter[links]
        if not stretch or ideal:
            return links, link_time, link_time
        factor = np.fromiter((stretch.get(link, 1.0) for link in traffic), dtype=np.float64, count=len(traffic))
        return links, link_time * factor, link_time

    def reference_iteration(self, spec: JobSpec) -> float:
        """Iteration time alone, packed on as few nodes as possible, on the reference GPU, its flows spread perfectly
        over the fabric's links (ECMP collisions, its own included, count as contention)."""
        key = (spec.model, spec.workers, spec.compression)
        cached = self._ref_cache.get(key)
        if cached is not None:
            return cached
        prof = self.profiles[spec.model]
        compute = prof.compute_ms / 1000.0 / self.cluster.reference_speed
        comm = 0.0
        if spec.workers > 1 and spec.workers <= self.cluster.num_gpus:
            # GPUs of a node are contiguous, so the first `workers` GPUs are the tightest packing of the first group.
            _links, link_time, _busy = self._link_times(range(spec.workers), prof.grad_gb * spec.compression,
                                                        ideal=True)
            comm = float(link_time.max()) if link_time.size else 0.0
        ref = self._iteration(compute, prof.overlap, comm)
        self._ref_cache[key] = ref
        return ref

    def footprint(self, spec: JobSpec, placement: Placement, flow_key: int | None = None) -> Footprint:
        """What `spec` on `placement` puts on the cluster: with `flow_key`, its fabric flows hashed by it (the world
        the simulator plays); without, the expected spread and collision cost (what a scheduler can predict)."""
        gpus = tuple(placement.gpus)
        key = None
        if flow_key is None:  # the expected footprint is a function of these alone
            key = (spec.model, spec.compression, spec.workers, gpus, placement.share)
            cached = self._fp_cache.get(key)
            if cached is not None:
                return cached
        prof = self.profiles[spec.model]
        speed = float(min(self.cluster.gpu_speed[g] for g in gpus))
        compute = prof.compute_ms / 1000.0 / speed
        links, link_time, busy = self._link_times(gpus, prof.grad_gb * spec.compression, flow_key)
        comm = float(link_time.max()) if link_time.size else 0.0
        alone = self._iteration(compute, prof.overlap, comm)
        duty = busy / alone
        fp = Footprint(
            gpus=gpus, share=placement.share, links=links, link_time=link_time, duty=duty,
            compute_s=compute, overlap=prof.overlap, ref_iter_s=self.reference_iteration(spec),
            sm=prof.sm, membw=prof.membw, sm_demand=min(prof.sm, placement.share),
            by_link=dict(zip(links.tolist(), zip(link_time.tolist(), duty.tolist(), strict=True), strict=True)),
        )
        if key is not None:
            for array in (fp.links, fp.link_time, fp.duty):  # shared from now on: nobody may write to them
                array.flags.writeable = False
            if len(self._fp_cache) >= FOOTPRINT_CACHE:
                self._fp_cache.clear()
            self._fp_cache[key] = fp
        return fp

    # ---- incremental updates ----------------------------------------------------------------------------------------

    def add(self, job_id: int, spec: JobSpec, placement: Placement) -> set[int]:
        """Place a job; returns the ids whose slowdown changed (including the job itself)."""
        self._changes += 1
        if not self.enabled:
            self._slowdown[job_id] = 1.0
            return {job_id}
        key = job_id if self.hashed_flows else None
        return self._add(job_id, self.footprint(spec, placement, key))

    def _add(self, job_id: int, fp: Footprint) -> set[int]:
        self._shared.clear()
        self._fp[job_id] = fp
        affected = {job_id}
        self._load[fp.links] += fp.duty  # a footprint's links are distinct: each adds as alone
        link_jobs = self._link_jobs
        raised: dict[int, list[int]] = {}  # job -> the links it shares with this one (their loads just rose)
        links = fp.links.tolist()
        for link in links:
            jobs = link_jobs.setdefault(link, set())
            affected |= jobs
            for j in jobs:
                raised.setdefault(j, []).append(link)
            jobs.add(job_id)
        mps = self._mps
        for g in fp.gpus:
            tenants = self._gpu_jobs.setdefault(g, [])
            for t in tenants:
                mps.pop(t, None)
            affected.update(tenants)
            tenants.append(job_id)
        mps.pop(job_id, None)
        self._slowdown[job_id] = self._compute(job_id)
        loads = dict(zip(links, self._load[fp.links].tolist(), strict=True))
        return self._rerated(self._moved(affected, job_id, raised, loads), {job_id})

    def _moved(self, affected: set[int], job_id: int, raised: dict[int, list[int]],
               loads: dict[int, float]) -> list[int]:
        """The jobs of `affected` (in its order) but `job_id` whose slowdown may have changed now that `job_id` joined
        them, raising the loads on its links to `loads`: those whose MPS term it dropped, and those whose raised
        links (`raised`) may have moved their communication time. Exactly: a job's bottleneck elsewhere and every
        raised link's time still no longer than the bottleneck's, its communication time is what it was; so it is,
        under its compute, if no longer than that (its bottleneck is moved to the raised link then, which `remove`
        reads). One loop for all of them, not a call per job: a spread gang's start touches dozens."""
        mps, necks, fps, hidden = self._mps, self._neck, self._fp, self._hidden
        moved = []
        for j in affected:
            if j == job_id:
                continue
            if j not in mps:
                moved.append(j)
                continue
            shared = raised[j]
            comm, neck = necks[j]
            if neck in shared:
                moved.append(j)
                continue
            by_link = fps[j].by_link
            worst, at = comm, neck
            for link in shared:  # the same operations, in the same order, as `_compute`'s numpy line
                link_time, duty = by_link[link]
                t = link_time * (1.0 + loads[link] - duty)
                if t > worst:
                    worst, at = t, link
            if at == neck:
                continue
            fp = fps[j]
            if j in hidden and worst <= fp.overlap * (fp.compute_s * mps[j]):
                necks[j] = (worst, at)
                continue
            moved.append(j)
        return moved

    def _stale(self, affected: set[int], lowered: set[int]) -> list[int]:
        """The jobs of `affected` (in its order) whose slowdown may have changed now that the loads on `lowered`
        fell: all but those whose MPS term stands and whose communication is either hidden under their compute or
        set by a link whose load did not move (their slowdown stands, exactly)."""
        mps, hidden, necks = self._mps, self._hidden, self._neck
        return [j for j in affected if not (j in mps and (j in hidden or necks[j][1] not in lowered))]

    def remove(self, job_id: int) -> set[int]:
        """Take a job off the cluster; returns the ids of the remaining jobs whose slowdown changed."""
        self._changes += 1
        fp = self._fp.get(job_id)
        affected = self._remove(job_id)
        if fp is None or not affected:
            return set()
        # Every load it leaves falls (a float minus a positive duty never grows): a job whose bottleneck is another
        # link keeps its communication time, and one whose communication hid under its compute stays hidden, at the
        # very slowdown it had; either is passed over, exactly, if its MPS term is unchanged.
        return self._rerated(self._stale(affected, set(fp.links.tolist())), set())

    def _rerated(self, jobs: Iterable[int], changed: set[int]) -> set[int]:
        """Each of `jobs`' slowdown computed again; `changed` with those whose slowdown moved added."""
        slowdown = self._slowdown
        for j in jobs:
            new = self._compute(j)
            if slowdown[j] != new:
                slowdown[j] = new
                changed.add(j)
        return changed

    def _remove(self, job_id: int) -> set[int]:
        self._shared.clear()
        self._slowdown.pop(job_id, None)
        self._mps.pop(job_id, None)
        self._hidden.discard(job_id)
        self._neck.pop(job_id, None)
        fp = self._fp.pop(job_id, None)
        if fp is None:
            return set()
        affected: set[int] = set()
        self._load[fp.links] -= fp.duty
        idle = []
        link_jobs = self._link_jobs
        for link in fp.links.tolist():
            jobs = link_jobs[link]
            jobs.discard(job_id)
            if jobs:
                affected |= jobs
            else:
                idle.append(link)
                del link_jobs[link]
        if idle:  # reset exactly so float drift never accumulates on idle links
            self._load[idle] = 0.0
        for g in fp.gpus:
            tenants = self._gpu_jobs[g]
            tenants.remove(job_id)
            if tenants:
                for t in tenants:
                    self._mps.pop(t, None)
                affected.update(tenants)
            else:
                del self._gpu_jobs[g]
        return affected

    def predict(self, spec: JobSpec, placement: Placement) -> Prediction:
        """What-if: the slowdown `spec` would see on `placement` and what it would do to others. State is unchanged."""
        return self.predict_later(spec, placement)()

    def predict_later(self, spec: JobSpec, placement: Placement) -> Callable[[], Prediction]:
        """The prediction (`predict`), with the costly part (every touched job's new slowdown) deferred: returns a
        function that gives the very Prediction asked for now, as long as no job is added or removed in
        between (it raises otherwise). For callers that weigh many placements and need only a few predictions.

        Asking leaves every number of the model as it was. It does not leave the internal layout of the sets of jobs
        per link as it was (adding the probe may grow a set's table; removing it leaves a dummy slot), so nothing
        reads those sets in their iteration order: the jobs a prediction touches are taken in id order (the order of
        the sum in `others_added`), and the simulator reschedules the jobs a change affects in id order too. So a
        prediction asked or not asked changes nothing that comes after it.
        """
        if not self.enabled:
            same = Prediction(1.0, {}, {})
            return lambda: same
        probe = _PROBE
        fp = self.footprint(spec, placement)
        others: set[int] = set()
        link_jobs = self._link_jobs
        for link in fp.links.tolist():
            jobs = link_jobs.get(link)
            if jobs:
                others |= jobs
        for g in fp.gpus:
            others.update(self._gpu_jobs.get(g, ()))
        before = {j: self._slowdown[j] for j in sorted(others)}
        changes = self._changes
        key = (spec.model, spec.compression, spec.workers, fp.gpus, placement.share)
        if self._predicted_at != changes:
            self._predicted.clear()
            self._predicted_at = changes
        known = self._predicted.get(key)
        if known is not None and known.others_before == before:  # (both in id order)
            return lambda: self._repeated(known, changes)
        fabric_load = 0.0
        if self.cluster.fabric is not None and fp.links.size:
            crossed = fp.links[self._link_tiers()[fp.links] >= 0]
            fabric_load = float(self._load[crossed].max()) if crossed.size else 0.0

        def finish() -> Prediction:
            if self._changes != changes:
                raise RuntimeError("predict_later: the model changed since the prediction was asked for")
            saved_load = self._load[fp.links].copy()
            saved_neck = {j: self._neck[j] for j in others}
            saved_hidden = others & self._hidden
            self._add(probe, fp)
            own = self._slowdown[probe]
            after = {j: self._slowdown[j] for j in before}
            self._remove(probe)
            # Restore bit for bit: add-then-subtract in floating point need not give back the same numbers.
            self._load[fp.links] = saved_load
            self._slowdown.update(before)
            self._neck.update(saved_neck)
            self._hidden -= others
            self._hidden |= saved_hidden
            made = Prediction(own, before, after, fabric_load)
            if self._predicted_at == changes:
                self._predicted[key] = made
            return made

        return finish

    def _repeated(self, known: Prediction, changes: int) -> Prediction:
        """A prediction finished before with no job added or removed since, asked again: the same numbers (a
        function of the model's state, unchanged) and the same jobs touched, so the very Prediction. Finishing it
        again would change nothing: it restores what it touches or empties caches (`_mps`, `_shared`) that recompute
        the same values."""
        if self._changes != changes:
            raise RuntimeError("predict_later: the model changed since the prediction was asked for")
        return known

    # ---- what the fabric costs ---------------------------------------------------------------------------------------

    def fabric_words(self, spec: JobSpec, placement: Placement) -> str:
        """What the fabric's tiers cost `spec` on `placement` if placed now, naming the tier ("spans 3 racks: 1.12x
        from the spine at 3:1"): its predicted iteration over the same without the fabric's links. '' without a
        fabric, or when its traffic climbs no tier."""
        fabric = self.cluster.fabric
        if fabric is None or not self.enabled:
            return ""
        fp = self.footprint(spec, placement)
        tiers = self._link_tiers()[fp.links]
        if not fp.links.size or tiers.max() < 0:
            return ""
        stretched = fp.link_time * (1.0 + self._load[fp.links])
        inside = stretched[tiers < 0]
        with_fabric = self._iteration(fp.compute_s, fp.overlap, float(stretched.max()))
        without = self._iteration(fp.compute_s, fp.overlap, float(inside.max()) if inside.size else 0.0)
        worst = int(tiers[int(np.argmax(np.where(tiers >= 0, stretched, -1.0)))])
        above = "core" if worst > 0 else "spine" if len(fabric.tiers) == 1 else "pod spine"  # where the links lead
        racks = len({int(self.cluster.node_rack[self.cluster.gpu_node[g]]) for g in placement.gpus})
        where = f"spans {racks} racks" if racks > 1 else "crosses rails in its rack"
        return f"{where}: {with_fabric / without:.2f}x from the {above} at {fabric.oversubscription[worst]:g}:1"

    def _link_tiers(self) -> np.ndarray:
        """Per link, the fabric tier whose uplinks or downlinks it is (-1: not a fabric link)."""
        cached = self._tiers
        if cached is None:
            cached = np.full(self.cluster.num_links, -1, dtype=np.int64)
            fabric = self.cluster.fabric
            for t, groups in enumerate(fabric.links if fabric is not None else ()):
                for up, down in groups:
                    cached[up] = t
                    cached[down] = t
            self._tiers = cached
        return cached

    # ---- the model -------------------------------------------------------------------------------------------------

    def share_cap(self, fp: Footprint) -> float:
        """How much slower a tenant runs for its thread percentage alone: (sm / share) ** mps_share_cap when its SM
        demand exceeds its share, else 1 (exactly 1.0 with the default exponent 0)."""
        p = self.params.mps_share_cap
        return (fp.sm / fp.share) ** p if p > 0.0 and fp.share < fp.sm else 1.0

    def gpu_slowdowns(self, tenants: list[int]) -> list[float]:
        """MPS slowdown of each tenant of one GPU, relative to running alone on the whole GPU."""
        fps = [self._fp[t] for t in tenants]
        sm_demand = [fp.sm_demand for fp in fps]
        sm_alloc = _water_fill(sm_demand)
        bw_demand = [fp.membw for fp in fps]
        bw_alloc = _water_fill(bw_demand)
        params = self.params
        overhead = 1.0 + params.mps_overhead * (len(tenants) - 1)
        sm_total = sum(sm_demand)
        return [
            max(d / a if a > 0 else np.inf, b / ba if ba > 0 else np.inf)
            * (1.0 + params.mps_interference * b * (sm_total - d))
            * overhead
            * self.share_cap(fp)
            for d, a, b, ba, fp in zip(sm_demand, sm_alloc, bw_demand, bw_alloc, fps, strict=False)
        ]

    def _compute(self, job_id: int) -> float:
        fp = self._fp[job_id]
        mps = self._mps.get(job_id)
        if mps is None:
            mps = 1.0
            shared = self._shared
            for g in fp.gpus:
                tenants = self._gpu_jobs[g]
                if len(tenants) > 1:  # the tenants' slowdowns include the share cap (each is at least it)
                    key = tuple(tenants)
                    slow = shared.get(key)
                    if slow is None:
                        slow = shared[key] = self.gpu_slowdowns(tenants)
                    mps = max(mps, slow[tenants.index(job_id)])
            mps = self._mps[job_id] = max(mps, self.share_cap(fp))  # alone on a GPU, the cap alone: once a job
        comm, neck = 0.0, -1
        if fp.links.size:
            times = fp.link_time * (1.0 + self._load[fp.links] - fp.duty)
            i = int(times.argmax())
            comm, neck = float(times[i]), int(fp.links[i])
        self._neck[job_id] = (comm, neck)
        c = fp.compute_s * mps
        hidden = fp.overlap * c
        if comm <= hidden:  # `_iteration`'s max(0, comm - overlap * c) is 0: the iteration is c, whatever comm is
            self._hidden.add(job_id)
        else:
            self._hidden.discard(job_id)
        return (c + max(0.0, comm - hidden)) / fp.ref_iter_s
