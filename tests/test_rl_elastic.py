"""The learned policy's size choices (issue 49, item 3; `policies.rl_elastic`, encoding 8): start sizes, the grow and
shrink slots, the size features, and the teachers that sizing is learned from (`grow:POLICY`,
`marginal-gain-expected`, `agents.imitation`)."""

from __future__ import annotations

import numpy as np
import pytest

from agents.imitation import BEST, Teachers, teacher_action
from agents.scenarios import Scenario
from policies import make_policy
from policies.marginal_gain import GrowIdle, MarginalGainExpected
from policies.rl_encoding import (
    CANDIDATE_FEATURES,
    ELASTIC_CLUSTER_AT,
    ELASTIC_JOB_AT,
    JOB_FEATURES,
    MAX_CANDIDATES,
    ORDERS,
    SIZE_CANDIDATE_AT,
    SLOT_SIZE,
    WAIT,
    DecisionPoint,
    JobSlot,
    decision_point,
)
from scheduler.core.decisions import Place, Resize
from scheduler.core.model import JobSpec, Placement, parse_cluster
from scheduler.core.simulator import Simulator

MODEL = "ResNet-50-bs64"
GROW, SHRINK = ORDERS.index("grow"), ORDERS.index("shrink")


def spec(name: str, submit: float, gpus: int, work: float, lo: int | None = None, hi: int | None = None) -> JobSpec:
    elastic = {"min_gpus": lo, "max_gpus": hi, "resize_pause_s": 10.0} if lo is not None else {}
    return JobSpec(name=name, submit_s=submit, num_gpus=gpus, duration_s=work, model=MODEL,
                   **elastic)  # type: ignore[arg-type]


def driven(specs: list[JobSpec], nodes: int = 1) -> Simulator:
    """A simulator its test drives (no policy), with every job arrived."""
    sim = Simulator(parse_cluster(f"dgx-a100:{nodes}"), specs, None, contention=False, preempt_overhead_s=0.0)
    while any(j.spec.submit_s > sim.now for j in sim.jobs) or not sim.pending:
        if not sim.advance():
            break
    return sim


def slot_of(point: DecisionPoint, name: str) -> JobSlot | None:
    return point.slots[ORDERS.index(name)]


def sizes_offered(slot: JobSlot) -> list[int]:
    return [len(p.gpus) for p in slot.candidates]


def size_features(point: DecisionPoint, j: int, k: int) -> list[float]:
    at = j * SLOT_SIZE + JOB_FEATURES + k * CANDIDATE_FEATURES + SIZE_CANDIDATE_AT
    return point.obs[at:at + 3].tolist()


# ---- starts at several sizes ----------------------------------------------------------------------------------------


def test_an_elastic_job_is_offered_its_submitted_smallest_and_largest_fitting_sizes() -> None:
    sim = driven([spec("r", 0.0, 2, 10_000.0), spec("e", 0.0, 4, 1_000.0, 2, 8)])
    sim.apply([Place(0, Placement((0, 1)))])
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None
    j = ORDERS.index("fifo")
    slot = point.slots[j]
    assert slot is not None and slot.job.spec.name == "e"
    assert sizes_offered(slot) == [4, 2, 6]  # submitted first, then the smallest, then the most the 6 free GPUs hold
    submitted, smallest, largest = (size_features(point, j, k) for k in range(3))
    assert submitted == [0.0, 0.0, 0.0]
    assert smallest[0] == 0.0 and smallest[1] == pytest.approx(0.5)  # log2(4 / 2) / 2
    assert largest[0] == pytest.approx(np.log2(6 / 4) / 2, rel=1e-5) and largest[1] == 0.0
    # The job's own features say it is elastic, over a range of 2 to 8 (log2 4 / 4).
    at = j * SLOT_SIZE + ELASTIC_JOB_AT
    assert point.obs[at:at + 2].tolist() == [1.0, pytest.approx(0.5)]
    # Each choice starts it at that size.
    (place,) = point.decisions(j * MAX_CANDIDATES + 2, "test")
    assert isinstance(place, Place) and len(place.placement.gpus) == 6


def test_an_elastic_job_too_large_at_its_submitted_size_starts_at_a_size_that_fits() -> None:
    # 3 GPUs free: the rigid job of 4 fits nowhere (no start slot), the elastic one is offered 2 and 3.
    sim = driven([spec("r", 0.0, 5, 10_000.0), spec("rigid", 0.0, 4, 100.0), spec("e", 0.0, 4, 1_000.0, 2, 8)])
    sim.apply([Place(0, Placement(tuple(range(5))))])
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None
    starts = [s for s in point.slots[:6] if s is not None]
    assert starts and all(s.job.spec.name == "e" for s in starts)
    assert sorted(sizes_offered(starts[0])) == [2, 3]


def test_a_workload_without_elastic_jobs_sees_no_size_features_and_no_resize_slots() -> None:
    sim = driven([spec("r", 0.0, 2, 10_000.0), spec("a", 0.0, 4, 1_000.0), spec("b", 0.0, 1, 100.0)])
    sim.apply([Place(0, Placement((0, 1)))])
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None and point.slots[GROW] is None and point.slots[SHRINK] is None
    for j, slot in enumerate(point.slots):
        if slot is None:
            continue
        assert point.obs[j * SLOT_SIZE + ELASTIC_JOB_AT:j * SLOT_SIZE + ELASTIC_JOB_AT + 3].tolist() == [0.0] * 3
        for k in range(len(slot.candidates)):
            assert size_features(point, j, k) == [0.0] * 3
    assert point.obs[ELASTIC_CLUSTER_AT:].tolist() == [0.0, 0.0]


# ---- grows ----------------------------------------------------------------------------------------------------------


def grown_setup(work: float = 20_000.0) -> Simulator:
    """e (elastic 2-8, at 4 GPUs) beside r, which ends at t=100: then 4 GPUs are idle and nothing is queued."""
    sim = driven([spec("e", 0.0, 4, work, 2, 8), spec("r", 0.0, 4, 100.0)])
    sim.apply([Place(0, Placement((0, 1, 2, 3))), Place(1, Placement((4, 5, 6, 7)))])
    while 1 in sim.running:
        sim.advance()
    assert not sim.pending and sim.view.free_whole == 4
    return sim


def test_the_grow_slot_offers_a_running_elastic_job_larger_sizes_and_may_be_declined() -> None:
    sim = grown_setup()
    point = decision_point(sim.view, [], sim.now)
    assert point is not None  # with an empty queue: a running elastic job could grow
    slot = point.slots[GROW]
    assert slot is not None and slot.job.id == 0 and slot.kind == "grow"
    assert sizes_offered(slot) == [5, 6, 7, 8]
    assert all(set((0, 1, 2, 3)) <= set(p.gpus) for p in slot.candidates)  # it keeps the GPUs it runs on
    assert point.mask[WAIT]  # not growing is a choice
    assert [s for s in point.slots if s is not None] == [slot]
    (resize,) = point.decisions(GROW * MAX_CANDIDATES + 3, "test")
    assert isinstance(resize, Resize) and len(resize.placement.gpus) == 8
    assert sim.apply([resize]) and len(sim.running[0].placement.gpus) == 8  # type: ignore[union-attr]
    # Resized at this instant: the interval rule leaves nothing to offer (no idle GPU either).
    assert decision_point(sim.view, [], sim.now) is None


def test_no_grow_is_offered_whose_pause_outweighs_its_gain() -> None:
    sim = grown_setup(work=110.0)  # 10 s of work left at t=100: a 10 s pause can only lose
    assert decision_point(sim.view, [], sim.now) is None


def test_the_grow_teacher_maps_onto_the_grow_slot() -> None:
    sim = grown_setup()
    point = decision_point(sim.view, [], sim.now)
    assert point is not None
    action, exact = teacher_action(sim, point, "grow:fifo", queue=[])
    assert exact and action // MAX_CANDIDATES == GROW
    # fifo alone never grows: the teacher declines.
    action, exact = teacher_action(sim, point, "fifo", queue=[])
    assert exact and action == WAIT


# ---- shrinks --------------------------------------------------------------------------------------------------------


def test_the_shrink_slot_starts_a_waiting_job_on_gpus_an_elastic_job_gives_back() -> None:
    # e holds all 8 GPUs (elastic 2-8) with much work left; a short 4-GPU job waits.
    sim = driven([spec("e", 0.0, 8, 100_000.0, 2, 8), spec("short", 50.0, 4, 300.0)])
    sim.apply([Place(0, Placement(tuple(range(8))))])
    while not sim.pending:
        sim.advance()
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None
    slot = point.slots[SHRINK]
    assert slot is not None and slot.job.spec.name == "short" and slot.kind == "shrink"
    assert point.mask[WAIT]  # a shrink, like a preemption, may be declined
    decisions = point.decisions(SHRINK * MAX_CANDIDATES, "test")
    shrink, place = decisions
    assert isinstance(shrink, Resize) and shrink.job_id == 0 and shrink.for_job == 1 and len(shrink.placement.gpus) == 4
    assert isinstance(place, Place) and place.job_id == 1
    assert not set(shrink.placement.gpus) & set(place.placement.gpus)
    assert sim.apply(decisions)
    assert len(sim.running[0].placement.gpus) == 4 and 1 in sim.running  # type: ignore[union-attr]
    # The GPUs it gave back are counted in the slot's victim features (4 of the 4 the job asks for).
    assert point.obs[SHRINK * SLOT_SIZE + 1 + len(ORDERS) + 9] == pytest.approx(1.0)


# ---- the teachers ---------------------------------------------------------------------------------------------------


def test_grow_wraps_a_policy_and_gives_idle_gpus_only_where_it_does_nothing() -> None:
    sim = grown_setup()
    wrapped = make_policy("grow:fifo")
    assert isinstance(wrapped, GrowIdle) and wrapped.name == "grow:fifo" and not wrapped.oracle
    (grow,) = [d for d in wrapped.schedule(sim.view, [], sim.now) if isinstance(d, Resize)]
    assert grow.job_id == 0 and len(grow.placement.gpus) > 4
    assert make_policy("grow:gittins").time_sharing  # (the priority rules read it through the wrapper)
    # A whole run: the elastic job ends sooner grown than under fifo alone.
    specs = [spec("e", 0.0, 4, 20_000.0, 2, 8), spec("r", 0.0, 4, 100.0)]
    ends = {p: Simulator(parse_cluster("dgx-a100:1"), specs, make_policy(p), contention=False).run().metrics
            for p in ("fifo", "grow:fifo")}
    assert ends["grow:fifo"]["avg_jct_s"] < ends["fifo"]["avg_jct_s"]


def test_marginal_gain_expected_reads_no_job_s_true_work() -> None:
    policy = make_policy("marginal-gain-expected")
    assert isinstance(policy, MarginalGainExpected) and not policy.oracle and make_policy("marginal-gain").oracle
    # Two jobs alike but for their true work: the oracle starts the shorter first, the expected one cannot tell them
    # apart and keeps their arrival order.
    specs = [spec("long", 0.0, 8, 10_000.0), spec("short", 0.0, 8, 100.0)]
    firsts = {}
    for name in ("marginal-gain", "marginal-gain-expected"):
        sim = Simulator(parse_cluster("dgx-a100:1"), specs, make_policy(name), contention=False)
        sim.run()
        firsts[name] = min(sim.jobs, key=lambda j: j.first_start_s).spec.name  # type: ignore[arg-type,return-value]
    assert firsts == {"marginal-gain": "short", "marginal-gain-expected": "long"}


def test_an_elastic_training_window_is_taught_by_its_band_s_heuristic_wrapped_in_grow() -> None:
    plain = Scenario("synthetic", "dgx-a100", 2.0, 50, seed=1, nodes=2)
    elastic = Scenario("synthetic", "dgx-a100", 2.0, 50, seed=1, nodes=2, elastic=True)
    assert BEST.for_scenario(plain) == "gittins" and BEST.for_scenario(elastic) == "grow:gittins"
    assert Teachers("fifo", sizing=None).for_scenario(elastic) == "fifo"
    jobs = elastic.build()[1]
    assert any(j.elastic for j in jobs) and not any(j.elastic for j in plain.build()[1])
    assert [(j.name, j.num_gpus) for j in jobs] == [(j.name, j.num_gpus) for j in plain.build()[1]]
    assert elastic.label.endswith(", elastic")
