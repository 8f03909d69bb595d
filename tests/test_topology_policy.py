"""The `topology` heuristic and `Planner.topology_fit`: a gang on as few racks, pods and nodes as it fits, its GPUs on
the same indices of each node (rails), on small inline fabrics."""

from __future__ import annotations

import pytest
from conftest import record_calls

from policies import make_policy
from policies.placement import Planner
from policies.topology import Topology
from scheduler.core.contention import ContentionModel, collective_flows
from scheduler.core.decisions import Decision, Place, Wait, WakeAt
from scheduler.core.fabric import FabricSpec
from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    Job,
    JobSpec,
    LinkKind,
    NodeGroupSpec,
    NodeTypeSpec,
    Placement,
    SpecError,
    build_cluster,
    parse_cluster,
)
from scheduler.core.simulator import Placed, Simulator
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.traces import synthetic
from scheduler.core.workloads import catalog


def fabric(nodes: int, per_rack: int, gpus: int = 4, **spec: object) -> Cluster:
    node = NodeTypeSpec(gpu="A100-80GB", gpus_per_node=gpus, interconnect="nvlink", nic_gbps=200.0, nics=gpus)
    return build_cluster(ClusterSpec(name="t", nodes_per_rack=per_rack, fabric=FabricSpec(**spec),
                                     groups=[NodeGroupSpec(count=nodes, node=node)]))


def gang(n: int) -> JobSpec:
    return JobSpec(name=f"g{n}", submit_s=0.0, num_gpus=n, duration_s=100.0, model="MoE")  # communication-heavy


def planner(cluster: Cluster, busy: tuple[int, ...] = ()) -> Planner:
    state = ClusterState(cluster, catalog())
    model = ContentionModel(cluster)
    for i, g in enumerate(busy):
        spec = JobSpec(name=f"b{i}", submit_s=0.0, num_gpus=1, duration_s=10.0, model="ResNet-50-bs64")
        state.allocate(1000 + i, spec, Placement((g,)))
        model.add(1000 + i, spec, Placement((g,)))
    return Planner(ClusterView(state, model, {}))


def racks_of(cluster: Cluster, p: Placement) -> set[int]:
    return {int(cluster.node_rack[cluster.gpu_node[g]]) for g in p.gpus}


def test_a_gang_goes_to_the_one_rack_that_holds_it() -> None:
    c = fabric(nodes=6, per_rack=2)  # 3 racks of 2 nodes x 4 GPUs
    # Rack 0: 5 free, rack 1: 7 free, rack 2: 8 free. A 6-GPU gang fits racks 1 and 2: the tighter, rack 1.
    p = planner(c, busy=(0, 1, 2, 8)).topology_fit(gang(6))
    assert p is not None and racks_of(c, p) == {1}
    p = planner(c, busy=(0, 1, 2, 8)).topology_fit(gang(8))
    assert p is not None and racks_of(c, p) == {2}


def test_a_gang_no_rack_holds_takes_whole_servers_on_the_fewest_racks_they_allow() -> None:
    c = fabric(nodes=8, per_rack=2)  # 4 racks of 2 servers x 4 GPUs
    # Free: rack 0: 0 + 4, rack 1: 2 + 4, rack 2: 3 + 4, rack 3: 4 + 4. A 14-GPU gang: 3 whole servers (racks 3 and 0,
    # its first in order of most whole servers), the 2 left on the server that fits them tightest (server 2: 2 free).
    busy = (0, 1, 2, 3, 8, 9, 16)
    p = planner(c, busy=busy).topology_fit(gang(14))
    assert p is not None
    per_server = {int(c.gpu_node[g]): 0 for g in p.gpus}
    for g in p.gpus:
        per_server[int(c.gpu_node[g])] += 1
    assert per_server == {1: 4, 2: 2, 6: 4, 7: 4}
    # Too few wholly free servers: the fewest racks, fullest-free servers first (racks 3 and 2).
    p = planner(c, busy=(*busy, 4, 12, 20)).topology_fit(gang(14))
    assert p is not None and racks_of(c, p) == {2, 3}


def test_a_gang_prefers_the_pod_that_holds_it() -> None:
    c = fabric(nodes=8, per_rack=1, racks_per_pod=4)  # 8 racks of one node, 2 pods of 4
    # Pod 0 (racks 0-3): 4 + 4 + 1 + 1 free = 10; pod 1: 3 free a rack = 12. A 9-GPU gang: pod 0, the tighter.
    busy = (8, 9, 10, 12, 13, 14, 16, 20, 24, 28)
    p = planner(c, busy=busy).topology_fit(gang(9))
    assert p is not None and racks_of(c, p) <= {0, 1, 2, 3}
    assert racks_of(c, p) == {0, 1, 2}  # the racks with most free GPUs first


def test_partial_nodes_take_the_same_gpu_indices_for_rail_aligned_rings() -> None:
    c = fabric(nodes=2, per_rack=2, kind="rail-optimised")
    # Node 0: GPU 0 busy (1, 2, 3 free); node 1: GPU 3 busy (0, 1, 2 free). A 4-GPU gang takes 3 + 1; the ring's one
    # channel joins the first GPU of each node, so node 1's GPU must be on node 0's first GPU's rail: GPU 1.
    p = planner(c, busy=(0, 7)).topology_fit(gang(4))
    assert p is not None and p.gpus == (1, 2, 3, 4 + 1)
    lowest_free = (1, 2, 3, 4 + 0)  # what taking each node's lowest free GPUs gives: rails 1 and 0, via the spine
    assert spine_links(c, p.gpus) == set() and spine_links(c, lowest_free)


def spine_links(c: Cluster, gpus: tuple[int, ...]) -> set[int]:
    traffic, _ = collective_flows(c, gpus, 1.0)
    return {link for link in traffic if c.link_kind[link] in (LinkKind.UPLINK, LinkKind.DOWNLINK)}


def test_the_topology_policy_runs_whole_workloads_on_a_fabric() -> None:
    cluster = parse_cluster("hgx-h100:24@fat-tree-3:1")
    jobs = list(synthetic(150, seed=5, mean_interarrival_s=120.0, large_gang_share=0.05).jobs)
    result = Simulator(cluster, jobs, make_policy("topology")).run()
    assert all(j.end_s is not None or j.reject_reason for j in result.jobs)
    gangs = [j for j in result.jobs if j.spec.workers >= 64 and j.end_s is not None]
    assert gangs, "the workload should hold gangs that ran"


@pytest.mark.parametrize("name", ["topology", "contention-greedy"])
def test_policies_place_a_gang_within_one_rack_on_a_fabric(name: str) -> None:
    cluster = parse_cluster("hgx-h100:12@fat-tree-3:1")  # 2 racks of 6 servers (48 GPUs)
    view = planner(cluster, busy=tuple(range(0, 48, 8))).view  # rack 0: 42 free, too few
    decisions = make_policy(name).schedule(view, [Job(1, gang(44), 100.0)], 0.0)
    placed = [d for d in decisions if isinstance(d, Place)]
    assert len(placed) == 1 and racks_of(cluster, placed[0].placement) == {1}


def test_explanations_name_the_tier_a_gang_crosses() -> None:
    cluster = parse_cluster("hgx-h100:12@fat-tree-3:1")  # racks of 6 servers
    view = planner(cluster).view
    one_rack = Placement(tuple(range(48)))
    two_racks = Placement(tuple(range(24)) + tuple(range(48, 72)))
    assert view.fabric_words(gang(48), one_rack) == ""
    words = view.fabric_words(gang(48), two_racks)
    assert words.startswith("spans 2 racks: ") and words.endswith("x from the spine at 3:1")
    assert float(words.split(": ")[1].split("x")[0]) >= 1.0
    assert parse_cluster("hgx-h100:12").fabric is None
    assert planner(parse_cluster("hgx-h100:12")).view.fabric_words(gang(48), two_racks) == ""
    decisions = make_policy("topology").schedule(view, [Job(1, gang(64), 100.0)], 0.0)
    assert isinstance(decisions[0], Place) and decisions[0].reason.startswith("spans 2 racks: ")


# ---- compactness required for a bounded time (Slurm's --switches=N@max-time) -----------------------------------------


def small(name: str, n: float, submit: float = 0.0) -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=n, duration_s=100.0, model="ResNet-50-bs64")


def test_a_job_one_server_holds_waits_for_one_server_then_starts_spread() -> None:
    c = fabric(nodes=2, per_rack=2)  # 2 servers of 4 GPUs
    view = planner(c, busy=(0, 1, 4, 5)).view  # 2 free GPUs on each server: a 3-GPU job would span both
    waiting = Job(1, small("three", 3), 100.0)
    decisions = make_policy("topology:node_wait=600").schedule(view, [waiting, Job(2, small("two", 2), 100.0)], 0.0)
    wait = next(d for d in decisions if isinstance(d, Wait))
    assert wait.job_id == 1 and wait.reason.startswith("waits for one server to hold its 3 GPUs (now they would span "
                                                       "2 servers"), wait.reason
    assert "starts spread in 10 min at the latest" in wait.reason
    assert WakeAt(600.0) in decisions, "asked to be called when the wait ends"
    assert [d.job_id for d in decisions if isinstance(d, Place)] == [2], "the job behind it starts meanwhile"
    view.now = 600.0
    (placed,) = make_policy("topology:node_wait=600").schedule(view, [waiting], 600.0)
    assert isinstance(placed, Place) and len(placed.placement.gpus) == 3
    (spread,) = make_policy("topology:node_wait=0").schedule(planner(c, busy=(0, 1, 4, 5)).view, [waiting], 0.0)
    assert isinstance(spread, Place), "node_wait=0: the placement of before, at once"


def test_a_gang_takes_whole_servers_in_another_rack_before_a_spread_in_one() -> None:
    c = fabric(nodes=6, per_rack=3)  # 2 racks of 3 servers x 4 GPUs
    # Rack 0: 8 free GPUs, no whole server (the tighter rack: fewest racks alone would spread the gang over its 3
    # servers); rack 1: servers 3 and 4 whole, one GPU free on server 5.
    p = planner(c, busy=(0, 4, 8, 9, 21, 22, 23))
    assert p.topology_fit(gang(8)) is not None and racks_of(c, p.topology_fit(gang(8))) == {0}
    decisions = make_policy("topology").schedule(p.view, [Job(1, gang(8), 100.0)], 0.0)
    (placed,) = decisions
    assert isinstance(placed, Place) and placed.placement.gpus == tuple(range(12, 20)), placed
    # Without two whole servers anywhere the gang waits (a day by default) rather than spread over three.
    busy = (0, 4, 8, 12, 16, 20)
    decisions = make_policy("topology").schedule(planner(c, busy=busy).view, [Job(1, gang(8), 100.0)], 0.0)
    assert decisions[0] == Wait(1, decisions[0].reason, 86400.0) and "waits for 2 servers" in decisions[0].reason
    assert WakeAt(86400.0) in decisions


def test_a_gpu_share_takes_a_gpu_of_its_own_while_one_is_free() -> None:
    c = fabric(nodes=2, per_rack=2)
    state, model = ClusterState(c, catalog()), ContentionModel(c)
    half = small("half", 0.5)
    state.allocate(1000, half, Placement((0,), 0.5))
    model.add(1000, half, Placement((0,), 0.5))
    view = ClusterView(state, model, {})
    (placed,) = make_policy("topology").schedule(view, [Job(1, small("quarter", 0.25), 100.0)], 0.0)
    assert isinstance(placed, Place) and placed.placement.gpus != (0,), "not onto the GPU another tenant uses"
    (packed,) = make_policy("consolidate").schedule(view, [Job(1, small("quarter", 0.25), 100.0)], 0.0)
    assert isinstance(packed, Place) and packed.placement.gpus == (0,), "consolidate packs (best fit)"
    full = planner(c, busy=tuple(range(1, 8))).view  # GPU 0 the only one left: shares pack there
    (only,) = make_policy("topology").schedule(full, [Job(1, small("quarter", 0.25), 100.0)], 0.0)
    assert isinstance(only, Place) and only.placement.gpus == (0,)


def test_a_held_job_s_wait_says_until_when_the_hold_lasts() -> None:
    """The `Wait` carries the hold's end, its submission plus the wait (the live controller stores it as the job's
    `pending_until` and the start estimate counts the job as starting then); the WakeAt asks for the same time. The
    priority rules' and a misfit's waits bound nothing."""
    c = fabric(nodes=2, per_rack=2)
    view = planner(c, busy=(0, 1, 4, 5)).view
    view.now = 100.0
    queue = [Job(1, small("three", 3, submit=50.0), 100.0), Job(2, small("five", 5, submit=60.0), 100.0)]
    decisions = make_policy("topology:node_wait=600").schedule(view, queue, 100.0)
    assert Wait(1, next(d.reason for d in decisions if isinstance(d, Wait) and d.job_id == 1), 650.0) in decisions
    assert "starts spread in 9 min at the latest" in decisions[0].reason  # (hold end 650, now 100)
    assert WakeAt(650.0) in decisions
    misfit = next(d for d in decisions if isinstance(d, Wait) and d.job_id == 2)
    assert misfit.until is None and misfit.reason.startswith("waiting for 5 GPUs"), "no bound: it does not fit"
    (gang_wait,) = [d for d in make_policy("topology:gang_wait=1000").schedule(
        planner(fabric(nodes=6, per_rack=3), busy=(0, 4, 8, 12, 16, 20)).view,
        [Job(1, JobSpec(name="g8", submit_s=7.0, num_gpus=8, duration_s=100.0, model="MoE"), 100.0)], 0.0)
        if isinstance(d, Wait)]
    assert gang_wait.until == 1007.0, "a gang's hold: its submission plus gang_wait"
    assert Wait(3, "x").until is None, "other policies' waits: no bound"


def test_the_simulator_starts_a_held_job_when_its_wait_ends() -> None:
    c = fabric(nodes=2, per_rack=2)
    busy = [Placed(small(f"busy{g}", 1), Placement((g,)), 10_000.0) for g in (0, 1, 4, 5)]
    job = small("three", 3, submit=50.0)
    result = Simulator(c, [job], make_policy("topology:node_wait=600"), initial=busy).run()
    (three,) = [j for j in result.jobs if j.spec.name == "three"]
    assert three.first_start_s == pytest.approx(650.0), "at its submission plus the wait, not when a server frees"


@pytest.mark.parametrize(("name", "why"), [
    ("topology:node_wait=-1", "option 'node_wait': -1 is negative"),
    ("topology:gang_wait=soon", "option 'gang_wait': 'soon' is not a number"),
    ("topology:wait=5", "unknown option 'wait'"),
])
def test_bad_topology_options_are_refused_by_name(name: str, why: str) -> None:
    with pytest.raises(SpecError, match=why):
        make_policy(name)
    assert make_policy("topology:gang_wait=3600").name == "topology:gang_wait=3600"


def test_a_job_the_priority_rules_favour_is_not_held() -> None:
    """Without room it would preempt a lower-priority job (rule 3), so it does not wait for better room either:
    high-priority jobs wait as on an empty cluster (benchmarks/priorities.py)."""
    c = fabric(nodes=2, per_rack=2)
    state, model, running = ClusterState(c, catalog()), ContentionModel(c), {}
    for i, g in enumerate((0, 1, 4, 5)):  # 2 free GPUs on each server, held by preemptible jobs of priority 0
        busy = Job(1000 + i, small(f"b{i}", 1), 10.0)
        state.allocate(busy.id, busy.spec, Placement((g,)))
        model.add(busy.id, busy.spec, Placement((g,)))
        busy.placement, busy.start_s = Placement((g,)), 0.0
        running[busy.id] = busy
    view = ClusterView(state, model, running)
    high = JobSpec(name="high", submit_s=0.0, num_gpus=3, duration_s=100.0, model="ResNet-50-bs64", priority=5)
    (placed,) = make_policy("topology").schedule(view, [Job(1, high, 100.0)], 0.0)
    assert isinstance(placed, Place) and len({int(c.gpu_node[g]) for g in placed.placement.gpus}) == 2
    decisions = make_policy("topology").schedule(view, [Job(1, small("low", 3), 100.0)], 0.0)
    assert isinstance(decisions[0], Wait), "a job of the running jobs' priority is held"


def test_a_held_job_s_wait_is_said_again_while_its_words_stand_and_worded_again_when_they_change() -> None:
    """The policy keeps the wait it said for a held job and says it again at later calls while its words would read
    the same; a new time left in other words, another spread or another spec for the job words it afresh."""
    c = fabric(nodes=3, per_rack=3)  # 3 servers of 4 GPUs
    state, model = ClusterState(c, catalog()), ContentionModel(c)
    busy = small("busy", 1)
    for i, g in enumerate((0, 1, 4, 5, 8, 9, 10, 11)):  # 2 free GPUs on servers 0 and 1, none on server 2
        state.allocate(1000 + i, busy, Placement((g,)))
    view = ClusterView(state, model, {})
    policy = make_policy("topology:node_wait=3600")
    job = Job(1, small("three", 3), 100.0)

    def said(now: float) -> Wait:
        view.now = now
        return next(d for d in policy.schedule(view, [job], now) if isinstance(d, Wait))

    first = said(100.0)
    assert "(now they would span 2 servers" in first.reason and "starts spread in 58 min" in first.reason
    assert said(110.0) is first, "58 min still: the same wait"
    later = said(160.0)
    assert later is not first and "starts spread in 57 min" in later.reason
    state.release(1001)
    state.release(1003)
    state.release(1004)
    for i, g in enumerate((2, 3, 6, 7)):
        state.allocate(2000 + i, busy, Placement((g,)))  # free: GPU 1 of server 0, 5 of server 1, 8 of server 2
    spread = said(161.0)
    assert "(now they would span 3 servers" in spread.reason and "starts spread in 57 min" in spread.reason
    job.spec = small("three", 3, submit=100.0)  # (a spec replaced: submitted later, so its wait ends later)
    resubmitted = said(162.0)
    assert resubmitted.until == 3700.0 and "starts spread in 59 min" in resubmitted.reason


def _calls(policy: Topology, cluster: Cluster, jobs: list[JobSpec]) -> list[list[Decision]]:
    calls = record_calls(policy)
    Simulator(cluster, jobs, policy).run()
    return calls


def test_a_call_on_unchanged_capacity_says_again_what_the_last_said_and_scans_only_the_newcomers() -> None:
    """While free capacity stands still and every wait it said reads the same, a call says again what the last one
    said and scans only the jobs that arrived since: call for call, what a full scan says (a replay on a fabric where
    gangs wait for compact room, arrivals between the ends)."""
    hits = [0]

    class Remembering(Topology):
        def schedule(self, view, queue, now):  # type: ignore[no-untyped-def]
            hits[0] += self._said is not None and self._said.tail(view, queue, now) is not None
            return super().schedule(view, queue, now)

    class Scanning(Topology):
        def schedule(self, view, queue, now):  # type: ignore[no-untyped-def]
            self._said = None  # every call scans the whole queue
            return super().schedule(view, queue, now)

    c = fabric(nodes=8, per_rack=2)  # 4 racks of 2 servers x 4 GPUs
    sizes, models = [1, 3, 2, 6, 1, 8, 0.5, 3, 4], ["MoE", "ResNet-50-bs64", "BERT-large"]
    jobs = [JobSpec(name=f"j{i}", submit_s=i * 40.0, num_gpus=sizes[i % len(sizes)], model=models[i % len(models)],
                    duration_s=200.0 + (i * 911) % 5000) for i in range(400)]
    remembered = _calls(Remembering(node_wait_s=1800.0, gang_wait_s=7200.0), c, jobs)
    scanned = _calls(Scanning(node_wait_s=1800.0, gang_wait_s=7200.0), c, jobs)
    assert len(remembered) == len(scanned)
    for i, (a, b) in enumerate(zip(remembered, scanned, strict=True)):
        assert a == b, i
    assert hits[0] > 200, hits  # (476 of 1,261 calls when written)


def test_a_newcomer_s_hold_and_a_replaced_spec_end_what_the_last_call_said() -> None:
    """A held newcomer whose words change before those said before bounds how long the call's words are said again;
    a job whose spec was replaced is read again."""
    c = fabric(nodes=4, per_rack=2)
    state = ClusterState(c, catalog())
    for i, g in enumerate((0, 1, 4, 5, 8, 9, 12, 13)):  # 2 free GPUs on each server: everything fits only spread
        state.allocate(1000 + i, small("busy", 1), Placement((g,)))
    view = ClusterView(state, ContentionModel(c), {})
    policy = make_policy("topology:node_wait=600,gang_wait=86400")
    gang = Job(1, JobSpec(name="g8", submit_s=0.0, num_gpus=8, duration_s=100.0, model="MoE"), 100.0)
    three = Job(2, small("three", 3, submit=10.0), 100.0)

    def said(queue: list[Job], now: float) -> dict[int, str]:
        view.now = now
        return {d.job_id: d.reason for d in policy.schedule(view, queue, now) if isinstance(d, Wait)}

    assert "starts spread in 24.0 h" in said([gang], 0.0)[1]
    assert "starts spread in 10 min" in said([gang, three], 10.0)[2]  # the newcomer: 600 s left
    later = said([gang, three], 80.0)
    assert "starts spread in 24.0 h" in later[1] and "starts spread in 9 min" in later[2], later
    three.spec = small("three", 3, submit=70.0)  # (replaced: its hold now ends at 670)
    assert "starts spread in 10 min" in said([gang, three], 81.0)[2]
