"""Every policy on small inline clusters keeps the invariants; placement generators pick what they promise."""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import job, small_cluster

from policies import available, make_policy
from policies.placement import Planner
from policies.registry import UnknownPolicyError
from scheduler.core.contention import ContentionModel
from scheduler.core.decisions import Place, Wait
from scheduler.core.model import Cluster, ClusterSpec, Job, JobPhase, NodeGroupSpec, Placement, build_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.traces import synthetic
from scheduler.core.workloads import catalog

HEURISTICS = ["fifo", "fifo-backfill", "sjf", "tiresias", "gandiva", "consolidate", "random", "contention-greedy"]


class CheckedSimulator(Simulator):
    """Re-derives every GPU's tenants from the running jobs after each start and checks the invariants."""

    starts = 0

    def _start(self, job, decision: Place) -> None:
        super()._start(job, decision)
        self.starts += 1
        p = decision.placement
        assert len(p.gpus) == job.spec.workers, "gang must get all its GPUs at once"
        assert len(set(p.gpus)) == len(p.gpus)
        share: dict[int, float] = defaultdict(float)
        mem: dict[int, float] = defaultdict(float)
        for running in self.running.values():
            for g in running.placement.gpus:
                share[g] += running.placement.share
                mem[g] += self.profiles[running.spec.model].mem_gb
        for g, s in share.items():
            assert s <= 1.0 + 1e-9, f"GPU {g} over-committed: shares sum to {s}"
            assert mem[g] <= self.cluster.gpu_mem[g] + 1e-9, f"GPU {g} memory over-committed"
        whole_free = sum(1 for g in range(self.cluster.num_gpus) if share.get(g, 0.0) < 1e-12)
        assert whole_free == self.state.free_whole


def mixed_cluster() -> Cluster:
    return build_cluster(ClusterSpec(name="mixed", nodes_per_rack=2, groups=[
        NodeGroupSpec(preset="dgx-a100", count=1), NodeGroupSpec(preset="pcie-v100", count=2),
        NodeGroupSpec(preset="pcie-t4", count=1)]))


@pytest.mark.parametrize("policy", HEURISTICS)
@pytest.mark.parametrize("cluster_factory", [
    lambda: small_cluster(nodes=2, gpus=4, interconnect="pcie", switches=2),
    mixed_cluster,
], ids=["pcie-2x4", "mixed"])
def test_policy_keeps_invariants_and_finishes_every_job(policy: str, cluster_factory) -> None:
    cluster = cluster_factory()
    trace = synthetic(150, seed=11, mean_interarrival_s=120, frac_share=0.3, inference_share=0.1).jobs
    sim = CheckedSimulator(cluster, trace, make_policy(policy, seed=1))
    result = sim.run()
    accepted = [j for j in result.jobs if j.state is not JobPhase.REJECTED]
    assert all(j.state is JobPhase.DONE for j in accepted)
    assert sim.starts >= len(accepted)
    for j in result.jobs:
        if j.state is JobPhase.REJECTED:
            assert j.spec.workers > cluster.num_gpus and "needs" in j.reject_reason


def test_registry_lists_every_heuristic_and_rejects_unknown_names() -> None:
    assert set(HEURISTICS) <= set(available())
    with pytest.raises(UnknownPolicyError, match="unknown policy 'nope'; choose from .*contention-greedy"):
        make_policy("nope")
    assert make_policy("sjf").oracle and not make_policy("tiresias").oracle


def test_prefixed_names_resolve_through_their_loader() -> None:
    from policies.registry import _PREFIXES, register_prefix

    register_prefix("test-prefix", lambda arg, seed: make_policy(arg, seed))
    try:
        assert make_policy("test-prefix:fifo").name == "fifo"
        assert "test-prefix:NAME" in available()
    finally:
        del _PREFIXES["test-prefix"]


def _planner(cluster: Cluster, busy: dict[int, float] | None = None) -> Planner:
    state = ClusterState(cluster, catalog())
    model = ContentionModel(cluster)
    for i, (g, s) in enumerate((busy or {}).items()):
        spec = job(f"b{i}", 0, min(1, s), 10)
        state.allocate(1000 + i, spec, Placement((g,), spec.share))
        model.add(1000 + i, spec, Placement((g,), spec.share))
    return Planner(ClusterView(state, model, {}))


def test_best_fit_takes_the_tightest_node_and_first_fit_the_first() -> None:
    cluster = small_cluster(nodes=3, gpus=4)
    # node 0: 1 GPU busy (3 free); node 1: 3 busy (1 free); node 2: all free.
    planner = _planner(cluster, {0: 1.0, 4: 1.0, 5: 1.0, 6: 1.0})
    assert planner.consolidated(job("x", 0, 1, 1), "best").gpus == (7,)
    assert planner.consolidated(job("x", 0, 1, 1), "first").gpus == (1,)
    assert planner.consolidated(job("x", 0, 3, 1), "best").gpus == (1, 2, 3)
    assert planner.consolidated(job("x", 0, 3, 1), "worst").gpus == (8, 9, 10)


def test_pcie_nodes_keep_a_gang_under_one_switch_when_possible() -> None:
    cluster = small_cluster(nodes=1, gpus=8, interconnect="pcie", switches=2)
    # GPU 0 busy: switch 0 has 3 free, switch 1 has 4 free; a 4-GPU gang fits only under switch 1.
    planner = _planner(cluster, {0: 1.0})
    assert planner.consolidated(job("x", 0, 4, 1)).gpus == (4, 5, 6, 7)
    assert planner.consolidated(job("x", 0, 2, 1)).gpus == (1, 2)  # best-fitting switch


def test_multi_node_gangs_stay_in_one_rack_when_one_can_hold_them() -> None:
    cluster = small_cluster(nodes=4, gpus=4, nodes_per_rack=2)
    planner = _planner(cluster, {0: 1.0})  # rack 0 has 7 free GPUs, rack 1 has 8
    p = planner.consolidated(job("x", 0, 8, 1))
    assert {int(cluster.node_rack[cluster.gpu_node[g]]) for g in p.gpus} == {1}
    p = planner.consolidated(job("x", 0, 6, 1))  # both racks fit: the tighter one (rack 0)
    assert {int(cluster.node_rack[cluster.gpu_node[g]]) for g in p.gpus} == {0}


def test_fractional_jobs_pack_or_isolate() -> None:
    cluster = small_cluster(nodes=1, gpus=4)
    planner = _planner(cluster, {2: 0.5})
    assert planner.packed_share(job("x", 0, 0.25, 1)).gpus == (2,)
    assert planner.empty_gpu_share(job("x", 0, 0.25, 1)).gpus != (2,)
    assert planner.packed_share(job("x", 0, 0.75, 1)).gpus != (2,)  # 0.5 free is not enough


def test_candidates_are_searched_once_per_plan_for_jobs_alike(monkeypatch) -> None:
    cluster = small_cluster(nodes=3, gpus=4)
    planner = _planner(cluster, {0: 1.0, 4: 1.0, 5: 1.0})
    searched: list[str] = []
    search = Planner._search_candidates
    monkeypatch.setattr(Planner, "_search_candidates", lambda self, spec: searched.append(spec.name) or search(self, spec))
    first = planner.candidates(job("a", 0, 2, 1))
    assert len(first) > 1
    assert planner.candidates(job("b", 50, 2, 99)) == first and searched == ["a"]  # alike: 2 GPUs, one model
    planner.candidates(job("c", 0, 2, 1, model="BERT-large"))  # more memory: searched
    planner.candidates(job("d", 0, 3, 1))  # more GPUs: searched
    assert searched == ["a", "c", "d"]
    planner.take(job("a", 0, 2, 1), first[0])  # the plan changed: searched again, on what is left
    after = planner.candidates(job("b", 50, 2, 99))
    assert searched[-1] == "b"
    assert after == search(planner, job("e", 0, 2, 1)) and after != first
    assert not {g for p in after for g in p.gpus} & set(first[0].gpus)


def test_contention_greedy_avoids_the_contended_gpu() -> None:
    cluster = small_cluster(nodes=1, gpus=2)
    heavy = job("heavy", 0, 0.5, 10_000, model="ResNet-50-bs16")
    trace = [heavy, job("a", 1, 0.5, 100, model="ResNet-50-bs16")]
    greedy = Simulator(cluster, trace, make_policy("contention-greedy")).run()
    packed = Simulator(cluster, trace, make_policy("gandiva")).run()
    _g_heavy, g_a = greedy.jobs
    _p_heavy, p_a = packed.jobs
    assert g_a.end_s == pytest.approx(101.0)  # alone on the other GPU: no slowdown
    assert p_a.end_s > 101.0  # packed onto the heavy job's GPU: slowed by MPS sharing
    assert greedy.metrics["avg_jct_s"] < packed.metrics["avg_jct_s"]



def test_tiresias_does_not_spin_on_a_threshold_rounding_step() -> None:
    """A what-if of 100 queued jobs under tiresias: one job's attained service lands a rounding step below a queue
    threshold, which once made Tiresias re-arm the same demotion at `now` forever (a hang, not a wrong answer)."""
    import random
    import threading

    from policies import make_policy
    from scheduler.live.whatif import LiveJob, LiveNode, Snapshot, WhatIfRequest, evaluate

    nodes = [LiveNode(f"n{i}", "dgx-a100", tuple(range(8 * i, 8 * i + 8))) for i in range(4)]
    rng = random.Random(1)
    pending = [LiveJob(i, f"p{i}", "ResNet-50-bs64", rng.choice([0.5, 1, 2, 4, 8]), rng.uniform(60, 3600))
               for i in range(100)]
    done: list[bool] = []
    worker = threading.Thread(target=lambda: done.append(bool(evaluate(
        Snapshot(nodes, [], pending, "fifo"), WhatIfRequest.parse({"policy": "tiresias", "seeds": 1}), make_policy))),
        daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert done == [True], "the what-if did not finish within 60 s"


def test_tiresias_names_a_victim_again_when_its_preemption_was_not_carried_out() -> None:
    """A caller may drop a preemption Tiresias proposed (the tenancy frame drops those that leave it, the live
    controller stale ones). The victim, still running, must stay a candidate: it once left Tiresias' index for good."""
    from scheduler.core.decisions import Preempt
    from scheduler.core.simulator import Placed

    cluster = small_cluster(nodes=1, gpus=4)
    long_job = job("long", 0.0, 4, 50_000.0)
    # 4 GPUs x 4000 s attained: queue 1 (between 3600 and 36000 GPU-s), below a new job's queue 0.
    sim = Simulator(cluster, [job("short", 0.0, 1, 60.0)], None, contention=False,
                    initial=[Placed(long_job, Placement((0, 1, 2, 3)), 40_000.0, attained_gpu_s=16_000.0)])
    sim.advance()
    tiresias = make_policy("tiresias")
    for now in (0.0, 1.0):  # the first proposal is not applied; the second names the same victim
        sim.view.now = now
        decisions = tiresias.schedule(sim.view, list(sim.pending.values()), now)
        assert [type(d).__name__ for d in decisions] == ["Preempt", "Place"]
        assert isinstance(decisions[0], Preempt) and decisions[0].job_id == 1  # the placed job: ids after the trace's


def test_gandiva_keeps_its_affinity_as_jobs_start_end_and_are_resized() -> None:
    """Gandiva reads only the placements that changed since its last call; at every call its map of job size to the
    nodes running a job of that size is the one read from every running job, through starts, ends and resizes (a
    running job's new placement under the same id)."""
    from policies.heuristics import Gandiva

    checked = 0

    class Checked(Gandiva):
        def schedule(self, view: ClusterView, queue, now: float):  # type: ignore[no-untyped-def]
            nonlocal checked
            out = super().schedule(view, queue, now)
            if queue:
                whole: dict[int, set[int]] = defaultdict(set)
                for j in view.running.values():
                    if j.placement is not None:
                        whole[j.spec.workers].update(j.placement.nodes(view.cluster))
                assert {k: set(v) for k, v in self._affinity.items() if v} == dict(whole)
                checked += 1
            return out

    from policies.marginal_gain import GrowIdle

    jobs = synthetic(300, seed=3, mean_interarrival_s=40, elastic_share=0.5).jobs
    sim = Simulator(small_cluster(nodes=3, gpus=8), jobs, GrowIdle(Checked()))
    result = sim.run()
    assert result.metrics["jobs_completed"] + result.metrics["jobs_rejected"] == 300 and checked > 100
    assert sum(j.resizes for j in sim.jobs) > 10  # running jobs placed anew


def test_moved_since_lists_the_allocations_and_releases_after_a_mark_or_none_when_out_of_reach(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import scheduler.core.state as state_module

    monkeypatch.setattr(state_module, "MOVES_KEPT", 4)
    cluster = small_cluster(nodes=1, gpus=8)
    state = ClusterState(cluster, catalog())
    view = ClusterView(state, ContentionModel(cluster, catalog()), {})
    spec = job("a", 0, 1, 100)
    mark = view.moves
    state.allocate(1, spec, Placement((0,)))
    state.allocate(2, spec, Placement((1,)))
    state.release(1)
    assert view.moved_since(mark) == [1, 2, 1] and view.moved_since(view.moves) == []
    later = view.moves - 1
    state.allocate(3, spec, Placement((2,)))
    state.release(2)
    assert view.moved_since(later) == [1, 3, 2]
    assert view.moved_since(mark) is None  # five moves ago: the record keeps four


def test_topology_searches_once_per_plan_for_jobs_alike_and_again_once_the_plan_changes(monkeypatch) -> None:
    cluster = small_cluster(nodes=2, gpus=8)
    state = ClusterState(cluster, catalog())
    view = ClusterView(state, ContentionModel(cluster, catalog()), {})
    searches = 0
    real = Planner.topology_fit

    def counted(self: Planner, spec):  # type: ignore[no-untyped-def]
        nonlocal searches
        searches += 1
        return real(self, spec)

    monkeypatch.setattr(Planner, "topology_fit", counted)
    queue = [Job(i, job(f"j{i}", 0, 4, 100), 100.0) for i in range(5)]
    placed = [d for d in make_policy("topology").schedule(view, queue, 0.0) if isinstance(d, Place)]
    gpus = [g for d in placed for g in d.placement.gpus]
    assert len(placed) == 4 and len(set(gpus)) == 16  # every job its own GPUs: the plan changed after each start
    assert searches == 4  # (the fifth meets a full plan)
    # Six GPUs of each server busy: a 4-GPU job fits only across both, and waits for one server; the plan does not
    # change, so the three jobs alike are one search.
    busy = ClusterState(cluster, catalog())
    wide = Job(100, job("wide", 0, 12, 1000), 1000.0)
    busy.allocate(100, wide.spec, Placement((0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13)))
    wide.placement, wide.start_s = busy.placements[100], 0.0
    searches = 0
    decisions = make_policy("topology").schedule(ClusterView(busy, ContentionModel(cluster, catalog()), {100: wide}),
                                                  queue[:3], 0.0)
    assert not any(isinstance(d, Place) for d in decisions) and searches == 1
    # Models of different memory that every GPU holds: still one search.
    models = [Job(10 + i, job(m, 0, 4, 100, model=m), 100.0) for i, m in enumerate(["MoE", "BERT-large", "DLRM"])]
    searches = 0
    decisions = make_policy("topology").schedule(ClusterView(busy, ContentionModel(cluster, catalog()), {100: wide}),
                                                  models, 0.0)
    assert sum(isinstance(d, Wait) for d in decisions) == 3 and searches == 1


def test_topology_reuses_what_it_found_only_while_free_capacity_stands_still() -> None:
    """What topology found on an untouched plan is kept across calls until free capacity changes; at every call each
    job's placement is the one a new search on the view finds (a replay where gangs wait for compact room across
    calls that free nothing). Each hold is the compactness rule's, worded afresh, though the wait said at an earlier
    call is said again while its words stand."""
    from policies.compactness import CompactnessWait, servers
    from policies.topology import Topology
    from scheduler.core.model import NodeTypeSpec
    from scheduler.core.priorities import lowest_preemptible

    compared = reused = holds = said_again = 0
    rule = CompactnessWait()
    said: dict[int, Wait] = {}

    class Checked(Topology):
        def schedule(self, view: ClusterView, queue, now: float):  # type: ignore[no-untyped-def]
            nonlocal reused
            fresh = self._fresh
            reused += fresh is not None and fresh[0] is view and fresh[1] == view.changes and bool(fresh[2])
            return super().schedule(view, queue, now)

        def place(self, planner: Planner, job: Job):  # type: ignore[no-untyped-def]
            nonlocal compared
            got = super().place(planner, job)
            if planner.changes == 0:
                assert got == self._search(Planner(planner.view), job.spec)
                compared += 1
            return got

        def hold(self, planner: Planner, job: Job, placement):  # type: ignore[no-untyped-def]
            nonlocal holds, said_again
            got = super().hold(planner, job, placement)
            view, spans = planner.view, servers(planner.cluster, placement)
            until = rule.until(view, job.spec, lowest_preemptible(view))
            if rule.compact(planner.cluster, job.spec, placement) or until is None:
                assert got is None
                return got
            assert got == Wait(job.id, rule.words(planner.cluster, job.spec, until, view.now, spans), until)
            holds += 1
            said_again += said.get(job.id) is got
            said[job.id] = got
            return got

    # Gangs of 6 and 10 on 8-GPU servers: a fragmented cluster where they fit spread and wait for fewer servers. Jobs
    # of one size share a search where every GPU holds their model; BERT-large (20 GB) fits only the 32 GB servers.
    sizes = [1, 1, 2, 6, 6, 1, 3, 10]
    models = ["ResNet-50-bs64", "MoE", "BERT-large"]
    jobs = [job(f"j{i}", i * 120.0, sizes[i % len(sizes)], 300.0 + (i * 137) % 3000, model=models[i % 3])
            for i in range(300)]
    cluster = build_cluster(ClusterSpec(name="mixed", nodes_per_rack=16, groups=[
        NodeGroupSpec(count=2, node=NodeTypeSpec(gpu=gpu, gpus_per_node=8, interconnect="nvlink", nic_gbps=100.0))
        for gpu in ("V100-16GB", "V100-32GB")]))
    result = Simulator(cluster, jobs, Checked()).run()
    assert result.metrics["jobs_completed"] == 300
    assert compared > 600 and reused > 50  # (812 and 84 when written)
    assert holds > 80 and 10 < said_again < holds  # (109 and 19 when written)


def test_topology_searches_again_once_gpus_close() -> None:
    cluster = small_cluster(nodes=2, gpus=8)
    state = ClusterState(cluster, catalog())
    view = ClusterView(state, ContentionModel(cluster, catalog()), {})
    policy = make_policy("topology")
    queue = [Job(1, job("a", 0, 4, 100), 100.0)]
    first = [d for d in policy.schedule(view, queue, 0.0) if isinstance(d, Place)]
    assert len(first) == 1  # (not applied: the view is as it was)
    changes = view.changes
    state.set_closed({g: "drained" for g in first[0].placement.gpus})
    assert view.changes > changes
    again = [d for d in policy.schedule(view, queue, 1.0) if isinstance(d, Place)]
    assert len(again) == 1 and not set(again[0].placement.gpus) & set(first[0].placement.gpus)
