"""Resizing running elastic jobs (issue 49, part 2): the decision, the rules every resize follows
(scheduler.core.resizing, applied by the priority and tenancy frames), the book's accounting and the simulator's
pause, on small inline clusters with a scripted policy, so that each rule is seen alone."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import pytest

from policies import available, make_policy
from policies.placement import Planner
from policies.registry import UnknownPolicyError
from scheduler.core.book import Book
from scheduler.core.contention import ContentionModel
from scheduler.core.decisions import Decision, Place, Resize, Wait, WakeAt
from scheduler.core.elastic import RESIZE_INTERVAL_S as INTERVAL_S
from scheduler.core.model import Job, JobSpec, Placement, parse_cluster
from scheduler.core.reasons import Code
from scheduler.core.resizing import gain_s
from scheduler.core.simulator import SimulationError, Simulator
from scheduler.core.state import ClusterState, ClusterView, PlacementError
from scheduler.core.tenancy import Teams, TenancyFrame
from scheduler.core.traces import load_trace
from scheduler.core.workloads import catalog

MODEL = "ResNet-50-bs64"  # scales linearly inside an NVLink server: its all-reduce hides under compute
PAUSE = 10.0


def ejob(name: str, submit: float, gpus: int, work: float, lo: int | None = None, hi: int | None = None,
         **more: object) -> JobSpec:
    elastic = {"min_gpus": lo, "max_gpus": hi, "resize_pause_s": PAUSE} if lo is not None else {}
    return JobSpec(name=name, submit_s=submit, num_gpus=gpus, duration_s=work, model=MODEL,
                   **elastic, **more)  # type: ignore[arg-type]


class Script:
    """Starts queued jobs in arrival order at their own size (first fit), and at each scripted time makes the
    resizes it was given, once: `{time: [(job id, GPUs, for_job)]}`. It asks to be woken at those times."""

    name = "script"
    oracle = False
    time_sharing = True  # its shrinks of equal priorities pass rule 2: the other rules are what is tested

    def __init__(self, at: Mapping[float, list[tuple[int, tuple[int, ...], int | None]]]) -> None:
        self.at = {t: list(r) for t, r in at.items()}
        self.calls: list[tuple[float, int]] = []  # (now, queue length) of each call

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        self.calls.append((now, len(queue)))
        out: list[Decision] = [WakeAt(t) for t in self.at if t > now]
        for job_id, gpus, for_job in self.at.pop(now, []):
            out.append(Resize(job_id, Placement(gpus), "scripted", for_job=for_job))
        planner = Planner(view)
        for s in [d for d in out if isinstance(d, Resize)]:  # what a shrink gives back, the script's starts may use
            if s.job_id in view.running and len(s.placement.gpus) < view.running[s.job_id].spec.workers:
                planner.give_back(view.running[s.job_id])
                planner.take(view.running[s.job_id].spec, s.placement)
        for job in queue:
            placement = planner.first_fit(job.spec)
            if placement is not None:
                planner.take(job.spec, placement)
                out.append(Place(job.id, placement))
        return out


def simulate(specs: list[JobSpec], policy: object, gpus: int = 8, teams: Teams | None = None) -> Simulator:
    sim = Simulator(parse_cluster(f"dgx-a100:{gpus // 8}"), specs, policy, contention=False,  # type: ignore[arg-type]
                    preempt_overhead_s=0.0, teams=teams)
    sim.run()
    return sim


def frame_of(sim: Simulator) -> object:
    """The priority frame around the policy (inside the tenancy frame, if there is one)."""
    policy = sim.policy
    return policy.inner if isinstance(policy, TenancyFrame) else policy


# ---- growing ----------------------------------------------------------------------------------------------------


def test_a_grow_into_idle_gpus_runs_faster_after_its_pause() -> None:
    # e: 10,000 s of work at 4 GPUs beside a 4-GPU job ending at t=100. Grown to 8 at t=100 it has done 100 s of
    # work; after its 10 s pause the other 9,900 s take 4,950 s at twice the speed: it ends at 5,060 s.
    specs = [ejob("e", 0.0, 4, 10_000.0, 2, 8), ejob("r", 0.0, 4, 100.0)]
    sim = simulate(specs, Script({100.0: [(0, tuple(range(8)), None)]}))
    e = sim.jobs[0]
    assert e.end_s == pytest.approx(5060.0)
    assert e.resizes == 1 and e.spec.num_gpus == 4 and e.submitted is None  # back to its submitted spec at the end
    # Its service: 4 GPUs for 100 s, then 8 GPUs for 4,960 s (the pause holds its GPUs).
    assert e.attained_gpu_s == pytest.approx(4 * 100.0 + 8 * 4960.0)
    assert sim.metrics()["resizes"] == 1


def test_a_policy_is_asked_with_an_empty_queue_only_while_an_elastic_job_could_grow() -> None:
    rigid = Script({})
    simulate([ejob("a", 0.0, 4, 100.0), ejob("b", 50.0, 2, 100.0)], rigid)
    assert all(n > 0 for _, n in rigid.calls)  # rigid jobs only: never asked about an empty queue
    elastic = Script({})
    simulate([ejob("e", 0.0, 4, 100.0, 2, 8), ejob("b", 50.0, 2, 10.0)], elastic)
    assert (0.0, 0) in elastic.calls and (60.0, 0) in elastic.calls  # idle GPUs beside a running elastic job


def test_a_grow_whose_pause_outweighs_its_gain_is_dropped() -> None:
    # 110 s of work at 4 GPUs: at t=100 only 10 s of it is left, and 8 GPUs would save 5 s, less than the 10 s
    # pause: the resize rules drop the grow.
    sim = simulate([ejob("e", 0.0, 4, 110.0, 2, 8)], Script({100.0: [(0, tuple(range(8)), None)]}))
    assert sim.jobs[0].resizes == 0 and sim.jobs[0].end_s == pytest.approx(110.0)
    assert frame_of(sim).resizes_refused == 1  # type: ignore[attr-defined]


def test_the_gain_a_grow_is_judged_by() -> None:
    cluster = parse_cluster("dgx-a100:1")
    profiles = catalog()
    book = Book(ClusterState(cluster, profiles), ContentionModel(cluster, profiles, enabled=False))
    job = Job(0, ejob("e", 0.0, 4, 1000.0, 2, 8), 1000.0)
    book.start(job, Placement((0, 1, 2, 3)), 0.0)
    job.last_update, job.rate = 0.0, 1.0
    assert gain_s(book.view, job, 8, 200.0) == pytest.approx(800.0 - 400.0)  # 800 s left, at twice the speed
    assert gain_s(book.view, job, 2, 200.0) == pytest.approx(800.0 - 1600.0)  # a shrink loses time


# ---- shrinking --------------------------------------------------------------------------------------------------


def test_a_shrink_makes_room_for_a_waiting_job_and_keeps_its_job_running() -> None:
    # e's 10,000 s of work are measured at 8 GPUs, where it starts; w (4 GPUs) arrives at t=100 and e shrinks to 4
    # for it: 100 s of work done, a 10 s pause, then 9,900 s at half the speed: e ends at 110 + 19,800 s.
    specs = [ejob("e", 0.0, 8, 10_000.0, 2, 8), ejob("w", 100.0, 4, 50.0)]
    sim = simulate(specs, Script({100.0: [(0, (0, 1, 2, 3), 1)]}))
    e, w = sim.jobs
    assert w.first_start_s == pytest.approx(100.0) and w.end_s == pytest.approx(150.0)
    assert w.preemptions == 0 and e.preemptions == 0 and e.resizes == 1
    assert e.end_s == pytest.approx(110.0 + 19_800.0)
    assert e.attained_gpu_s == pytest.approx(8 * 100.0 + 4 * 19_810.0)


def test_a_shrink_below_the_minimum_is_a_policy_bug() -> None:
    specs = [ejob("e", 0.0, 8, 10_000.0, 2, 8), ejob("w", 100.0, 4, 50.0)]
    with pytest.raises(SimulationError, match="runs at 2 to 8 GPUs, not 1"):
        simulate(specs, Script({100.0: [(0, (0,), 1)]}))


def test_a_shrink_that_makes_room_for_no_start_is_dropped() -> None:
    sim = simulate([ejob("e", 0.0, 4, 10_000.0, 2, 8)], Script({100.0: [(0, (0, 1), None)]}))
    assert sim.jobs[0].resizes == 0 and frame_of(sim).resizes_refused == 1  # type: ignore[attr-defined]


def test_no_resize_again_within_the_interval() -> None:
    # Grown at t=1 (to 8), a shrink for w at t=100 is within the interval: refused, and w waits, told why; at the
    # interval's end the script shrinks it again and w starts.
    specs = [ejob("e", 0.0, 4, 100_000.0, 2, 8), ejob("w", 100.0, 4, 50.0)]
    script = Script({1.0: [(0, tuple(range(8)), None)], 100.0: [(0, (0, 1, 2, 3), 1)],
                     1.0 + INTERVAL_S: [(0, (0, 1, 2, 3), 1)]})
    seen: dict[str, str] = {}
    sim = Simulator(parse_cluster("dgx-a100:1"), specs, script, contention=False, preempt_overhead_s=0.0)
    while sim.advance():
        sim.schedule()
        if sim.now == 100.0:
            seen = {sim.jobs[j].spec.name: why for j, why in sim.pending_reasons.items()}
    assert "resized 99 s ago: a job is resized at most once every 600 s" in seen["w"]
    assert sim.jobs[1].first_start_s == pytest.approx(1.0 + INTERVAL_S)
    assert sim.jobs[0].resizes == 2


# ---- priorities and teams -----------------------------------------------------------------------------------------


def test_a_shrink_is_a_preemption_for_the_priority_rules() -> None:
    high = ejob("high", 0.0, 4, 10_000.0, 2, 8, priority=5)
    pinned = ejob("pinned", 0.0, 4, 10_000.0, 2, 8, preemptible=False)
    for victim in (high, pinned):
        script = Script({1.0: [(0, tuple(range(8)), None)], 700.0: [(0, (0, 1, 2, 3), 1)]})
        sim = Simulator(parse_cluster("dgx-a100:1"), [victim, ejob("w", 100.0, 4, 50.0)], script, contention=False)
        reasons: dict[int, str] = {}
        while sim.advance():
            sim.schedule()
            if sim.now == 700.0:
                reasons = dict(sim.pending_reasons)
        assert sim.jobs[0].resizes == 1  # its grow only
        assert "preempt" in reasons[1] and (victim is pinned) == ("not preemptible" in reasons[1])


class Polite(Script):
    time_sharing = False


def test_only_a_time_sharing_policy_shrinks_a_job_of_equal_priority() -> None:
    specs = [ejob("e", 0.0, 8, 10_000.0, 2, 8), ejob("w", 100.0, 4, 50.0)]
    sim = simulate(specs, Polite({100.0: [(0, (0, 1, 2, 3), 1)]}))
    assert sim.jobs[0].resizes == 0 and sim.jobs[1].first_start_s == pytest.approx(10_000.0)


def teams(*rows: tuple[str, float, float | None]) -> Teams:
    return Teams.parse({"half_life_s": 3600.0, "teams": [{"name": n, "quota_gpus": q, "borrow_limit_gpus": b}
                                                         for n, q, b in rows]}, cluster_gpus=8)


def test_a_grow_stays_within_its_teams_quota_and_borrowing_limit() -> None:
    # Team a has 4 GPUs of quota and may borrow 2: its elastic job grows to 6, not 8; a non-preemptible one may not
    # borrow, and stays at its quota.
    for preemptible, size in ((True, 6), (False, 4)):
        spec = ejob("e", 0.0, 4, 10_000.0, 2, 8, team="a", preemptible=preemptible)
        script = Script({1.0: [(0, tuple(range(8)), None)], 2.0: [(0, tuple(range(6)), None)]})
        sim = Simulator(parse_cluster("dgx-a100:1"), [spec], script, contention=False,
                        teams=teams(("a", 4.0, 2.0), ("b", 4.0, None)))
        sizes = set()
        while sim.advance():
            sim.schedule()
            sizes.add(len(sim.running[0].placement.gpus) if 0 in sim.running else 0)  # type: ignore[union-attr]
        assert max(sizes) == size


def test_a_shrink_of_another_teams_job_within_its_quota_is_held_back() -> None:
    # e (team a) holds node 0, all of a's quota; x (team b, within b's quota) could start on node 1, but the script
    # plans it on GPUs it shrinks e for: another team's GPUs within its quota, so x is held back and e keeps them.
    tm = Teams.parse({"half_life_s": 3600.0, "teams": [{"name": "a", "quota_gpus": 8}, {"name": "b", "quota_gpus": 8}]},
                     cluster_gpus=16)
    specs = [ejob("e", 0.0, 8, 2000.0, 2, 8, team="a"), ejob("x", 100.0, 4, 50.0, team="b")]
    sim = Simulator(parse_cluster("dgx-a100:2"), specs, Script({100.0: [(0, (0, 1, 2, 3), 1)]}), contention=False,
                    teams=tm)
    reasons: dict[int, str] = {}
    while sim.advance():
        sim.schedule()
        if sim.now == 100.0:
            reasons = dict(sim.pending_reasons)
    assert sim.jobs[0].resizes == 0 and sim.jobs[0].end_s == pytest.approx(2000.0)
    assert reasons[1] == "its policy would preempt another team's jobs within their quota to start it"


# ---- the book ---------------------------------------------------------------------------------------------------


def test_a_refused_resize_changes_nothing() -> None:
    cluster = parse_cluster("dgx-a100:1")
    profiles = catalog()
    book = Book(ClusterState(cluster, profiles), ContentionModel(cluster, profiles))
    other = Job(1, ejob("r", 0.0, 1, 10.0), 10.0)
    book.start(other, Placement((7,)), 0.0)
    job = Job(0, ejob("e", 0.0, 4, 1000.0, 2, 8, sizes=(2, 4, 8)), 1000.0)
    book.start(job, Placement((0, 1, 2, 3)), 0.0)
    before = (job.spec, job.placement, book.state.free_whole, book.contention.slowdowns())
    for gpus, words in (((0, 1, 2, 3, 4, 5, 6, 7), "GPU 7 is not free"), ((0, 1, 2), r"runs at \[2, 4, 8\]"),
                        ((0, 1, 2, 3), "changes the size")):
        with pytest.raises(PlacementError, match=words):
            book.resize(job, Placement(gpus), 5.0)
        assert (job.spec, job.placement, book.state.free_whole, book.contention.slowdowns()) == before
        assert job.resizes == 0 and job.resized_s is None
    book.state.set_closed({5: "drained"})
    with pytest.raises(PlacementError, match="GPU 5 is closed"):
        book.resize(job, Placement((0, 5)), 5.0)
    affected = book.resize(job, Placement((0, 1)), 5.0)
    assert 0 in affected and job.spec.workers == 2 and job.submitted is not None and book.state.free_whole == 4  # (GPU 5 closed)


def test_a_refused_shrink_names_its_rule_as_data() -> None:
    specs = [ejob("e", 0.0, 4, 100_000.0, 2, 8), ejob("w", 100.0, 4, 50.0)]
    script = Script({1.0: [(0, tuple(range(8)), None)], 100.0: [(0, (0, 1, 2, 3), 1)]})
    sim = Simulator(parse_cluster("dgx-a100:1"), specs, script, contention=False)
    said: list[Wait] = []
    original = sim.apply

    def spy(decisions: Sequence[Decision]) -> bool:
        said.extend(d for d in decisions if isinstance(d, Wait) and d.job_id == 1)
        return original(decisions)

    sim.apply = spy  # type: ignore[method-assign]
    while sim.advance() and sim.now <= 100.0:
        sim.schedule()
    refusal = next(d for d in said if d.code is Code.RESIZE_REFUSED)
    assert refusal.params is not None and refusal.params["rule"] == "interval" and refusal.params["job"] == "e"


# ---- the marginal-gain heuristic, and every policy on elastic jobs ------------------------------------------------


def test_marginal_gain_starts_a_lone_elastic_job_at_its_largest_size() -> None:
    sim = simulate([ejob("e", 0.0, 2, 1000.0, 1, 8)], make_policy("marginal-gain"))
    e = sim.jobs[0]
    assert e.resizes == 0 and e.end_s == pytest.approx(250.0)  # 1,000 s at 2 GPUs, on 8 from the start


def test_marginal_gain_grows_into_freed_gpus_and_shrinks_for_a_shorter_job() -> None:
    # long (elastic 2-8, 20,000 s of work at 4 GPUs) starts beside a 4-GPU job r ending at t=100 and grows into its
    # GPUs then (100 s done, 10 s pause); a short 4-GPU job arriving at t=1,000 starts at once: long gives back just
    # the 4 GPUs it lacks (1,880 s done by then, 10 s pause); short ends at 1,300, and long grows again once its
    # resize interval is over, at 1,600 (2,470 s done, 10 s pause): 17,530 s at twice the speed end it at 10,375.
    specs = [ejob("long", 0.0, 4, 20_000.0, 2, 8), ejob("r", 0.0, 4, 100.0), ejob("short", 1000.0, 4, 300.0)]
    sim = simulate(specs, make_policy("marginal-gain"))
    long, _r, short = sim.jobs
    assert short.first_start_s == pytest.approx(1000.0) and short.preemptions == 0
    assert long.resizes == 3 and long.end_s == pytest.approx(10_375.0)


@pytest.mark.parametrize("policy", [*(p for p in available() if ":" not in p), "rl:default", "largest:fifo",
                                    "largest:sjf"])
def test_every_policy_runs_an_elastic_mix_within_each_jobs_sizes(policy: str) -> None:
    jobs = load_trace("synthetic:60,elastic=0.5", seed=3).jobs
    assert any(j.elastic for j in jobs)
    cluster = parse_cluster("dgx-a100:2")
    sim = Simulator(cluster, jobs, make_policy(policy, seed=3))
    seen: dict[int, set[int]] = {}
    while sim.advance():
        sim.schedule()
        for job in sim.running.values():
            seen.setdefault(job.id, set()).add(len(job.placement.gpus))  # type: ignore[union-attr]
    result = sim.result()
    assert result.metrics["jobs_completed"] + result.metrics["jobs_rejected"] == len(jobs)
    for job in sim.jobs:
        assert seen.get(job.id, set()) <= set(job.spec.size_choices()), job.spec.name


def test_a_start_beyond_the_submitted_size_is_a_grow_for_the_teams_rules() -> None:
    # Team a: 4 GPUs of quota and 2 to borrow. marginal-gain starts its 2-8 elastic job at 6, what a may take; a
    # policy that starts it at 8 has the start held back, told why.
    tm = teams(("a", 4.0, 2.0), ("b", 4.0, None))
    spec = ejob("e", 0.0, 4, 1000.0, 2, 8, team="a")
    sim = Simulator(parse_cluster("dgx-a100:1"), [spec], make_policy("marginal-gain"), contention=False, teams=tm)
    sim.advance()
    sim.schedule()
    assert len(sim.running[0].placement.gpus) == 6  # type: ignore[union-attr]

    class Greedy(Script):
        def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
            return [Place(j.id, Placement(tuple(range(8)))) for j in queue]

    sim = Simulator(parse_cluster("dgx-a100:1"), [spec], Greedy({}), contention=False, teams=tm)
    sim.advance()
    sim.schedule()
    assert not sim.running
    assert sim.pending_reasons[0] == ("its policy would start it at 8 GPUs, 4 more than it asks for, and team a may "
                                      "take 2 more now")


def test_the_rigid_baseline_starts_elastic_jobs_at_the_largest_size_that_fits_and_never_resizes() -> None:
    # e (2-8) is started beside r (3 GPUs): 5 GPUs are free, 5 is a size it accepts; it keeps them after r ends.
    specs = [ejob("r", 0.0, 3, 100.0), ejob("e", 0.0, 4, 1000.0, 2, 8)]
    sim = simulate(specs, make_policy("largest:fifo"))
    r, e = sim.jobs
    assert e.resizes == 0 and e.end_s == pytest.approx(800.0)  # 1,000 s at 4 GPUs take 800 s at 5
    assert sim.policy is not None and sim.policy.name == "largest:fifo"


def test_the_cluster_sets_the_resize_interval() -> None:
    # As test_no_resize_again_within_the_interval, on a cluster whose interval is 50 s: the shrink at t=100 is allowed.
    specs = [ejob("e", 0.0, 4, 100_000.0, 2, 8), ejob("w", 100.0, 4, 50.0)]
    script = Script({1.0: [(0, tuple(range(8)), None)], 100.0: [(0, (0, 1, 2, 3), 1)]})
    sim = Simulator(parse_cluster("dgx-a100:1"), specs, script, contention=False, resize_interval_s=50.0)
    sim.run()
    assert sim.jobs[1].first_start_s == pytest.approx(100.0) and sim.jobs[0].resizes == 2
    with pytest.raises(ValueError, match="resize_interval_s must be a number >= 0"):
        Simulator(parse_cluster("dgx-a100:1"), specs, script, resize_interval_s=-1.0)


def test_corral_simulate_makes_a_trace_elastic_and_reports_its_resizes(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from scheduler.cli.commands import main

    out = tmp_path / "r.json"
    args = ["simulate", "--trace", "synthetic:40", "--cluster", "dgx-a100:1", "--policy", "marginal-gain",
            "--elastic", "0.5", "--resize-interval", "60", "--json", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "jobs may run at half to twice their size (0.5 of the whole-GPU training jobs, drawn from seed 0)" in (
        result.output)
    assert json.loads(out.read_text())["policies"]["marginal-gain"]["resizes"] > 0
    assert "│ resizes" in result.output
    bad = CliRunner().invoke(main, [*args[:8], "--elastic", "1.5"])
    assert bad.exit_code == 2 and "--elastic" in bad.stderr


def test_a_time_sharing_policy_is_not_sized_at_its_starts() -> None:
    with pytest.raises(UnknownPolicyError, match="largest:gittins: gittins preempts to time-share"):
        make_policy("largest:gittins")


@pytest.mark.parametrize(("policy", "end"), [("marginal-gain", 10_315.0), ("fifo", 19_910.0)])
def test_a_team_reclaims_its_quota_from_an_elastic_borrower_by_shrinking_it(policy: str, end: float) -> None:
    # Team a's elastic job (10,000 s of work at 8 GPUs) runs on all 8, borrowing team b's 4; b's job arrives at t=100
    # and the tenancy frame takes b's quota back by shrinking a's job to 4, what it borrowed, not by preempting it,
    # whatever the policy: 100 s done, a 10 s pause, then half the speed. fifo leaves it there (it ends at
    # 110 + 2 x 9,900); marginal-gain grows it back to 8 once its interval is over (at 700: 395 s done; a 10 s pause).
    tm = teams(("a", 4.0, None), ("b", 4.0, None))
    specs = [ejob("e", 0.0, 8, 10_000.0, 2, 8, team="a"), ejob("w", 100.0, 4, 50.0, team="b")]
    sim = Simulator(parse_cluster("dgx-a100:1"), specs, make_policy(policy), contention=False, teams=tm)
    sim.run()
    e, w = sim.jobs
    assert w.first_start_s == pytest.approx(100.0) and e.preemptions == 0
    assert e.end_s == pytest.approx(end)
