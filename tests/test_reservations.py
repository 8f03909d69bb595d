"""Time limits and reservations with EASY backfill (scheduler.core.reservations) in the simulator, on small inline
clusters."""

from __future__ import annotations

import math

import pytest

from policies import make_policy
from scheduler.core.model import JobPhase, JobSpec
from scheduler.core.reservations import ReservationFrame, ReservationRule, frame_policy, plan, with_time_limits
from scheduler.core.simulator import Simulator
from tests.conftest import small_cluster


def tjob(name: str, submit: float, gpus: float, duration: float, limit: float | None = None,
         priority: int = 0) -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=gpus, duration_s=duration, model="ResNet-50-bs64",
                   time_limit_s=limit, priority=priority)


def run(specs: list[JobSpec], policy: str = "sjf", rule: ReservationRule | None = None, nodes: int = 1,
        gpus: int = 4) -> tuple[Simulator, dict[str, object]]:
    sim = Simulator(small_cluster(nodes=nodes, gpus=gpus), specs, make_policy(policy), contention=False,
                    preempt_overhead_s=0.0, reservations=rule)
    result = sim.run()
    return sim, {j.spec.name: j for j in result.jobs}


# ---- time limits --------------------------------------------------------------------------------------------------


def test_a_run_that_reaches_its_time_limit_is_stopped_and_timed_out() -> None:
    sim, jobs = run([tjob("over", 0, 2, 100, limit=60), tjob("under", 0, 2, 100, limit=150),
                     tjob("exact", 0, 1, 50, limit=50), tjob("none", 0, 1, 80)], gpus=8)
    over, under, exact, none = (jobs[n] for n in ("over", "under", "exact", "none"))
    assert over.state is JobPhase.TIMED_OUT and over.end_s == pytest.approx(60.0)
    assert under.state is JobPhase.DONE and under.end_s == pytest.approx(100.0)
    assert exact.state is JobPhase.DONE, "a run that finishes at its limit succeeds"
    assert none.state is JobPhase.DONE
    metrics = sim.metrics()
    assert metrics["jobs_timed_out"] == 1 and metrics["jobs_completed"] == 3


def test_the_limit_applies_to_each_run() -> None:
    """A preempted run's successor gets its own limit: Tiresias preempts `long` for `short`, and `long`, whose two
    runs are each under its limit though the sum is not, finishes."""
    _, jobs = run([tjob("long", 0, 4, 3000, limit=2500), tjob("short", 2000, 4, 100)], policy="tiresias")
    assert jobs["long"].preemptions == 1 and jobs["long"].state is JobPhase.DONE


def test_without_time_limits_the_metrics_say_nothing_of_them() -> None:
    sim, _ = run([tjob("a", 0, 1, 10)])
    assert "jobs_timed_out" not in sim.metrics()


def test_with_time_limits() -> None:
    jobs = with_time_limits([tjob("a", 0, 1, 100), tjob("b", 0, 1, 100, limit=7)], 1.5)
    assert [j.time_limit_s for j in jobs] == [150.0, 7]
    with pytest.raises(ValueError, match="positive"):
        with_time_limits(jobs, 0)
    with pytest.raises(ValueError, match="time_limit_s must be positive"):
        tjob("c", 0, 1, 1, limit=-1)


# ---- reservations ----------------------------------------------------------------------------------------------------


def stream() -> list[JobSpec]:
    """A 4-GPU job arrives at t=5 on a 4-GPU node fed a 1-GPU job every 10 s, each running 30 s, until t=2000."""
    small = [tjob(f"s{i}", 10.0 * i, 1, 30, limit=40) for i in range(200)]
    return [*small, tjob("big", 5, 4, 100, limit=120)]


@pytest.mark.parametrize("policy", ["sjf", "fifo-backfill", "consolidate"])
def test_without_a_reservation_the_big_job_starves_and_with_one_it_starts(policy: str) -> None:
    _, starved = run(stream(), policy)
    big = starved["big"].first_start_s
    assert big is not None and big >= 1990.0, "the stream keeps a GPU busy until it ends"
    _, served = run(stream(), policy, ReservationRule(after_s=None, share=1.0))
    started = served["big"].first_start_s
    assert started is not None and started <= 5 + 40.0, "it starts once the jobs running at t=5 reach their limits"
    assert all(j.state is JobPhase.DONE for j in served.values())  # type: ignore[attr-defined]


def test_the_wait_rule_reserves_once_a_job_has_waited() -> None:
    _, jobs = run(stream(), "sjf", ReservationRule(after_s=300.0, share=None))
    started = jobs["big"].first_start_s
    assert started is not None and 305.0 <= started <= 305.0 + 40.0


def test_backfill_takes_only_jobs_that_end_before_the_reservation_starts() -> None:
    """One GPU of four runs a job whose limit ends at t=500; the 4-GPU holder reserves the node from t=500. A job
    with a 300-s limit backfills onto the held GPUs at once; one with a 600-s limit, or none, waits for the holder."""
    specs = [tjob("busy", 0, 1, 400, limit=500), tjob("big", 1, 4, 100, limit=200),
             tjob("fits", 2, 1, 250, limit=300), tjob("too-long", 2, 1, 250, limit=600), tjob("no-limit", 2, 1, 250)]
    sim, jobs = run(specs, "sjf", ReservationRule(after_s=None, share=1.0))
    assert jobs["fits"].first_start_s == pytest.approx(2.0)
    assert jobs["big"].first_start_s == pytest.approx(400.0), "busy ended early: the holder starts at once"
    assert jobs["too-long"].first_start_s == pytest.approx(500.0)
    assert jobs["no-limit"].first_start_s == pytest.approx(500.0)
    frame = sim.policy
    assert isinstance(frame, ReservationFrame) and frame.backfilled == 1
    # Idle while held: 3 free GPUs from t=1, 2 while `fits` runs (2 to 252), 3 again until busy ends at 400.
    assert frame.held_gpu_s == pytest.approx(3 * 1 + 2 * 250 + 3 * 148)


def test_the_pending_reasons_name_the_reservation() -> None:
    specs = [tjob("busy", 0, 2, 400, limit=500), tjob("big", 1, 4, 100, limit=200), tjob("small", 2, 1, 50)]
    sim = Simulator(small_cluster(nodes=1, gpus=4), specs, make_policy("sjf"), contention=False,
                    reservations=ReservationRule(after_s=None, share=1.0))
    while sim.advance() and sim.now < 2:
        sim.schedule()
    sim.schedule()
    assert sim.pending_reasons[1].startswith("holds a reservation for 4 GPUs on 1 node(s) (2 free now")
    assert "it starts within 8 min, when busy reach their time limits" in sim.pending_reasons[1]
    assert "held for big's reservation" in sim.pending_reasons[2]


def test_a_higher_priority_job_holds_the_reservation_first() -> None:
    specs = [tjob("busy", 0, 4, 100, limit=100), tjob("old", 1, 4, 50, limit=60),
             tjob("urgent", 2, 4, 50, limit=60, priority=5)]
    _, jobs = run(specs, "fifo-backfill", ReservationRule(after_s=None, share=1.0))
    assert jobs["urgent"].first_start_s == pytest.approx(100.0)
    assert jobs["old"].first_start_s == pytest.approx(150.0)


def test_plan_holds_the_gpus_free_soonest_on_few_nodes() -> None:
    specs = [tjob("a", 0, 4, 1000, limit=300), tjob("b", 0, 2, 1000, limit=100), tjob("c", 0, 2, 1000)]
    sim = Simulator(small_cluster(nodes=2, gpus=4), specs, make_policy("consolidate"), contention=False)
    sim.advance()
    sim.schedule()
    res = plan(sim.view, tjob("big", 0, 4, 10), sim.now)
    assert res is not None
    b_gpus = set(sim.view.placement(1).gpus)
    c_gpus = set(sim.view.placement(2).gpus)
    # b's 2 GPUs free at 100, a's 4 at 300, c's never: b's two and two of a's; the start is a's limit.
    assert b_gpus <= set(res.gpus) and not c_gpus & set(res.gpus)
    assert res.start_s == pytest.approx(300.0) and set(res.waiting_on) == {0, 1}
    alone = plan(sim.view, tjob("huge", 0, 8, 10), sim.now)
    assert alone is not None and math.isinf(alone.start_s), "one of its GPUs waits on a run without a limit"


def test_rule_checks_and_frame_policy() -> None:
    with pytest.raises(ValueError, match="reserve share"):
        ReservationRule(share=0.0)
    with pytest.raises(ValueError, match="reserve after"):
        ReservationRule(after_s=-1.0)
    fifo = make_policy("fifo")
    framed = frame_policy(fifo, ReservationRule())
    assert isinstance(framed, ReservationFrame) and frame_policy(framed, ReservationRule()) is framed
    assert not isinstance(frame_policy(fifo), ReservationFrame)
