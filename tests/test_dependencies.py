"""Dependencies and arrays (scheduler.core.dependencies) in the simulator, on small inline clusters, and the rule's
own functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import make_policy
from scheduler.core.dependencies import (
    Condition,
    Dependency,
    Outcome,
    array_room,
    check_acyclic,
    holds,
    parse_dependency,
    readiness,
)
from scheduler.core.model import JobPhase, JobSpec
from scheduler.core.simulator import SimulationError, Simulator
from scheduler.core.traces import load_trace
from scheduler.core.traces.trace import TraceError
from tests.conftest import small_cluster


def djob(name: str, submit: float, gpus: float, duration: float, *deps: tuple[str, str], limit: float | None = None,
         array: str | None = None, max_running: int | None = None) -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=gpus, duration_s=duration, model="ResNet-50-bs64",
                   depends_on=tuple(Dependency(j, Condition(c)) for c, j in deps), time_limit_s=limit, array=array,
                   array_max_running=max_running)


def run(specs: list[JobSpec], policy: str = "fifo-backfill", gpus: int = 4) -> tuple[Simulator, dict]:
    sim = Simulator(small_cluster(nodes=1, gpus=gpus), specs, make_policy(policy), contention=False)
    result = sim.run()
    return sim, {j.spec.name: j for j in result.jobs}


def test_the_conditions() -> None:
    assert holds(Condition.AFTEROK, None) is None
    assert holds(Condition.AFTEROK, Outcome.SUCCEEDED) and holds(Condition.AFTEROK, Outcome.FAILED) is False
    assert holds(Condition.AFTERNOTOK, Outcome.FAILED) and holds(Condition.AFTERNOTOK, Outcome.SUCCEEDED) is False
    assert holds(Condition.AFTERANY, Outcome.FAILED) and holds(Condition.AFTERANY, Outcome.SUCCEEDED)
    ends = {"12": Outcome.SUCCEEDED, "13": None, "14": Outcome.FAILED}
    deps = [Dependency("12"), Dependency("13"), Dependency("14", Condition.AFTERANY)]
    assert readiness(deps, ends.get) == readiness(deps, ends.get)
    assert readiness(deps, ends.get).why == "waiting for job 13 to succeed"
    never = readiness([Dependency("14")], ends.get)
    assert never.never and "it runs afterok job 14, which ended without succeeding" in never.why
    assert readiness(deps[:1], ends.get).ready


def test_parse_dependency() -> None:
    assert parse_dependency("afterok:12:13,afterany:14") == [Dependency("12"), Dependency("13"),
                                                              Dependency("14", Condition.AFTERANY)]
    with pytest.raises(ValueError, match="'after' is not a condition"):
        parse_dependency("after:1")
    with pytest.raises(ValueError, match="name at least one job"):
        parse_dependency("afterok")


def test_check_acyclic_names_the_cycle() -> None:
    check_acyclic({"a": [], "b": ["a"], "c": ["a", "b"]})
    with pytest.raises(ValueError, match="a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c"):
        check_acyclic({"a": ["b"], "b": ["c"], "c": ["a"]})
    with pytest.raises(ValueError, match="does not exist"):
        check_acyclic({"a": ["z"]})


def test_a_pipeline_runs_in_order_and_a_branch_that_can_never_run_is_cancelled() -> None:
    """prep -> train (afterok) -> eval (afterok); `cleanup` runs after train whatever happens; `on-fail` only if
    train fails, which it does not: cancelled, and `after-on-fail` (afterok on it) with it."""
    specs = [djob("prep", 0, 1, 100), djob("train", 0, 4, 200, ("afterok", "prep")),
             djob("eval", 0, 1, 50, ("afterok", "train")), djob("cleanup", 0, 1, 10, ("afterany", "train")),
             djob("on-fail", 0, 1, 10, ("afternotok", "train")),
             djob("after-on-fail", 0, 1, 10, ("afterok", "on-fail"))]
    sim, jobs = run(specs)
    assert jobs["train"].first_start_s == pytest.approx(100.0)
    assert jobs["eval"].first_start_s == pytest.approx(300.0) and jobs["cleanup"].first_start_s == pytest.approx(300)
    assert jobs["on-fail"].state is JobPhase.CANCELLED and jobs["on-fail"].end_s == pytest.approx(300.0)
    assert "it runs afternotok job train, which succeeded" in jobs["on-fail"].reject_reason
    assert jobs["after-on-fail"].state is JobPhase.CANCELLED
    assert sim.metrics()["jobs_cancelled"] == 2


def test_a_timed_out_job_meets_afternotok() -> None:
    specs = [djob("train", 0, 1, 100, limit=50), djob("retry", 0, 1, 10, ("afternotok", "train")),
             djob("report", 0, 1, 10, ("afterok", "train"))]
    _, jobs = run(specs)
    assert jobs["train"].state is JobPhase.TIMED_OUT
    assert jobs["retry"].first_start_s == pytest.approx(50.0) and jobs["report"].state is JobPhase.CANCELLED


def test_a_waiting_job_says_what_it_waits_for() -> None:
    sim = Simulator(small_cluster(nodes=1, gpus=4), [djob("a", 0, 1, 100), djob("b", 0, 1, 10, ("afterok", "a"))],
                    make_policy("fifo"), contention=False)
    sim.advance()
    sim.schedule()
    assert sim.pending_reasons[1] == "waiting for job a to succeed" and 1 in sim.blocked


def test_a_cycle_in_a_trace_is_refused() -> None:
    with pytest.raises(SimulationError, match="depends_on: dependencies form a cycle"):
        Simulator(small_cluster(), [djob("a", 0, 1, 1, ("afterok", "b")), djob("b", 0, 1, 1, ("afterok", "a"))],
                  make_policy("fifo"))


@pytest.mark.parametrize("policy", ["fifo", "sjf", "tiresias", "consolidate"])
def test_an_array_runs_at_most_max_running_tasks_at_once(policy: str) -> None:
    sim = Simulator(small_cluster(nodes=1, gpus=8), [djob(f"t{i}", 0, 1, 100, array="sweep", max_running=3)
                                                     for i in range(7)], make_policy(policy), contention=False)
    most = 0
    while sim.advance():
        sim.schedule()
        most = max(most, sum(j.spec.array == "sweep" for j in sim.running.values()))
    assert most == 3 and all(j.state is JobPhase.DONE for j in sim.jobs)
    assert array_room(3, 1) == 2 and array_room(None, 5) is None and array_room(2, 5) == 0


def test_the_corral_csv_carries_dependencies_and_arrays(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s,kind,model,depends_on,array,array_max_running\n"
                    "prep,0,1,100,training,,,,\n"
                    "train,0,2,200,training,,afterok:prep,,\n"
                    "t0,0,1,50,training,,afterany:train,sweep,1\n"
                    "t1,0,1,50,training,,afterany:train,sweep,1\n")
    trace = load_trace(str(path))
    by = {j.name: j for j in trace.jobs}
    assert by["train"].depends_on == (Dependency("prep"),) and by["t1"].array == "sweep"
    result = Simulator(small_cluster(nodes=1, gpus=4), trace.jobs, make_policy("fifo"), contention=False).run()
    ends = {j.spec.name: (j.first_start_s, j.end_s) for j in result.jobs}
    assert ends["train"][0] == pytest.approx(100.0) and ends["t0"][0] == pytest.approx(300.0)
    assert ends["t1"][0] == pytest.approx(350.0), "one task of the array at a time"
    path.write_text("job_id,submit_s,num_gpus,duration_s,kind,model,depends_on\na,0,1,1,training,,later:b\n")
    with pytest.raises(TraceError, match="line 2: column 'depends_on': 'later' is not a condition"):
        load_trace(str(path))
