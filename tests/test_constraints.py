"""Constraints (`scheduler.core.constraints`): GPU type, node labels, node list and exclusion, one rule honoured by
every policy, the cluster state, admission, the RL encoding's masks and the pending reasons."""

from __future__ import annotations

import dataclasses
import pickle
from collections import defaultdict

import numpy as np
import pytest

from policies import make_policy
from policies.placement import Planner
from scheduler.core.admission import cluster_refusal
from scheduler.core.constraints import ConstraintError, Constraints, eligible_gpus, eligible_nodes, from_text
from scheduler.core.contention import ContentionModel
from scheduler.core.decisions import Place
from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    JobPhase,
    JobSpec,
    NodeGroupSpec,
    Placement,
    SpecError,
    build_cluster,
    parse_cluster,
)
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterState, ClusterView, PlacementError
from scheduler.core.traces import synthetic
from scheduler.core.workloads import catalog

POLICIES = ["fifo", "fifo-backfill", "sjf", "tiresias", "gittins", "gandiva", "consolidate", "topology", "random",
            "contention-greedy", "marginal-gain", "rl:default"]


def hetero() -> Cluster:
    """Two A100 servers in zone a, two H100 servers in zone b (one of them named), a T4 box."""
    return build_cluster(ClusterSpec(name="hetero", nodes_per_rack=2, groups=[
        NodeGroupSpec(preset="dgx-a100", count=2, labels={"zone": "a"}),
        NodeGroupSpec(preset="hgx-h100", count=2, labels={"zone": "b"}, names=["h100-0", "h100-1"]),
        NodeGroupSpec(preset="pcie-t4", count=1)]))


def test_nodes_carry_their_hardware_labels_and_their_groups() -> None:
    c = hetero()
    assert c.node_names == ("node0", "node1", "h100-0", "h100-1", "node4")
    assert dict(c.node_labels[0]) == {"gpu": "a100", "interconnect": "nvlink", "zone": "a"}
    assert dict(c.node_labels[3]) == {"gpu": "h100", "interconnect": "nvlink", "zone": "b"}
    assert dict(c.node_labels[4]) == {"gpu": "t4", "interconnect": "pcie"}
    mixed = parse_cluster("dgx-a100:1,hgx-h100:1")  # presets mix on the command line too
    assert [dict(lab)["gpu"] for lab in mixed.node_labels] == ["a100", "h100"]



def test_a_cluster_with_labels_travels_to_worker_processes() -> None:
    # The benchmarks and the evaluation send clusters to process pools: a node's labels must pickle (they once were
    # `MappingProxyType`s, and `benchmarks/estimates.py` failed at its first case), and stay read-only.
    c = hetero()
    back = pickle.loads(pickle.dumps(c))
    assert [dict(lab) for lab in back.node_labels] == [dict(lab) for lab in c.node_labels]
    assert back.node_labels[0]["zone"] == "a"
    with pytest.raises(TypeError):
        c.node_labels[0]["zone"] = "b"  # type: ignore[index]

def test_eligible_nodes_follow_every_part_of_the_rule() -> None:
    c = hetero()
    cases = {
        Constraints.make(gpu_type="H100-80GB"): [0, 0, 1, 1, 0],
        Constraints.make(gpu_type="a100"): [1, 1, 0, 0, 0],  # the family, any case
        Constraints.make(labels={"zone": "b"}): [0, 0, 1, 1, 0],
        Constraints.make(labels={"gpu": "t4", "interconnect": "pcie"}): [0, 0, 0, 0, 1],
        Constraints.make(labels={"gpu": "t4", "interconnect": "nvlink"}): [0, 0, 0, 0, 0],
        Constraints.make(nodes=["node1", "h100-1"]): [0, 1, 0, 1, 0],
        Constraints.make(exclude=["node0", "node4"]): [0, 1, 1, 1, 0],
        Constraints.make(labels={"zone": "b"}, exclude=["h100-0"]): [0, 0, 0, 1, 0],
    }
    for constraints, want in cases.items():
        assert constraints is not None
        mask = eligible_nodes(c, constraints)
        assert mask.tolist() == [bool(x) for x in want], constraints
        assert eligible_gpus(c, constraints).tolist() == np.repeat(mask, c.node_num_gpus).tolist()
        assert eligible_nodes(c, constraints) is mask  # computed once per cluster and constraints
    assert Constraints.make() is None  # nothing asked: no constraints, and nothing on the hot path


def test_bad_constraints_name_their_field() -> None:
    with pytest.raises(ConstraintError) as exc:
        Constraints.make(labels={"zone": "a b"})
    assert exc.value.field == "labels"
    with pytest.raises(ConstraintError) as exc:
        Constraints.make(nodes=["n1"], exclude=["n1"])
    assert exc.value.field == "exclude"
    with pytest.raises(ConstraintError) as exc:
        from_text("h100&a100")
    assert exc.value.field == "gpu_type"
    with pytest.raises(ConstraintError) as exc:
        Constraints.from_json({"gpu": "h100"})
    assert exc.value.field == "gpu"
    assert from_text("gpu=h100&zone=b", "n1, n2", "n3") == Constraints(None, (("gpu", "h100"), ("zone", "b")),
                                                                      ("n1", "n2"), ("n3",))
    c = Constraints.make("h100", {"zone": "b"}, ["a"], ["b"])
    assert c is not None and Constraints.from_json(c.to_json()) == c
    with pytest.raises(SpecError, match="node names repeat"):
        build_cluster(ClusterSpec(groups=[NodeGroupSpec(preset="pcie-t4", count=2, names=["x", "x"])]))


def _spec(name: str, gpus: float, constraints: Constraints | None, model: str = "ResNet-50-bs32") -> JobSpec:
    return JobSpec(name=name, submit_s=0.0, num_gpus=gpus, duration_s=600.0, model=model, constraints=constraints)


def test_a_job_no_node_could_ever_run_is_refused_naming_the_field() -> None:
    c, profiles = hetero(), catalog()
    model = "ResNet-50-bs32"
    refusal = cluster_refusal(c, model, 8, Constraints.make(gpu_type="V100-32GB"), profiles)
    assert refusal is not None and refusal.field == "constraints.gpu_type" and "A100-80GB" in refusal.why
    refusal = cluster_refusal(c, model, 24, Constraints.make(labels={"zone": "b"}), profiles)
    assert refusal is not None and refusal.field == "constraints.labels" and "those have 16" in refusal.why
    refusal = cluster_refusal(c, model, 1, Constraints.make(nodes=["nope"]), profiles)
    assert refusal is not None and refusal.field == "constraints.nodes" and "nope" in refusal.why
    refusal = cluster_refusal(c, model, 16, Constraints.make(gpu_type="h100", exclude=["h100-0"]), profiles)
    assert refusal is not None and refusal.field == "constraints.exclude"
    assert cluster_refusal(c, model, 16, Constraints.make(labels={"zone": "b"}), profiles) is None
    sim = Simulator(c, [_spec("never", 8, Constraints.make(gpu_type="V100-32GB"))], make_policy("fifo"))
    job = sim.run().jobs[0]
    assert job.state is JobPhase.REJECTED and "GPU type V100-32GB" in job.reject_reason


def test_the_cluster_state_refuses_a_placement_off_the_jobs_nodes() -> None:
    c = hetero()
    state = ClusterState(c, catalog())
    spec = _spec("h", 8, Constraints.make(labels={"gpu": "h100"}))
    with pytest.raises(PlacementError, match="node0, which its constraints"):
        state.allocate(1, spec, Placement(tuple(range(8))))
    state.allocate(1, spec, Placement(tuple(c.node_gpus(2))))  # an H100 server: legal


def _constrained(cluster: Cluster, n: int, seed: int) -> list[JobSpec]:
    """A synthetic workload, a fraction of its jobs constrained each way the rule allows."""
    rng = np.random.default_rng(seed)
    choices = [Constraints.make(gpu_type="h100"), Constraints.make(labels={"zone": "a"}),
               Constraints.make(nodes=["node1", "h100-1"]), Constraints.make(exclude=["node0", "h100-0"]),
               Constraints.make(labels={"gpu": "t4"}), None, None]
    jobs = []
    for spec in synthetic(n, seed=seed, mean_interarrival_s=60, frac_share=0.2, inference_share=0.1).jobs:
        pick = choices[int(rng.integers(len(choices)))]
        jobs.append(dataclasses.replace(spec, constraints=pick))
    return jobs


class Watched(Simulator):
    """Checks every start against the nodes' own names and labels (not through the rule's masks)."""

    starts: dict[str, int]

    def _start(self, job, decision: Place, adopt: bool = False) -> None:
        super()._start(job, decision, adopt)
        self.starts = getattr(self, "starts", defaultdict(int))
        spec = job.spec
        if spec.constraints is None:
            return
        self.starts["constrained"] += 1
        for node in decision.placement.nodes(self.cluster):
            name, labels = self.cluster.node_names[node], self.cluster.node_labels[node]
            gpu = self.cluster.node_gpu_types[node]
            assert spec.constraints.matches(name, labels, gpu)
            for k, v in spec.constraints.labels:
                assert labels.get(k) == v, f"{spec.name} on {name} lacks {k}={v}"
            assert not spec.constraints.nodes or name in spec.constraints.nodes
            assert name not in spec.constraints.exclude
            if spec.constraints.gpu_type:
                assert gpu.lower().startswith(spec.constraints.gpu_type.lower())


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_places_constrained_jobs_only_on_their_nodes(policy: str) -> None:
    cluster = hetero()
    jobs = _constrained(cluster, 120, seed=5)
    sim = Watched(cluster, jobs, make_policy(policy, seed=1))
    result = sim.run()
    ended = {j.state for j in result.jobs}
    assert ended <= {JobPhase.DONE, JobPhase.REJECTED}, ended
    assert sim.starts["constrained"] >= sum(1 for j in result.jobs
                                            if j.spec.constraints is not None and j.state is JobPhase.DONE)
    assert sim.starts["constrained"] > 20  # the check above ran, many times


def _view(cluster: Cluster, busy: list[int]) -> ClusterView:
    state = ClusterState(cluster, catalog())
    model = ContentionModel(cluster)
    for i, g in enumerate(busy):
        spec = _spec(f"b{i}", 1, None)
        state.allocate(100 + i, spec, Placement((g,)))
        model.add(100 + i, spec, Placement((g,)))
    return ClusterView(state, model, {})


def test_placement_searches_keep_to_the_nodes_and_jobs_alike_differ_by_constraints() -> None:
    c = hetero()
    planner = Planner(_view(c, []))
    free = _spec("free", 4, None)
    pinned = _spec("pinned", 4, Constraints.make(nodes=["h100-1"]))
    h100_1 = set(c.node_gpus(3))
    for p in planner.candidates(pinned):
        assert set(p.gpus) <= h100_1
    assert not all(set(p.gpus) <= h100_1 for p in planner.candidates(free))
    share = _spec("share", 0.5, Constraints.make(labels={"gpu": "t4"}), model="MobileNetV3")
    assert all(c.gpu_node[p.gpus[0]] == 4 for p in planner.candidates(share))
    assert planner.spread(pinned, np.random.default_rng(0)) is not None
    assert set(planner.spread(pinned, np.random.default_rng(0)).gpus) <= h100_1  # type: ignore[union-attr]


def test_a_constrained_misfit_does_not_hold_back_jobs_free_to_go_elsewhere() -> None:
    c = hetero()
    busy = list(c.node_gpus(2)) + list(c.node_gpus(3))  # the H100s are full
    planner = Planner(_view(c, busy))
    assert planner.best_fit(_spec("h", 2, Constraints.make(gpu_type="h100"))) is None
    assert planner.may_fit(_spec("any", 2, None))
    assert planner.best_fit(_spec("any", 2, None)) is not None


def test_the_rl_encoding_masks_every_action_off_a_constrained_jobs_nodes() -> None:
    """The agent's actions for a constrained job are placements on its nodes only; with its nodes full and the rest
    free it has none (it waits, or preempts on its nodes), while a job free to go anywhere is offered the free ones."""
    from policies.rl_encoding import MAX_CANDIDATES, ORDERS, decision_point

    c = hetero()
    pinned = _spec("pinned", 4, Constraints.make(labels={"zone": "b"}))
    sim = Simulator(c, [pinned], None)
    while not sim.pending and sim.advance():
        pass
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None
    zone_b = set(c.node_gpus(2)) | set(c.node_gpus(3))
    offered = [(j, k) for j in range(len(ORDERS)) for k in range(MAX_CANDIDATES) if point.mask[j * MAX_CANDIDATES + k]]
    assert offered
    for j, k in offered:
        slot = point.slots[j]
        assert slot is not None and set(slot.candidates[k].gpus) <= zone_b
    # Its nodes full (two runs on the H100s): no placement action is left for it, though the A100s are free.
    blockers = [_spec(f"b{i}", 8, None) for i in range(2)]
    sim = Simulator(c, [*blockers, dataclasses.replace(pinned, submit_s=1.0)], None)
    while len(sim.pending) < 2 and sim.advance():
        pass
    sim.apply([Place(sim.jobs[0].id, Placement(tuple(c.node_gpus(2)))),
               Place(sim.jobs[1].id, Placement(tuple(c.node_gpus(3))))])
    while sim.jobs[2].id not in sim.pending and sim.advance():
        pass
    point = decision_point(sim.view, sim.pending.values(), sim.now, preempt=False)
    assert point is None or not any(slot is not None and not slot.victims for slot in point.slots)
