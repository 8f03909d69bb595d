"""Start estimates by the rules that decide (issue 50, item 1: `scheduler.core.estimates`): the replay of the present
under the active policy, on small inline clusters, so that each rule is seen alone."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Hashable
from pathlib import Path
from types import ModuleType

import pytest

from agents.evaluate import build_synthetic_cases
from policies import make_policy
from scheduler.core.dependencies import Dependency
from scheduler.core.estimates import Bounds, Estimates, Outlook, estimate, expected_arrivals
from scheduler.core.model import JobSpec, Placement, parse_cluster
from scheduler.core.reasons import Code
from scheduler.core.replay import Present, Waiting, present_of
from scheduler.core.simulator import Placed, Simulator
from scheduler.core.tenancy import Team, Teams

MODEL = "ResNet-50-bs64"
NODE = parse_cluster("dgx-a100:1")  # 8 GPUs on one NVLink server


def spec(name: str, gpus: float, seconds: float, **more: object) -> JobSpec:
    return JobSpec(name=name, submit_s=0.0, num_gpus=gpus, duration_s=seconds, model=MODEL,
                   **more)  # type: ignore[arg-type]


def running(name: str, gpus: range, seconds: float, **more: object) -> Placed:
    return Placed(spec(name, len(gpus), seconds, **more), Placement(tuple(gpus)), seconds)


def replay(present: Present, policy: str, bounds: Bounds | None = None) -> Estimates:
    return estimate(present, make_policy(policy), bounds or Bounds())


def start(est: Estimates, key: Hashable) -> float:
    e = est.by_key[key]
    assert e.outlook is Outlook.STARTS, e.text
    assert e.start_s is not None
    return e.start_s


def test_a_job_the_team_rules_never_let_run_says_so_instead_of_a_time() -> None:
    # A non-preemptible job of a team without quota may never borrow: the frame never starts it, even on an idle
    # cluster. The old replay gave it a time; this one says it never starts, and why (as data).
    teams = Teams({"lab": Team("lab", 8.0, None)})
    present = Present(NODE, [running("lab-run", range(4), 600.0, team="lab")],
                      [Waiting("stray", spec("stray", 1, 60.0, team="nobody", preemptible=False)),
                       Waiting("lab-next", spec("lab-next", 2, 60.0, team="lab"))], teams=teams, contention=False)
    est = replay(present, "fifo-backfill")
    never = est.by_key["stray"]
    assert never.outlook is Outlook.NEVER
    assert never.start_s is None
    assert never.why is not None and never.why.text  # the frame's reason, rendered from its data
    assert "never starts" in never.text
    assert start(est, "lab-next") == 0.0  # the team's own job is not held up by it


def test_a_job_larger_than_the_cluster_never_starts_rejected() -> None:
    est = replay(Present(NODE, [], [Waiting("huge", spec("huge", 16, 60.0))]), "fifo")
    assert est.by_key["huge"].outlook is Outlook.NEVER
    assert est.by_key["huge"].why is not None and est.by_key["huge"].why.code is Code.REJECTED


def _backfill_case() -> Present:
    # 6 of 8 GPUs busy for 1,000 s; an 8-GPU job submitted first, then a 1-GPU job of 100 s that fits in the gap.
    return Present(NODE, [running("busy", range(6), 1000.0)],
                   [Waiting("big", spec("big", 8, 500.0)), Waiting("small", spec("small", 1, 100.0))],
                   contention=False)


def test_a_backfilled_small_job_is_estimated_before_a_larger_one_submitted_earlier() -> None:
    est = replay(_backfill_case(), "fifo-backfill")
    assert start(est, "small") == 0.0
    assert start(est, "big") == pytest.approx(1000.0)
    # Under strict FIFO the same state gives the opposite order: the estimate is the policy's, not one fixed rule.
    strict = replay(_backfill_case(), "fifo")
    assert start(strict, "small") >= start(strict, "big") == pytest.approx(1000.0)


def test_the_estimates_follow_the_policy_order() -> None:
    def present() -> Present:
        return Present(NODE, [running("busy", range(8), 1000.0)],
                       [Waiting("long", spec("long", 8, 5000.0)), Waiting("short", spec("short", 8, 100.0))],
                       contention=False)

    fifo = replay(present(), "fifo")
    assert start(fifo, "long") == pytest.approx(1000.0)
    assert start(fifo, "short") == pytest.approx(6000.0)
    sjf = replay(present(), "sjf")
    assert start(sjf, "short") == pytest.approx(1000.0)
    assert start(sjf, "long") == pytest.approx(1100.0)


def test_the_horizon_and_the_queue_bound_the_replay_and_say_so() -> None:
    case = _backfill_case()
    case.pending.append(Waiting("third", spec("third", 1, 50.0)))
    est = replay(case, "fifo-backfill", Bounds(horizon_s=500.0, max_jobs=2))
    assert start(est, "small") == 0.0
    big = est.by_key["big"]
    assert big.outlook is Outlook.BEYOND and big.bound == "horizon" and big.start_s is None
    assert big.bound_s == 500.0
    assert est.by_key["third"].outlook is Outlook.BEYOND and est.by_key["third"].bound == "queue"
    assert est.reached_s <= 500.0
    events = replay(_backfill_case(), "fifo-backfill", Bounds(max_events=1))
    assert events.by_key["big"].outlook is Outlook.BEYOND and events.by_key["big"].bound == "events"
    with pytest.raises(ValueError, match="horizon_s"):
        Bounds(horizon_s=0.0)


def test_a_dependent_of_a_running_job_starts_when_it_ends() -> None:
    present = Present(NODE, [running("first", range(2), 300.0)],
                      [Waiting("then", spec("then", 1, 60.0, depends_on=(Dependency("first"),)))], contention=False)
    est = replay(present, "fifo-backfill")
    assert start(est, "then") == pytest.approx(300.0)  # not now, although 6 GPUs are free


def test_a_snapshot_of_a_running_simulation_estimates_its_own_future() -> None:
    # Nothing arrives after the snapshot and durations are exact: the replay's estimates are the starts that happen.
    jobs = [JobSpec(name=f"j{i}", submit_s=10.0 * i, num_gpus=g, duration_s=d, model=MODEL)
            for i, (g, d) in enumerate([(4, 900.0), (4, 700.0), (8, 300.0), (2, 200.0), (1, 50.0), (4, 400.0)])]
    sim = Simulator(NODE, jobs, make_policy("tiresias"))
    while sim.now < 50.0:  # every job has arrived
        sim.advance()
        sim.schedule()
    assert sim.pending
    now = sim.now
    est = estimate(present_of(sim), make_policy("tiresias"))
    sim.run()
    for key in est.by_key:
        assert isinstance(key, int)
        actual = sim.jobs[key].first_start_s
        assert actual is not None
        assert start(est, key) == pytest.approx(actual - now, abs=1.0), key


def test_tracking_a_job_stops_early_and_gives_it_the_same_estimate() -> None:
    def present() -> Present:
        return Present(NODE, [running("busy", range(8), 1000.0)],
                       [Waiting(f"q{i}", spec(f"q{i}", 8, 100.0 * (i + 1))) for i in range(5)], contention=False)

    whole = replay(present(), "sjf")
    tracked = estimate(present(), make_policy("sjf"), track={"q1"})
    assert tracked.by_key["q1"] == whole.by_key["q1"]
    assert tracked.events < whole.events  # it stopped once q1 started
    assert tracked.by_key["q4"].outlook is Outlook.BEYOND  # not replayed that far: no time is made up


def test_a_snapshot_carries_the_teams_and_their_usage() -> None:
    teams = Teams({"a": Team("a", 4.0, None), "b": Team("b", 4.0, 0.0)})
    # b's jobs come first and run 3,000 s; a's 1,000 s. b may not borrow beyond its quota of 4 GPUs.
    jobs = [JobSpec(name=f"{t}{i}", submit_s=60.0 * i + (30.0 if t == "a" else 0.0), num_gpus=4,
                    duration_s=1000.0 if t == "a" else 3000.0, model=MODEL, team=t) for i in range(3) for t in "ab"]
    sim = Simulator(NODE, jobs, make_policy("fifo"), teams=teams, contention=False)
    while sim.now < 150.0:
        sim.advance()
        sim.schedule()
    present = present_of(sim)
    assert present.teams is not None and present.teams.teams["b"] == teams.teams["b"]
    assert present.usage is not None and present.usage["a"] > 0 and present.usage["b"] > 0
    est = estimate(present, make_policy("fifo"))
    by_name = {j.spec.name: j.id for j in sim.jobs}  # (the snapshot's keys are the simulator's job ids)
    # When a0 ends, b1 is first in the queue but its team is at its quota: a1 takes the GPUs, b1 waits for b0.
    assert start(est, by_name["a1"]) == pytest.approx(1030.0 - sim.now)
    assert start(est, by_name["b1"]) == pytest.approx(3000.0 - sim.now)
    now = sim.now
    sim.run()  # and that is what happens
    for name in ("a1", "b1", "a2", "b2"):
        actual = sim.jobs[by_name[name]].first_start_s
        assert actual is not None and start(est, by_name[name]) == pytest.approx(actual - now)


def _benchmark() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "estimates.py"
    spec = importlib.util.spec_from_file_location("estimates_benchmark", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["estimates_benchmark"] = module
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_scores_both_estimates_against_what_happened() -> None:
    bench = _benchmark()
    assert bench.hit(100.0, 390.0) and bench.hit(700.0, 400.0)  # within 5 min; within 2x
    assert not bench.hit(1000.0, 400.0) and not bench.hit(None, 10.0)
    case = build_synthetic_cases("synthetic:60", "dgx-a100:2", 1, load=1.7)[0]
    out = bench.run_case((case, "fifo-backfill", 5, 0.75, 0.0, Bounds(), True, 3600.0))
    assert out["samples"], "a loaded case has arrivals that wait"
    for row in out["samples"]:
        assert row["actual_s"] > 0 and row["replay_outlook"] == "starts"
    # Exact durations and fifo-backfill on a short window: the replay is right where nothing later overtakes.
    assert bench.score(out["samples"], "replay_s")["within"] >= bench.score(out["samples"], "today_s")["within"]


def test_expected_arrivals_repeat_the_last_window_on_the_replays_clock() -> None:
    # Jobs submitted in the last hour (and only those) arrive again an hour after they did, in submission order;
    # nothing depends on them and they are in no array (they are stand-ins, not the jobs themselves).
    now = 10_000.0
    recent = [(now - 30.0, spec("late", 2, 60.0)), (now - 4_000.0, spec("old", 1, 60.0)),
              (now - 3_000.0, spec("early", 1, 90.0, depends_on=(Dependency("old"),), array="a"))]
    made = expected_arrivals(recent, now, window_s=3_600.0)
    assert [(s.submit_s, s.num_gpus, s.duration_s) for s in made] == [(600.0, 1.0, 90.0), (3_570.0, 2.0, 60.0)]
    assert all(s.depends_on == () and s.array is None for s in made)
    assert len({s.name for s in made}) == 2


def test_a_job_a_shortest_first_policy_would_pass_over_for_expected_arrivals_is_estimated_later() -> None:
    # All 8 GPUs busy for 1,000 s; a 4-hour 8-GPU job waits. In the last hour, a 10-minute 8-GPU job arrived every
    # 10 minutes. Under sjf the short ones that keep coming start first: an estimate assuming nothing arrives says
    # 1,000 s, one assuming the last hour's arrivals come again says after all five of them, and says so.
    present = Present(NODE, [running("busy", range(8), 1000.0)], [Waiting("long", spec("long", 8, 4 * 3600.0))],
                      contention=False)
    recent = [(t, spec(f"short{t:g}", 8, 600.0)) for t in (-3_000.0, -2_400.0, -1_800.0, -1_200.0, -600.0)]
    coming = expected_arrivals(recent, 0.0, window_s=3_600.0)
    alone = replay(present, "sjf")
    expected = estimate(present, make_policy("sjf"), Bounds(), arrivals=coming)
    assert start(alone, "long") == pytest.approx(1000.0)
    assert start(expected, "long") == pytest.approx(1000.0 + 5 * 600.0)  # (each arrives before the last one ends)
    assert "nothing new arriving" in alone.basis
    assert "5 job(s) submitted in the last" in expected.basis and set(expected.by_key) == {"long"}
