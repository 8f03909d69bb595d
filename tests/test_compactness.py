"""Compactness waits (`policies.compactness`) in the `rl:` frame: on a fabric, a job that fits now only spread waits a
bounded time for the fewest servers, is not preempted for while it could start spread, and is preempted for only by
victims that free the fewest servers; elsewhere the frame is as it was. And the per-node count the victim test
uses, against giving the victims back."""

from __future__ import annotations

import numpy as np
import pytest

from policies.compactness import GANG_WAIT_S, NODE_WAIT_S, CompactnessWait
from policies.placement import Planner
from policies.rl import RLPolicy
from policies.rl_encoding import MAX_CANDIDATES, ORDERS, WAIT, decision_point
from scheduler.core.contention import ContentionModel
from scheduler.core.decisions import Wait, WakeAt
from scheduler.core.fabric import FabricSpec
from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    Job,
    JobSpec,
    NodeGroupSpec,
    NodeTypeSpec,
    Placement,
    build_cluster,
)
from scheduler.core.runner import answered
from scheduler.core.simulator import Placed, Simulator
from scheduler.core.state import ClusterState, ClusterView
from scheduler.core.workloads import catalog


def cluster(nodes: int, per_rack: int, fabric: bool = True) -> Cluster:
    node = NodeTypeSpec(gpu="A100-80GB", gpus_per_node=4, interconnect="nvlink", nic_gbps=200.0, nics=4)
    return build_cluster(ClusterSpec(name="t", nodes_per_rack=per_rack, fabric=FabricSpec() if fabric else None,
                                     groups=[NodeGroupSpec(count=nodes, node=node)]))


def job(name: str, n: float, submit: float = 0.0, model: str = "ResNet-50-bs64") -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=n, duration_s=1000.0, model=model)


def point_after_arrivals(c: Cluster, busy: list[Placed], pending: list[JobSpec]):  # type: ignore[no-untyped-def]
    """The frame's decision point once every pending job has arrived, the busy ones running."""
    sim = Simulator(c, pending, None, initial=busy)
    while any(j.spec.submit_s > sim.now for j in sim.jobs) or not sim.pending:
        if not sim.advance():
            break
    return sim, decision_point(sim.view, sim.pending.values(), sim.now)


def offered(point) -> dict[str, list[tuple[int, ...]]]:  # type: ignore[no-untyped-def]
    """Each offered job's candidates' GPUs, by name (over every slot that offers it)."""
    out: dict[str, list[tuple[int, ...]]] = {}
    if point is None:
        return out
    for slot in point.slots:
        if slot is not None:
            out.setdefault(slot.job.spec.name, []).extend(p.gpus for p in slot.candidates)
    return out


def servers_of(c: Cluster, gpus: tuple[int, ...]) -> set[int]:
    return {int(c.gpu_node[g]) for g in gpus}


def test_a_job_that_fits_only_spread_waits_on_a_fabric_while_the_job_behind_it_is_offered() -> None:
    # 2 servers x 4 GPUs, 2 free on each: a 3-GPU job fits only over both servers; a 2-GPU job fits on one.
    # (Past the last queue threshold, so no demotion asks for a wake-up of its own.)
    busy = [Placed(job(f"b{g}", 1), Placement((g,)), 50_000.0, attained_gpu_s=40_000.0) for g in (0, 1, 4, 5)]
    pending = [job("three", 3, submit=10.0), job("two", 2, submit=20.0)]
    c = cluster(2, 2)
    sim, point = point_after_arrivals(c, busy, pending)
    assert point is not None and set(offered(point)) == {"two"}, "the 3-GPU job waits for one server"
    assert not any(s is not None and s.victims for s in point.slots), "and nobody is preempted for it"
    # Without a fabric the frame is as it was: the 3-GPU job is offered, spread.
    flat_sim, flat = point_after_arrivals(cluster(2, 2, fabric=False), busy, pending)
    assert flat is not None and "three" in offered(flat)
    assert any(len(servers_of(c, g)) == 2 for g in offered(flat)["three"])
    # The policy says why the job waits and until when (the live controller stores it as its pending reason and
    # `pending_until`), and asks to be woken then; from then it is offered spread.
    policy = RLPolicy(model=None, label="test", explain=False)
    three = [j for j in sim.pending.values() if j.spec.name == "three"]
    decisions = answered(policy.deliberate(sim.view, three, sim.now), policy.answer)  # nothing to answer: held
    until = 10.0 + NODE_WAIT_S
    assert decisions == [Wait(three[0].id, decisions[0].reason, until), WakeAt(until)], decisions
    assert decisions[0].reason.startswith("waits for one server to hold its 3 GPUs (now they would span more")
    assert not any(isinstance(d, Wait) for d in answered(RLPolicy(None, "flat").deliberate(
        flat_sim.view, [j for j in flat_sim.pending.values() if j.spec.name == "three"], flat_sim.now), lambda p: WAIT))
    sim.now = sim.view.now = 10.0 + NODE_WAIT_S
    later = decision_point(sim.view, sim.pending.values(), sim.now)
    assert later is not None and any(len(servers_of(c, g)) == 2 for g in offered(later)["three"])


def test_a_waiting_gang_is_offered_only_the_fewest_servers() -> None:
    # 2 racks of 3 servers x 4 GPUs. Rack 0: 8 free GPUs, no whole server (the placements that keep a gang in one
    # rack spread it over 3 servers); rack 1: servers 3 and 4 whole, one GPU free on server 5.
    c = cluster(6, 3)
    busy = [Placed(job(f"b{g}", 1), Placement((g,)), 50_000.0) for g in (0, 4, 8, 9, 21, 22, 23)]
    gang = job("gang", 8, submit=5.0, model="MoE")
    sim, point = point_after_arrivals(c, busy, [gang])
    assert [servers_of(c, p.gpus) for p in Planner(sim.view).candidates(gang)] == [{0, 1, 2}]
    assert point is not None
    cands = offered(point)["gang"]
    assert cands and all(servers_of(c, g) == {3, 4} for g in cands), "whole servers, as topology places it"


def test_a_waiting_gang_is_preempted_for_only_by_victims_that_free_the_fewest_servers() -> None:
    # 3 servers x 4 GPUs, 2 GPUs of each held by a job that has had an hour of GPU service more than once over (a
    # lower LAS queue than a new job): an 8-GPU gang lacks 2 GPUs. One victim frees them, spread over 3 servers;
    # the fewest servers (2) need two victims.
    busy = [Placed(job(f"old{s}", 2), Placement((4 * s, 4 * s + 1)), 50_000.0, attained_gpu_s=20_000.0 + s)
            for s in range(3)]
    gang = job("gang", 8, submit=5.0, model="MoE")
    for fabric, victims, spans in ((True, 2, 2), (False, 1, 3)):
        c = cluster(3, 3, fabric=fabric)
        _, point = point_after_arrivals(c, busy, [gang])
        assert point is not None
        slots = [s for s in point.slots if s is not None]
        assert slots and all(s.job.spec.name == "gang" and s.victims for s in slots)
        for s in slots:
            assert len(s.victims) == victims, (fabric, s.victims)
            assert all(len(servers_of(c, p.gpus)) == spans for p in s.candidates), (fabric, s.candidates)


def test_a_gang_whose_wait_is_over_starts_spread() -> None:
    busy = [Placed(job(f"b{g}", 1), Placement((g,)), 500_000.0) for g in (0, 4, 8)]
    c = cluster(3, 3)
    pending = [job("gang", 8, submit=0.0, model="MoE"), job("late", 1, submit=GANG_WAIT_S + 1.0)]
    _, point = point_after_arrivals(c, busy, pending)
    assert point is not None and any(len(servers_of(c, g)) == 3 for g in offered(point)["gang"])


def test_the_rule_s_priority_exception() -> None:
    """A job that outranks a running preemptible job never waits (the priority rules would preempt for it)."""
    c = cluster(2, 2)
    busy = [Placed(job(f"b{g}", 1), Placement((g,)), 50_000.0) for g in (0, 1, 4, 5)]
    high = JobSpec(name="high", submit_s=10.0, num_gpus=3, duration_s=100.0, model="ResNet-50-bs64", priority=5)
    _, point = point_after_arrivals(c, busy, [high])
    assert point is not None and "high" in offered(point)
    assert len(ORDERS) * MAX_CANDIDATES + 1 == point.mask.size


def test_free_once_freed_counts_what_giving_the_victims_back_frees() -> None:
    """Per node, the whole free GPUs once the victims leave, on random busy clusters with MPS shares: the count
    `CompactnessWait.room` reads, against giving each victim back to the plan."""
    rng = np.random.default_rng(7)
    c = cluster(4, 2)
    for trial in range(40):
        state, model, running = ClusterState(c, catalog()), ContentionModel(c), {}
        free = np.ones(c.num_gpus)
        for i in range(int(rng.integers(3, 12))):
            share = float(rng.choice([1.0, 0.5, 0.25]))
            fits = np.flatnonzero(free >= share - 1e-9)
            if share == 1.0:
                n = int(rng.integers(1, 4))
                if len(fits) < n:
                    continue
                gpus = tuple(sorted(rng.choice(fits, n, replace=False).tolist()))
            else:
                if not len(fits):
                    continue
                gpus = (int(rng.choice(fits)),)
            spec = job(f"r{i}", share if share < 1 else len(gpus))
            placement = Placement(gpus, share)
            state.allocate(100 + i, spec, placement)
            model.add(100 + i, spec, placement)
            r = Job(100 + i, spec, 100.0)
            r.placement, r.start_s = placement, 0.0
            running[r.id] = r
            free[list(gpus)] -= share
        view = ClusterView(state, model, running)
        jobs = list(running.values())
        victims = [jobs[k] for k in rng.permutation(len(jobs))[:int(rng.integers(0, len(jobs) + 1))]]
        spec = job("g", 6)
        planner = Planner(view)
        counted = planner.free_once_freed(spec, victims)
        for v in victims:
            planner.give_back(v)
        assert counted.tolist() == planner.node_free.tolist(), trial
        for k, w in ((2, 8), (2, 6), (1, 3)):
            top = sorted(planner.node_free.tolist())[-k:]
            assert CompactnessWait.room(Planner(view), job("g", w), victims) == (sum(top) >= w)


@pytest.mark.parametrize(("spec", "end"), [(job("one", 4, submit=7.0), 7.0 + NODE_WAIT_S),
                                           (job("gang", 8, submit=7.0), 7.0 + GANG_WAIT_S),
                                           (job("share", 0.5, submit=7.0), None)])
def test_when_a_wait_ends(spec: JobSpec, end: float | None) -> None:
    assert CompactnessWait().end(cluster(2, 2), spec) == end
