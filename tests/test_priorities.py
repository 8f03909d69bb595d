"""The priority rules (scheduler.core.priorities) in the simulator, on small inline clusters, under every policy."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest

from policies import available, make_policy
from scheduler.core.decisions import Decision, Place, Preempt
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.priorities import PriorityFrame, bands, may_preempt, with_priorities
from scheduler.core.simulator import SimulationError, Simulator
from scheduler.core.state import ClusterView
from scheduler.core.tenancy import Teams, TenancyFrame
from scheduler.core.traces import load_trace
from scheduler.core.traces.trace import TraceError
from tests.conftest import small_cluster

HEURISTICS = [p for p in available() if ":" not in p]
EVERY_POLICY = [*HEURISTICS, "rl:default"]


def pjob(name: str, submit: float, gpus: float, duration: float, priority: int = 0, preemptible: bool = True,
         team: str = "default") -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=gpus, duration_s=duration, model="ResNet-50-bs64",
                   priority=priority, preemptible=preemptible, team=team)


def run(specs: list[JobSpec], policy: str, nodes: int = 1, gpus: int = 4, teams: Teams | None = None) -> dict[str, Job]:
    sim = Simulator(small_cluster(nodes=nodes, gpus=gpus), specs, make_policy(policy), contention=False,
                    preempt_overhead_s=0.0, teams=teams)
    result = sim.run()
    return {j.spec.name: j for j in result.jobs}


def test_bands_and_may_preempt() -> None:
    jobs = [Job(i, pjob(f"j{i}", i, 1, 10, priority=p), 10) for i, p in enumerate([0, 5, 0, 5, -1])]
    assert [[j.id for j in b] for b in bands(jobs)] == [[1, 3], [0, 2], [4]]
    assert bands(jobs[:1]) == [[jobs[0]]] and bands([]) == []
    low, high, pinned = pjob("l", 0, 1, 1), pjob("h", 0, 1, 1, priority=3), pjob("p", 0, 1, 1, preemptible=False)
    assert may_preempt(low, high) and not may_preempt(high, low)
    assert not may_preempt(low, low) and may_preempt(low, low, equals=True)
    assert not may_preempt(pinned, high, equals=True)


@pytest.mark.parametrize("policy", EVERY_POLICY)
def test_higher_priority_starts_first_under_every_policy(policy: str) -> None:
    """A non-preemptible 4-GPU job holds the node until t=100; a short job of priority 0 and a longer one of priority
    5 queue behind it. Whatever the policy's own order (SJF would pick the short one), the higher priority starts
    first, and nothing is preempted."""
    jobs = run([pjob("blocker", 0, 4, 100, preemptible=False), pjob("short-low", 10, 4, 50),
                pjob("long-high", 20, 4, 200, priority=5)], policy)
    assert jobs["long-high"].first_start_s == pytest.approx(100.0)
    assert jobs["short-low"].first_start_s == pytest.approx(300.0)
    assert sum(j.preemptions for j in jobs.values()) == 0


@pytest.mark.parametrize("policy", EVERY_POLICY)
def test_a_higher_priority_job_makes_room_by_preempting_lower_ones(policy: str) -> None:
    """Two 2-GPU jobs of priority 0 fill the node; a 2-GPU job of priority 5 arrives and starts at once: the
    younger low job is preempted (the fewest GPUs, youngest first), the older keeps running."""
    jobs = run([pjob("old-low", 0, 2, 1000), pjob("young-low", 5, 2, 1000), pjob("high", 10, 2, 100, priority=5)],
               policy)
    assert jobs["high"].first_start_s == pytest.approx(10.0)
    assert jobs["young-low"].preemptions == 1 and jobs["old-low"].preemptions == 0
    assert jobs["high"].preemptions == 0


@pytest.mark.parametrize("policy", EVERY_POLICY)
def test_non_preemptible_jobs_are_never_preempted(policy: str) -> None:
    """The same arrivals with the low jobs not preemptible: the high job waits for one to end (t=1000)."""
    jobs = run([pjob("old-low", 0, 2, 1000, preemptible=False), pjob("young-low", 5, 2, 1000, preemptible=False),
                pjob("high", 10, 2, 100, priority=5)], policy)
    assert jobs["high"].first_start_s == pytest.approx(1000.0)
    assert all(j.preemptions == 0 for j in jobs.values())


@pytest.mark.parametrize("policy", ["fifo", "sjf", "tiresias"])
def test_a_lower_band_still_takes_free_gpus_a_higher_one_cannot_use(policy: str) -> None:
    """Every running job pinned (or none running): a high-priority job too large for the free GPUs cannot make room,
    and a small low-priority job behind it starts at once on them."""
    jobs = run([pjob("pinned", 0, 2, 1000, preemptible=False), pjob("big-high", 10, 4, 100, priority=5),
                pjob("small-low", 20, 1, 100)], policy)
    assert jobs["small-low"].first_start_s == pytest.approx(20.0)
    assert jobs["big-high"].first_start_s == pytest.approx(1000.0)


@pytest.mark.parametrize("policy", ["tiresias", "gittins", "rl:default"])
def test_time_sharing_keeps_its_preemption_of_equals_but_never_of_a_pinned_job(policy: str) -> None:
    """Tiresias' least-attained-service preemption: a long job that has left the first queue is preempted for a new
    one of equal priority (rule 2 lets time-sharing policies take equals), unless it is not preemptible."""
    long_run = 10_000.0
    shared = [pjob("new", 5000, 4, 100)]
    free = run([pjob("long", 0, 4, long_run), *shared], policy)
    pinned = run([pjob("long", 0, 4, long_run, preemptible=False), *shared], policy)
    started = free["new"].first_start_s
    assert free["long"].preemptions >= 1 and started is not None and started < long_run
    assert pinned["long"].preemptions == 0 and pinned["new"].first_start_s == pytest.approx(long_run)


@pytest.mark.parametrize("policy", HEURISTICS)
def test_equal_priorities_change_nothing(policy: str) -> None:
    """Every job at one priority (any value), all preemptible: the rules add no preemption and change no start."""
    specs = [pjob(f"j{i}", 7.0 * i, [1, 2, 4, 0.5][i % 4], 50.0 + 13 * i) for i in range(16)]
    base = run(specs, policy)
    lifted = run([JobSpec(**{**{f: getattr(s, f) for f in ("name", "submit_s", "num_gpus", "duration_s", "model")},
                            "priority": 9}) for s in specs], policy)
    assert {n: (j.first_start_s, j.preemptions) for n, j in base.items()} == \
           {n: (j.first_start_s, j.preemptions) for n, j in lifted.items()}


class PreemptsFirstGpus:
    """Preempts whatever runs on GPUs 0..n-1 to start the first pending job there (not a time-sharing policy)."""

    name = "rude"
    oracle = False

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        for job in queue:
            gpus = tuple(range(job.spec.workers))
            victims = sorted({v for g in gpus for v in view.tenants(g)})
            return [*(Preempt(v, "rude") for v in victims), Place(job.id, Placement(gpus, 1.0), "rude")]
        return []


def test_a_policy_that_preempts_an_equal_is_held_back_with_the_reason() -> None:
    """Rule 2 for a policy that does not time-share: its start that preempts a job of equal priority is held back
    (the job waits, saying why), and the running job keeps its GPUs."""
    sim = Simulator(small_cluster(nodes=1, gpus=4), [pjob("first", 0, 4, 1000), pjob("second", 10, 4, 100)],
                    PreemptsFirstGpus(), contention=False)
    sim.advance()
    sim.schedule()
    sim.advance()
    sim.schedule()
    assert [j.spec.name for j in sim.running.values()] == ["first"] and sim.jobs[0].preemptions == 0
    assert "preempts only lower priorities" in sim.pending_reasons[1]
    assert isinstance(sim.policy, PriorityFrame) and sim.policy.refused >= 1


def test_a_preemption_of_a_pinned_job_is_refused_even_upwards() -> None:
    sim = Simulator(small_cluster(nodes=1, gpus=4),
                    [pjob("pinned", 0, 4, 1000, preemptible=False), pjob("vip", 10, 4, 100, priority=100)],
                    PreemptsFirstGpus(), contention=False)
    result = sim.run()
    jobs = {j.spec.name: j for j in result.jobs}
    assert jobs["pinned"].preemptions == 0 and jobs["vip"].first_start_s == pytest.approx(1000.0)


def test_rule_three_makes_room_once_an_instant_for_a_policy_that_will_not_place() -> None:
    """A policy that never starts anything: the high job makes room once (one preemption), not once a round."""

    class Never:
        name = "never"
        oracle = False

        def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
            return []

    frame = PriorityFrame(Never())
    sim = Simulator(small_cluster(nodes=1, gpus=4), [], frame, contention=False,
                    initial=[(pjob("low", -1, 4, 1000), Placement((0, 1, 2, 3)), 1000.0)])
    sim.running[0] = sim.jobs[0]  # the initial job runs from t=0
    view = sim.view
    high = Job(99, pjob("high", 0, 4, 10, priority=5), 10)
    first = frame.schedule(view, [high], 0.0)
    again = frame.schedule(view, [high], 0.0)
    assert [d.job_id for d in first if isinstance(d, Preempt)] == [0]
    assert all(d.for_job == 99 for d in first if isinstance(d, Preempt))
    assert not any(isinstance(d, Preempt) for d in again)


def test_with_priorities_wraps_once() -> None:
    inner = make_policy("fifo")
    wrapped = with_priorities(inner)
    assert isinstance(wrapped, PriorityFrame) and with_priorities(wrapped) is wrapped
    frame = TenancyFrame(inner, Teams.parse({"teams": [{"name": "a", "quota_gpus": 2}]}, cluster_gpus=4))
    assert isinstance(frame.inner, PriorityFrame) and with_priorities(frame) is frame


# ---- inside the tenancy frame ------------------------------------------------------------------------------------


def two_teams() -> Teams:
    return Teams.parse({"teams": [{"name": "a", "quota_gpus": 4}, {"name": "b", "quota_gpus": 4}]}, cluster_gpus=8)


@pytest.mark.parametrize("policy", ["fifo", "tiresias"])
def test_priority_preempts_only_within_its_team(policy: str) -> None:
    """Team b fills its quota (4 GPUs) with low jobs; team a fills its own. A high job of team a preempts a's low
    job, never b's."""
    jobs = run([pjob("a-low", 0, 4, 1000, team="a"), pjob("b-low", 0, 4, 1000, team="b"),
                pjob("a-high", 10, 4, 100, priority=5, team="a")], policy, nodes=2, teams=two_teams())
    assert jobs["a-high"].first_start_s == pytest.approx(10.0)
    assert jobs["a-low"].preemptions == 1 and jobs["b-low"].preemptions == 0


def test_a_non_preemptible_job_does_not_borrow() -> None:
    """Team a's quota is full; GPUs are idle in b's quota. A preemptible job of a borrows them at once; a
    non-preemptible one waits for a's quota, saying why."""
    specs = [pjob("a-run", 0, 4, 1000, team="a"), pjob("a-borrow", 10, 2, 100, team="a"),
             pjob("a-pinned", 10, 2, 100, preemptible=False, team="a")]
    sim = Simulator(small_cluster(nodes=2, gpus=4), specs, make_policy("fifo"), contention=False, teams=two_teams())
    while sim.advance() and sim.now < 10:
        sim.schedule()
    sim.schedule()
    names = {j.spec.name for j in sim.running.values()}
    assert names == {"a-run", "a-borrow"}
    assert "not preemptible, so it runs only within its team's quota" in sim.pending_reasons[2]


def test_reclaim_never_takes_a_borrower_of_higher_priority() -> None:
    """b borrows a's idle quota; a's job within a's quota reclaims, but only jobs of no higher priority than its own:
    of b's jobs it takes the low one even though the high one is younger; with both high, it waits for one to end."""
    a_low = pjob("a-low", 10, 4, 100, team="a")
    mixed = run([pjob("b-low", 0, 4, 1000, team="b"), pjob("b-high", 1, 4, 500, priority=5, team="b"), a_low],
                "fifo", nodes=2, teams=two_teams())
    assert mixed["b-high"].preemptions == 0 and mixed["b-low"].preemptions == 1
    assert mixed["a-low"].first_start_s == pytest.approx(10.0)
    high = run([pjob("b-one", 0, 4, 1000, priority=5, team="b"), pjob("b-two", 1, 4, 500, priority=5, team="b"),
                a_low], "fifo", nodes=2, teams=two_teams())
    assert high["b-one"].preemptions == 0 and high["b-two"].preemptions == 0
    assert high["a-low"].first_start_s == pytest.approx(501.0)
    equal = run([pjob("b-one", 0, 4, 1000, team="b"), pjob("b-two", 1, 4, 500, team="b"), a_low], "fifo", nodes=2,
                teams=two_teams())
    assert equal["b-two"].preemptions == 1 and equal["a-low"].first_start_s == pytest.approx(10.0)


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "gittins", "contention-greedy"])
def test_a_high_job_swapped_for_starts_at_once(policy: str) -> None:
    """Team a holds 8 GPUs (4 of them borrowed from b, idle) when its 6-GPU high-priority job arrives: a swap, made
    by the priority rule (a-borrow and a-low2 preempted). Its team is then back within its quota and the job beyond
    what is left of it; it is still offered the GPUs freed for it first. Before, the victims took them back and were
    preempted again at every call (gittins: 22 times) while the high job waited for a-low1 to end at t=1000."""
    specs = [pjob("a-low1", 0, 2, 1000, team="a"), pjob("a-low2", 0, 2, 1000, team="a"),
             pjob("a-borrow", 0, 4, 1000, team="a"), pjob("a-high", 10, 6, 100, priority=10, team="a")]
    jobs = run(specs, policy, nodes=2, teams=two_teams())
    assert jobs["a-high"].first_start_s == pytest.approx(10.0)
    assert jobs["a-borrow"].preemptions == 1 and jobs["a-low2"].preemptions == 1 and jobs["a-low1"].preemptions == 0


@pytest.mark.parametrize("policy", ["contention-greedy", "fifo-backfill"])
def test_teams_and_priorities_never_preempt_a_job_twice(policy: str) -> None:
    """A window of multi-node jobs shared by 3 teams, with priorities (agents.scenarios draws such windows for
    training). The priority rule preempted for a high job at the same call at which the frame then asked about
    swaps, on a view where those victims still ran, and the policy took one of them again: 'preempted job
    syn-000143, which is not running'. Now the run goes to its end, where a pinned 16-GPU job, larger than its team's
    8-GPU quota, can never start (the simulator's error for a job no placement can ever start)."""
    from agents.scenarios import Scenario

    scenario = Scenario("synthetic:multinode", "pcie-v100", 1.9, 300, 0, nodes=3, teams=3, priorities=True)
    cluster, specs = scenario.build()
    sim = Simulator(cluster, specs, make_policy(policy), teams=scenario.tenancy(cluster))
    with pytest.raises(SimulationError, match="queued on an idle cluster.*not preemptible, so it runs only within"):
        sim.run()
    assert sim.done and not sim.running


# ---- traces and synthetic workloads ------------------------------------------------------------------------------


def test_corral_csv_reads_priority_and_preemptible(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s,kind,model,priority,preemptible\n"
                    "a,0,1,10,training,,5,false\nb,1,1,10,training,,,\n")
    trace = load_trace(str(path))
    assert [(j.priority, j.preemptible) for j in trace.jobs] == [(5, False), (0, True)]
    path.write_text("job_id,submit_s,num_gpus,duration_s,kind,model,preemptible\na,0,1,10,training,,maybe\n")
    with pytest.raises(TraceError, match="line 2: column 'preemptible': 'maybe' is not true or false"):
        load_trace(str(path))


def test_synthetic_workloads_draw_priorities() -> None:
    plain = load_trace("synthetic:4000")
    drawn = load_trace("synthetic:4000,high=0.1,pinned=0.2")
    assert all(j.priority == 0 and j.preemptible for j in plain.jobs)
    high = sum(j.priority > 0 for j in drawn.jobs) / 4000
    pinned = sum(not j.preemptible for j in drawn.jobs) / 4000
    assert 0.08 < high < 0.12 and 0.18 < pinned < 0.22
    # The other attributes are drawn from their own streams: unchanged by the priorities.
    assert [(j.submit_s, j.num_gpus, j.duration_s, j.model) for j in plain.jobs] == \
           [(j.submit_s, j.num_gpus, j.duration_s, j.model) for j in drawn.jobs]
    with pytest.raises(TraceError, match="high"):
        load_trace("synthetic:10,high=1.5")
