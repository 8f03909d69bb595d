"""The tenancy frame (scheduler.core.tenancy) in the simulator, rule by rule, on small inline clusters."""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path

import pytest
from conftest import small_cluster

from policies import make_policy
from scheduler.core.decisions import Decision, Place, Preempt
from scheduler.core.model import Job, JobPhase, JobSpec, Placement
from scheduler.core.runner import answered
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterView
from scheduler.core.tenancy import FairShare, TeamError, Teams, TenancyFrame


def tjob(name: str, submit: float, gpus: float, duration: float, team: str, priority: int = 0) -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=gpus, duration_s=duration, model="ResNet-50-bs64", team=team,
                   priority=priority)


def teams(*rows: tuple[str, float, float | None], half_life_s: float = 3600.0) -> Teams:
    return Teams.parse({"half_life_s": half_life_s,
                        "teams": [{"name": n, "quota_gpus": q, "borrow_limit_gpus": b} for n, q, b in rows]},
                       cluster_gpus=8)


class Recorder:
    """Runs a simulation, noting after every scheduling instant who runs and who waits, and why."""

    def __init__(self, specs: list[JobSpec], tm: Teams, policy: str = "fifo") -> None:
        self.frame = TenancyFrame(make_policy(policy), tm)
        self.sim = Simulator(small_cluster(nodes=2, gpus=4), specs, self.frame, contention=False,
                             preempt_overhead_s=0.0)
        self.snapshots: list[tuple[float, dict[str, float]]] = []

    def run(self) -> None:
        while self.sim.advance():
            self.sim.schedule()
            self.snapshots.append((self.sim.now, self.in_use()))

    def in_use(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for j in self.sim.running.values():
            out[j.spec.team] = out.get(j.spec.team, 0.0) + j.spec.gpu_demand
        return out

    def at(self, t: float) -> dict[str, float]:
        return next(use for now, use in self.snapshots if now == t)


# ---- definitions and bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "field"), [
    ({"teams": [{"name": "a", "quota_gpus": -1}]}, "teams[0].quota_gpus"),
    ({"teams": [{"name": "a", "quota_gpus": 2, "borrow_limit_gpus": -0.5}]}, "teams[0].borrow_limit_gpus"),
    ({"teams": [{"name": "a", "quota_gpus": "four"}]}, "teams[0].quota_gpus"),
    ({"teams": [{"name": "", "quota_gpus": 1}]}, "teams[0].name"),
    ({"teams": [{"name": "a", "quota_gpus": 1}, {"name": "a", "quota_gpus": 1}]}, "teams[1].name"),
    ({"teams": [{"name": "a", "quota_gpus": 6}, {"name": "b", "quota_gpus": 4}]}, "more than the cluster's 8"),
    ({"teams": [{"name": "a", "quota_gpus": 1, "quota": 2}]}, "unknown key"),
    ({"teams": []}, "teams.teams"),
    ({"half_life_s": 0, "teams": [{"name": "a", "quota_gpus": 1}]}, "half_life_s"),
])
def test_bad_team_definitions_name_the_field(data: dict, field: str) -> None:
    with pytest.raises(TeamError, match=field.replace("[", r"\[").replace("]", r"\]")):
        Teams.parse(data, cluster_gpus=8)


def test_a_teams_file_is_read_and_jobs_of_unknown_teams_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "teams.yaml"
    path.write_text("half_life_s: 600\nteams:\n  - {name: vision, quota_gpus: 4.5, borrow_limit_gpus: 2}\n"
                    "  - {name: nlp, quota_gpus: 3.5}\n")
    tm = Teams.load(path, cluster_gpus=8)
    assert tm.half_life_s == 600 and tm.teams["vision"].quota_gpus == 4.5
    assert tm.teams["nlp"].borrow_limit_gpus is None  # no limit but the cluster
    with pytest.raises(TeamError, match=r"unknown team\(s\) \['speech'\]"):
        tm.check_jobs([tjob("x", 0, 1, 10, "speech"), tjob("y", 0, 1, 10, "nlp")])
    path.write_text("teams: [{name: a, quota_gpus: 1}\n")
    with pytest.raises(TeamError, match="not valid YAML"):
        Teams.load(path)


def test_decayed_usage_is_integrated_exactly() -> None:
    tm = teams(("a", 4, None), ("b", 4, None), half_life_s=100.0)
    fs = FairShare(tm)
    running = Job(0, tjob("x", 0.0, 2, 1000.0, "a"), 1000.0)
    running.start_s = 0.0
    fs.observe(0.0, [running], lambda s: s.team)
    fs.observe(100.0, [running], lambda s: s.team)  # one half-life at 2 GPUs: 2 * 100 / ln 2 * (1 - 1/2)
    assert fs.usage["a"] == pytest.approx(2 * 100 / math.log(2) * 0.5) and fs.usage["b"] == 0.0
    # It ended at 150, seen at 300: counted to 150, then decayed for 150 s.
    running.end_s = 150.0
    fs.observe(300.0, [], lambda s: s.team)
    at_150 = 2 * 100 / math.log(2) * (1 - 0.5 ** 1.5)
    assert fs.usage["a"] == pytest.approx(at_150 * 0.5 ** 1.5)
    assert fs.ratio("a") > fs.ratio("b")


# ---- borrowing and reclaim ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "gittins"])
def test_a_borrower_gives_back_exactly_what_the_owner_needs(policy: str) -> None:
    """The acceptance scenario: quotas 4 + 4 on 8 GPUs. A's 8 jobs all run (borrowing); B's 4 arrive and, in the same
    instant, B runs 4 and A exactly 4; A's other 4 wait and resume later. Every job finishes exactly once."""
    specs = [tjob(f"a{i}", 0.0, 1, 3600.0, "A") for i in range(8)]
    specs += [tjob(f"b{i}", 600.0, 1, 1800.0, "B") for i in range(4)]
    rec = Recorder(specs, teams(("A", 4, None), ("B", 4, None)), policy)
    rec.run()
    assert rec.at(0.0) == {"A": 8.0}
    assert rec.at(600.0) == {"A": 4.0, "B": 4.0}
    jobs = rec.sim.jobs
    assert all(j.state is JobPhase.DONE for j in jobs)
    a = [j for j in jobs if j.spec.team == "A"]
    assert rec.frame.reclaims == 4
    # Gittins' own ranking then swaps A's 4 running jobs for its 4 reclaimed ones (demoted at 2163 s, as it does on
    # 4 GPUs without teams): preemptions within A, beyond its quota. FIFO and Tiresias keep them running.
    assert rec.frame.swaps == (4 if policy == "gittins" else 0)
    assert sum(j.preemptions for j in a) == rec.frame.reclaims + rec.frame.swaps and all(j.preemptions <= 1 for j in a)
    # The youngest borrowed jobs went (all started at 0 here: the highest ids), and B waited for nothing.
    assert all(j.first_start_s == 600.0 for j in jobs if j.spec.team == "B")


def test_the_borrowing_limit_caps_a_team_and_says_so() -> None:
    specs = [tjob(f"a{i}", 0.0, 1, 1000.0, "A") for i in range(8)]
    rec = Recorder(specs, teams(("A", 2, 2), ("B", 6, None)))
    rec.sim.advance()
    rec.sim.schedule()
    assert rec.in_use() == {"A": 4.0}
    reasons = rec.sim.pending_reasons
    waiting = [j.id for j in rec.sim.pending.values()]
    assert len(waiting) == 4
    # The words carry the figures the frame decided with: A holds 4 on a quota of 2 (2 borrowed), and one more would
    # take it past quota + borrowing limit (4). Issue 26: the old words said "at its quota: 4/2".
    assert all(reasons[j] == "team A holds 4 GPUs: its 2-GPU quota and 2 borrowed; the job needs 1, which would take "
               "it to 5 GPUs, past its 2-GPU quota plus its borrowing limit of 2 (4 in all)" for j in waiting)


def test_idle_quota_is_held_for_its_owner_not_lent() -> None:
    """B (quota 4) has a 4-GPU job waiting within its quota while A borrows: the 4 free GPUs go to B's job, not to
    A's next borrowing job, even though A's arrived first."""
    specs = [tjob("a-big", 0.0, 4, 5000.0, "A"), tjob("a-next", 10.0, 4, 100.0, "A"),
             tjob("b-own", 10.0, 4, 100.0, "B")]
    rec = Recorder(specs, teams(("A", 2, None), ("B", 4, None)))
    rec.run()
    jobs = {j.spec.name: j for j in rec.sim.jobs}
    assert jobs["b-own"].first_start_s == 10.0
    assert jobs["a-next"].first_start_s == pytest.approx(110.0)  # after B's job, not before it


def test_borrowed_capacity_goes_to_the_team_with_the_lower_fair_share_usage() -> None:
    """A used 4 GPUs for an hour; then A and B (quotas 2 and 2, C's 4 idle) both want 6. Within quota each gets 2;
    the 4 GPUs to lend go to B, whose usage is lower, though A's jobs arrived first."""
    specs = [tjob(f"a-early{i}", 0.0, 1, 3600.0, "A") for i in range(4)]
    specs += [tjob(f"a{i}", 3600.0, 1, 600.0, "A") for i in range(6)]
    specs += [tjob(f"b{i}", 3600.0, 1, 600.0, "B") for i in range(6)]
    rec = Recorder(specs, teams(("A", 2, None), ("B", 2, None), ("C", 4, None)))
    rec.run()
    assert rec.at(3600.0) == {"A": 2.0, "B": 6.0}
    assert rec.frame.share.ratio("A") > rec.frame.share.ratio("B")
    # Without teams, FIFO gives the first six arrivals (A's) the cluster.
    plain = Simulator(small_cluster(nodes=2, gpus=4), specs, make_policy("fifo"), contention=False)
    while plain.advance():
        plain.schedule()
        if plain.now == 3600.0:
            teams_now = [j.spec.team for j in plain.running.values()]
            assert teams_now.count("A") == 6 and teams_now.count("B") == 2
            break


def test_within_a_team_priority_comes_first() -> None:
    specs = [tjob("low", 0.0, 2, 100.0, "A"), tjob("high", 0.0, 2, 100.0, "A", priority=5)]
    rec = Recorder(specs, teams(("A", 2, 0), ("B", 6, None)))
    rec.run()
    jobs = {j.spec.name: j for j in rec.sim.jobs}
    assert jobs["high"].first_start_s == 0.0 and jobs["low"].first_start_s == pytest.approx(100.0)


class PreemptsEveryone:
    """A policy that preempts whatever runs to start the first pending job on GPU 0..n."""

    name = "rude"
    oracle = False
    time_sharing = True  # it may preempt jobs of equal priority (scheduler.core.priorities): the frame's rule is tested

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        for job in queue:
            gpus = tuple(range(job.spec.workers))
            victims = {v for g in gpus for v in view.tenants(g)}
            return [*(Preempt(v, "rude") for v in sorted(victims)), Place(job.id, Placement(gpus, 1.0), "rude")]
        return []


def test_a_policys_preemption_of_another_teams_quota_is_held_back() -> None:
    """B runs within its quota on GPUs 0-3; A's job, within A's quota, may not take them by preemption: the frame
    holds it back (it waits, saying why) instead of letting the policy preempt B."""
    specs = [tjob("b0", 0.0, 4, 1000.0, "B"), tjob("a0", 10.0, 4, 100.0, "A")]
    frame = TenancyFrame(PreemptsEveryone(), teams(("A", 4, None), ("B", 4, None)))
    sim = Simulator(small_cluster(nodes=2, gpus=4), specs, frame, contention=False)
    sim.advance()
    sim.schedule()
    sim.advance()
    sim.schedule()
    assert [j.spec.name for j in sim.running.values()] == ["b0"] and sim.jobs[0].preemptions == 0
    assert "preempt another team's jobs" in sim.pending_reasons[1]


def test_a_team_at_its_quota_swaps_its_own_jobs_in_the_policys_order() -> None:
    """A and B (quotas 4 + 4) fill the 8 GPUs with long jobs; by 5000 s they have all left Tiresias' first queue. A
    new short job of A's, beyond A's quota with no idle GPU, starts at once: Tiresias preempts A's latest long job for
    it, A stays at its quota and B is untouched. Without swaps it would wait for one of A's jobs to end (20001 s)."""
    specs = [tjob(f"b{i}", 0.0, 1, 20000.0, "B") for i in range(4)]
    specs += [tjob(f"a{i}", 1.0, 1, 20000.0, "A") for i in range(4)]  # later arrivals: Tiresias' first victims
    specs += [tjob("a-short", 5000.0, 1, 600.0, "A")]
    rec = Recorder(specs, teams(("A", 4, None), ("B", 4, None)), "tiresias")
    rec.run()
    jobs = {j.spec.name: j for j in rec.sim.jobs}
    assert jobs["a-short"].first_start_s == 5000.0 and jobs["a-short"].end_s == pytest.approx(5600.0)
    assert rec.at(5000.0) == {"A": 4.0, "B": 4.0}
    assert [n for n, j in jobs.items() if j.preemptions] == ["a3"] and rec.frame.swaps == 1
    assert rec.frame.reclaims == 0


def test_a_swap_whose_victim_is_another_teams_is_dropped() -> None:
    """The same, but B's jobs arrived last, so Tiresias' victim would be B's, within B's quota: the start is dropped
    with its preemption and A's short job waits, saying why, until one of A's own jobs ends."""
    specs = [tjob(f"a{i}", 0.0, 1, 20000.0, "A") for i in range(4)]
    specs += [tjob(f"b{i}", 1.0, 1, 20000.0, "B") for i in range(4)]
    specs += [tjob("a-short", 5000.0, 1, 600.0, "A")]
    rec = Recorder(specs, teams(("A", 4, None), ("B", 4, None)), "tiresias")
    while rec.sim.advance():
        rec.sim.schedule()
        if rec.sim.now == 5000.0:
            assert rec.sim.pending_reasons[8].startswith(
                "team A holds 4 GPUs, all of its 4-GPU quota; the job needs 1, beyond its quota, so it must borrow: "
                "waiting for idle GPUs to lend, 0 may be lent now (0 free")
    jobs = {j.spec.name: j for j in rec.sim.jobs}
    assert jobs["a-short"].first_start_s == pytest.approx(20000.0)
    assert all(j.preemptions == 0 for j in jobs.values()) and rec.frame.swaps == 0


class Scripted:
    """A policy that proposes the decisions a test gives it, whatever it is asked."""

    name = "scripted"
    oracle = False
    time_sharing = True  # its preemptions of equal priorities pass the priority rule: the frame's rules are tested

    def __init__(self) -> None:
        self.script: list[Decision] = []

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        return list(self.script)


class BorrowerFirst:
    """Starts team B's jobs first, each on the highest-numbered GPU that holds it: a policy that ranks a reclaimed
    borrower above the owner it was reclaimed for (as Gittins and Tiresias may) and puts it back where it was."""

    name = "borrower-first"
    oracle = False

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        free = view.free_share.copy()
        out: list[Decision] = []
        for job in sorted(queue, key=lambda j: j.spec.team != "B"):
            share = job.spec.share
            fits = [g for g in range(len(free)) if free[g] >= share - 1e-9]
            if fits:
                free[fits[-1]] -= share
                out.append(Place(job.id, Placement((fits[-1],), share)))
        return out


def test_the_gpus_reclaimed_for_an_owner_go_to_it_not_back_to_the_borrower() -> None:
    """8 GPUs; A (quota 5) runs 3.5 GPUs, B (quota 3) runs 3.5, borrowing its half GPU b-frac on GPU 7; GPU 6 has a
    half free. A's a9 (1 GPU, within its quota) arrives: no GPU is whole, so b-frac is reclaimed. The half GPU left
    free may then be lent, so b-frac is eligible again; a policy that ranks it first used to put it back on GPU 7,
    a9 still did not fit, b-frac was reclaimed again, and so on forever (the round limit: seen with Gittins and
    Tiresias on synthetic windows with teams). The GPUs reclaimed for a9 are offered to it alone first, and a job is
    reclaimed for at most once an instant."""
    from scheduler.core.simulator import Placed

    def run(name: str, team: str, gpu: int, gpus: float = 1.0) -> Placed:
        return Placed(tjob(name, 0.0, gpus, 9000.0, team), Placement((gpu,), min(gpus, 1.0)), 9000.0)

    placed = [run(f"a{g}", "A", g) for g in range(3)] + [run("a-half", "A", 6, 0.5)]
    placed += [run(f"b{g}", "B", g) for g in (3, 4, 5)] + [run("b-frac", "B", 7, 0.5)]
    frame = TenancyFrame(BorrowerFirst(), Teams.parse({"half_life_s": 3600.0, "teams": [
        {"name": "A", "quota_gpus": 5}, {"name": "B", "quota_gpus": 3}]}, cluster_gpus=8))
    sim = Simulator(small_cluster(nodes=2, gpus=4), [tjob("a9", 60.0, 1, 600.0, "A")], frame, contention=False,
                    initial=placed)
    sim.advance()  # t = 60: a9 arrives
    sim.schedule()
    by_name = {j.spec.name: j for j in sim.jobs}
    a9, b_frac = by_name["a9"], by_name["b-frac"]
    assert a9.id in sim.running and sim.view.placement(a9.id).gpus == (7,)
    assert b_frac.id in sim.running and sim.view.placement(b_frac.id).gpus == (6,)  # on the half that may be lent
    assert frame.reclaims == 1 and b_frac.preemptions == 1
    sim.run()
    assert all(j.state is JobPhase.DONE for j in sim.jobs)


def test_a_swap_keeps_only_starts_that_free_their_own_teams_gpus_or_borrow_what_may_be_lent() -> None:
    """8 GPUs; A (quota 4, borrowing limit 1) runs a0..a3 on GPUs 0-3, B (quota 4) runs b0 on GPUs 4-5 and has b1 (2
    GPUs) waiting within its quota, so GPUs 6-7 are held for it and nothing may be lent. Of the policy's proposals:
    a start freeing one of A's jobs is kept; one preempting B's job is dropped, and so is a later start on the GPUs
    that preemption would have freed; one on the held GPUs is dropped; one freeing two of A's jobs for one is kept."""
    from scheduler.core.simulator import Placed

    def run(name: str, team: str, gpus: tuple[int, ...]) -> Placed:
        return Placed(tjob(name, 0.0, len(gpus), 9000.0, team), Placement(gpus), 9000.0)

    pending = [tjob("b1", 0.0, 2, 100.0, "B"), tjob("x1", 0.0, 1, 100.0, "A"), tjob("x2", 0.0, 2, 100.0, "A"),
               tjob("x3", 0.0, 1, 100.0, "A"), tjob("x4", 0.0, 1, 100.0, "A"), tjob("x5", 0.0, 1, 100.0, "A")]
    placed = [run(f"a{g}", "A", (g,)) for g in range(4)] + [run("b0", "B", (4, 5))]
    policy = Scripted()
    frame = TenancyFrame(policy, teams(("A", 4, 1), ("B", 4, None)))
    sim = Simulator(small_cluster(nodes=2, gpus=4), pending, frame, contention=False, initial=placed)
    sim.advance()
    ids = {j.spec.name: j.id for j in sim.jobs}
    standings = frame.standings(sim.view, sim.pending.values())
    fr = frame.frame(sim.view, standings)
    assert [j.spec.name for j in fr.eligible] == ["b1"] and fr.lendable == 0.0
    assert [j.spec.name for j in fr.swaps] == ["x1", "x2", "x3", "x4", "x5"]

    def start(name: str, *gpus: int) -> Place:
        return Place(ids[name], Placement(gpus))

    def out(*names: str) -> list[Preempt]:
        return [Preempt(ids[n]) for n in names]

    policy.script = [*out("a0"), start("x1", 0),  # kept: A's own GPU
                     *out("b0"), start("x2", 4, 5),  # dropped: B's job
                     start("x3", 6),  # dropped: GPU 6 is held for b1, nothing may be lent
                     *out("a1", "a2"), start("x4", 1),  # kept: frees two of A's GPUs for one
                     *out("a3"), start("x5", 4)]  # dropped: GPU 4 is b0's, whose preemption was dropped
    kept = answered(frame._swap(sim.view, fr, standings, 0.0), frame.answer)
    assert kept == [*out("a0"), start("x1", 0), *out("a1", "a2"), start("x4", 1)]
    assert frame.swaps == 3 and ids["x1"] not in fr.waits and ids["x3"] in fr.waits
    sim.apply(kept)  # valid on the cluster as it is
    assert sorted(j.spec.name for j in sim.running.values()) == ["a3", "b0", "x1", "x4"]


def test_a_swap_grows_its_team_only_by_what_may_be_lent_and_within_its_borrowing_limit() -> None:
    """A (quota 4, borrowing limit 1) runs 4 GPUs; B (quota 4) runs 2 and waits for nothing: 2 GPUs may be lent. A
    2-GPU start on them with no preemption would take A to 6 > 5; a 1-GPU one takes it to its limit of 5."""
    from scheduler.core.simulator import Placed

    placed = [Placed(tjob(f"a{g}", 0.0, 1, 9000.0, "A"), Placement((g,)), 9000.0) for g in range(4)]
    placed += [Placed(tjob("b0", 0.0, 2, 9000.0, "B"), Placement((4, 5)), 9000.0)]
    policy = Scripted()
    frame = TenancyFrame(policy, teams(("A", 4, 1), ("B", 4, None)))
    sim = Simulator(small_cluster(nodes=2, gpus=4), [tjob("x2", 0.0, 2, 100.0, "A"), tjob("x1", 0.0, 1, 100.0, "A")],
                    frame, contention=False, initial=placed)
    sim.advance()
    standings = frame.standings(sim.view, sim.pending.values())
    fr = frame.frame(sim.view, standings)
    # x2 is beyond A's borrowing limit and so a swap candidate (it could free A's own GPUs); x1 may borrow.
    assert [j.spec.name for j in fr.eligible] == ["x1"] and [j.spec.name for j in fr.swaps] == ["x2"]
    fr.swaps = [sim.jobs[0], sim.jobs[1]]  # offer both to the policy as swaps, with all 2 GPUs still lendable
    fr.lendable = 2.0
    policy.script = [Place(0, Placement((6, 7))), Place(1, Placement((6,)))]
    assert answered(frame._swap(sim.view, fr, standings, 0.0), frame.answer) == [Place(1, Placement((6,)))]


def test_jobs_of_a_team_not_defined_run_as_the_default_team_on_idle_gpus_only() -> None:
    """Jobs naming no listed team fall to `default`, which has no quota: they borrow, and give the GPUs back."""
    specs = [tjob("x0", 0.0, 4, 1000.0, "default"), tjob("a0", 10.0, 4, 100.0, "A")]
    rec = Recorder(specs, teams(("A", 8, None)))
    rec.run()
    assert rec.at(0.0) == {"default": 4.0} and rec.at(10.0) == {"default": 4.0, "A": 4.0}
    specs = [tjob("x0", 0.0, 8, 1000.0, "default"), tjob("a0", 10.0, 4, 100.0, "A")]
    rec = Recorder(specs, teams(("A", 8, None)))
    rec.run()
    assert rec.at(10.0) == {"A": 4.0} and rec.frame.reclaims == 1


def test_the_report_accounts_each_teams_share_exactly() -> None:
    """The acceptance scenario again, with run(): A's 8 jobs run 0-600; B takes 4 GPUs back for 600-2400; A's 4 kept
    jobs end at 3600 and the 4 reclaimed ones, 3000 s of work left, run 2400-5400."""
    specs = [tjob(f"a{i}", 0.0, 1, 3600.0, "A") for i in range(8)]
    specs += [tjob(f"b{i}", 600.0, 1, 1800.0, "B") for i in range(4)]
    sim = Simulator(small_cluster(nodes=2, gpus=4), specs, make_policy("fifo"), contention=False,
                    preempt_overhead_s=0.0, teams=teams(("A", 4, None), ("B", 4, None)))
    res = sim.run()
    assert res.teams is not None
    a, b = res.teams["teams"]["A"], res.teams["teams"]["B"]
    assert a["gpu_hours"] == pytest.approx(8 * 600 / 3600 + 4 * 3000 / 3600 + 4 * 3000 / 3600)
    assert b["gpu_hours"] == pytest.approx(4 * 1800 / 3600)
    assert a["over_quota_s"] == pytest.approx(600 + 1200) and b["over_quota_s"] == 0.0
    assert a["in_system_s"] == pytest.approx(5400) and b["in_system_s"] == pytest.approx(1800)
    assert a["starved_s"] == 0.0 and b["starved_s"] == 0.0
    assert b["avg_jct_s"] == pytest.approx(1800) and a["jobs"] == 8
    x_a, x_b = 28800 / min(4 * 5400, 28800), 7200 / 7200  # used over due
    assert res.teams["jain"] == pytest.approx((x_a + x_b) ** 2 / (2 * (x_a**2 + x_b**2)))
    assert "default" not in res.teams["teams"]  # no demand, not reported


# ---- finish-time fairness -----------------------------------------------------------------------------------------


def test_rho_is_a_jobs_jct_shared_over_its_jct_with_its_team_alone_on_its_quota() -> None:
    """A (quota 4) starts two 4-GPU jobs at 0 on 8 GPUs, borrowing B's 4 (quota 4); B's job arrives at 500 and the
    frame reclaims a1, which restarts at 1000 with 500 s of work and 600 s of restart left: it ends at 2100. Alone on
    4 GPUs, A would have run a0 over 0-1000 and a1 over 1000-2000: a1's rho is 2100 / 2000, the restart cost more
    than borrowing gained. B's job runs 500-1500 either way."""
    specs = [tjob("a0", 0.0, 4, 1000.0, "A"), tjob("a1", 0.0, 4, 1000.0, "A"), tjob("b0", 500.0, 4, 1000.0, "B")]
    res = Simulator(small_cluster(nodes=2, gpus=4), specs, make_policy("fifo"), contention=False,
                    preempt_overhead_s=600.0, teams=teams(("A", 4, None), ("B", 4, None))).run()
    assert res.teams is not None
    assert [j.end_s for j in res.jobs] == [pytest.approx(1000.0), pytest.approx(2100.0), pytest.approx(1500.0)]
    a, b = res.teams["teams"]["A"], res.teams["teams"]["B"]
    assert a["rho_max"] == pytest.approx(1.05) and a["rho_median"] == pytest.approx((1.0 + 1.05) / 2)
    assert b["rho_max"] == pytest.approx(1.0) and b["rho_median"] == pytest.approx(1.0)
    assert res.teams["rho_max"] == pytest.approx(1.05)
    assert res.teams["rho_jobs"] == 3 and res.teams["rho_excluded"] == 0 and res.teams["reclaims"] == 1


def test_jobs_larger_than_their_quota_and_teams_under_one_gpu_have_no_rho() -> None:
    """A's quota of 2.5 GPUs runs alone on 2: its 4-GPU job has no isolated JCT. B's 0.5 GPU of quota is no whole
    GPU: none of its jobs has one. C runs alone on its 5 GPUs."""
    specs = [tjob("a0", 0.0, 2, 100.0, "A"), tjob("a1", 0.0, 4, 100.0, "A"), tjob("b0", 0.0, 1, 100.0, "B"),
             tjob("c0", 0.0, 1, 100.0, "C")]
    res = Simulator(small_cluster(nodes=2, gpus=4), specs, make_policy("fifo"), contention=False,
                    teams=teams(("A", 2.5, None), ("B", 0.5, None), ("C", 5, None))).run()
    assert res.teams is not None
    t = res.teams["teams"]
    assert (t["A"]["rho_jobs"], t["A"]["rho_excluded"], t["A"]["rho_max"]) == (1, 1, pytest.approx(1.0))
    assert (t["B"]["rho_jobs"], t["B"]["rho_excluded"], t["B"]["rho_max"], t["B"]["rho_median"]) == (0, 1, None, None)
    assert (t["C"]["rho_jobs"], t["C"]["rho_excluded"]) == (1, 0)
    assert res.teams["rho_jobs"] == 2 and res.teams["rho_excluded"] == 2


def test_a_quota_cluster_is_whole_nodes_then_part_of_the_next() -> None:
    from scheduler.core.model import parse_cluster
    from scheduler.core.tenancy import quota_cluster

    nv = small_cluster(nodes=2, gpus=4)
    five = quota_cluster(nv, 5)
    assert five.num_gpus == 5 and list(five.node_num_gpus) == [4, 1] and bool(five.node_nvlink.all())
    # pcie-v100: 8 GPUs under 2 PCIe switches (4 each). A node's first 4 GPUs sit under one switch, its first 6 under
    # two (split evenly, 3 + 3), its first 5 under one (5 does not split over two).
    pcie = parse_cluster("pcie-v100:3")
    for gpus, last_switches in ((12, 1), (14, 2), (13, 1), (16, 2)):
        c = quota_cluster(pcie, gpus)
        assert c.num_gpus == gpus and c.num_nodes == 2 and c.gpu_types == pcie.gpu_types
        last = c.node_gpus(1)
        assert len({int(c.gpu_switch[g]) for g in last}) == last_switches, gpus
        assert c.spec.nodes_per_rack == pcie.spec.nodes_per_rack
    with pytest.raises(ValueError, match="between 1 and 24"):
        quota_cluster(pcie, 0)


# ---- traces with teams, and `corral simulate --teams` -------------------------------------------------------------

CSV = """job_id,submit_s,num_gpus,duration_s,kind,model,team
a0,0,4,3600,training,ResNet-50-bs64,vision
a1,0,4,3600,training,ResNet-50-bs64,vision
b0,600,4,600,training,ResNet-50-bs64,nlp
c0,700,1,60,training,ResNet-50-bs64,
a2,0,4,3600,training,ResNet-50-bs64,vision
a3,0,4,3600,training,ResNet-50-bs64,vision
"""


def test_the_corral_csv_carries_teams_and_synthetic_workloads_draw_skewed_ones(tmp_path: Path) -> None:
    from scheduler.core.traces import TraceError, load_trace, synthetic

    path = tmp_path / "jobs.csv"
    path.write_text(CSV)
    assert [j.team for j in load_trace(str(path)).jobs] == ["vision"] * 4 + ["nlp", "default"]
    path.write_text(CSV.replace(",nlp", "," + "n" * 65))
    with pytest.raises(TraceError, match=r"line 4: column 'team'"):
        load_trace(str(path))
    counts: dict[str, int] = {}
    for j in synthetic(4000, seed=2, teams=4).jobs:
        counts[j.team] = counts.get(j.team, 0) + 1
    assert sorted(counts) == ["team0", "team1", "team2", "team3"]
    assert counts["team0"] > 1.6 * counts["team1"] > 1.6 * 1.2 * counts["team3"]  # 1 : 1/2 : 1/3 : 1/4
    plain = [(j.submit_s, j.num_gpus, j.model) for j in synthetic(300, seed=2).jobs]
    assert plain == [(j.submit_s, j.num_gpus, j.model) for j in synthetic(300, seed=2, teams=4).jobs]
    with pytest.raises(TraceError, match="teams='2.5'"):
        load_trace("synthetic:10,teams=2.5")


def test_corral_simulate_with_teams_prints_and_writes_each_teams_share(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from scheduler.cli.commands import main

    (tmp_path / "jobs.csv").write_text(CSV)
    (tmp_path / "teams.yaml").write_text("teams:\n  - {name: vision, quota_gpus: 8}\n  - {name: nlp, quota_gpus: 8}\n")
    out = tmp_path / "m.json"
    res = CliRunner().invoke(main, ["simulate", "--trace", str(tmp_path / "jobs.csv"), "--cluster", "pcie-v100:2",
                                    "--policy", "fifo,tiresias", "--teams", str(tmp_path / "teams.yaml"),
                                    "--no-contention", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "Jain's index" in res.output and "vision" in res.output
    report = json.loads(out.read_text())
    for policy in ("fifo", "tiresias"):
        teams_out = report["policies"][policy]["teams"]
        assert set(teams_out["teams"]) == {"vision", "nlp", "default"}
        # 16 GPUs: vision borrowed all of nlp's 8 from 0; at 600 it gave 4 back (one job), and nlp's job started
        # at once; the job of no team only borrows, after them.
        assert teams_out["teams"]["nlp"]["avg_jct_s"] == pytest.approx(600.0)
        assert teams_out["teams"]["vision"]["over_quota_s"] >= 3600.0
        assert teams_out["teams"]["nlp"]["starved_s"] == 0.0
        # The reclaim at 600 s; under Tiresias also one swap within vision at 900 s, when its running jobs leave the
        # first queue and the reclaimed one, with less service, takes the latest one's GPUs (as it would alone).
        assert teams_out["reclaims"] == 1 and teams_out["swaps"] == (1 if policy == "tiresias" else 0)
        assert report["policies"][policy]["preemptions"] == 1 + teams_out["swaps"]
        # Finish-time fairness: c0 (no team) has no quota to run alone on; everyone else has a rho.
        assert teams_out["rho_jobs"] == 5 and teams_out["rho_excluded"] == 1
        assert teams_out["teams"]["default"]["rho_max"] is None
    # FIFO by hand: alone on its 8 GPUs (one node), vision runs a0, a1 over 0-3600 s and a2, a3 over 3600-7200 s;
    # shared, a0-a2 end at 3600 and a3 (reclaimed at 600, back at 1200 with 3000 s + 30 s of restart left) at 4230.
    # nlp's job takes 600 s either way.
    fifo = report["policies"]["fifo"]["teams"]
    assert fifo["teams"]["vision"]["rho_max"] == pytest.approx(1.0)
    assert fifo["teams"]["vision"]["rho_median"] == pytest.approx((4230 / 7200 + 1.0) / 2)
    assert fifo["teams"]["nlp"]["rho_max"] == pytest.approx(1.0) and fifo["rho_max"] == pytest.approx(1.0)
    assert "max ρ" in res.output and "all teams" in res.output
    # A team the trace names but the file does not: refused, naming them, before anything runs.
    (tmp_path / "teams.yaml").write_text("teams:\n  - {name: vision, quota_gpus: 8}\n")
    res = CliRunner().invoke(main, ["simulate", "--trace", str(tmp_path / "jobs.csv"), "--cluster", "pcie-v100:2",
                                    "--policy", "fifo", "--teams", str(tmp_path / "teams.yaml")])
    assert res.exit_code == 2 and "unknown team(s) ['nlp']" in res.output
    (tmp_path / "teams.yaml").write_text("teams:\n  - {name: vision, quota_gpus: 40}\n")
    res = CliRunner().invoke(main, ["simulate", "--trace", str(tmp_path / "jobs.csv"), "--cluster", "pcie-v100:2",
                                    "--policy", "fifo", "--teams", str(tmp_path / "teams.yaml")])
    assert res.exit_code == 2 and "more than the cluster's 16 GPUs" in res.output


# ---- issue 26: the words of a wait say what the frame counted ----------------------------------------------------


def frame_waits(tm: Teams, running: list[tuple[str, float]], pending: list[tuple[str, float]]) -> dict[str, str]:
    """The frame's wait reasons, by pending job name, on an 8-GPU cluster where `running` (team, GPUs) hold GPUs."""
    cluster = small_cluster(nodes=2, gpus=4)
    from scheduler.core.contention import ContentionModel
    from scheduler.core.state import ClusterState
    from scheduler.core.workloads import catalog

    state = ClusterState(cluster, catalog())
    jobs: dict[int, Job] = {}
    next_gpu = 0
    for i, (team, gpus) in enumerate(running):
        spec = tjob(f"r{i}", 0.0, gpus, 100.0, team)
        where = tuple(range(next_gpu, next_gpu + max(1, int(gpus))))
        next_gpu += len(where)
        placement = Placement(where, spec.share)
        state.allocate(i, spec, placement)
        job = Job(i, spec, 100.0)
        job.placement, job.start_s = placement, 0.0
        jobs[i] = job
    view = ClusterView(state, ContentionModel(cluster, catalog()), jobs)
    queue = [Job(100 + i, tjob(f"p{i}", 1.0, gpus, 100.0, team), 100.0) for i, (team, gpus) in enumerate(pending)]
    frame = TenancyFrame(make_policy("fifo"), tm)
    fr = frame.frame(view, frame.standings(view, queue))
    return {j.spec.name: fr.waits[j.id] for j in queue if j.id in fr.waits}


def test_under_its_quota_a_team_is_never_said_to_be_at_it() -> None:
    """Vision holds 2 of its 4-GPU quota and may not borrow: a 3-GPU job would take it to 5. The old words: "team A at
    its quota: 2/4 GPUs, borrowing limit reached (0 GPUs)"."""
    waits = frame_waits(teams(("A", 4, 0), ("B", 4, None)), [("A", 2)], [("A", 3)])
    assert waits == {"p0": "team A holds 2 GPUs of its 4-GPU quota; the job needs 3, which would take it to 5 GPUs, "
                           "past its 4-GPU quota plus its borrowing limit of 0 (4 in all)"}


def test_jobs_queued_within_the_quota_are_counted_in_the_words_as_in_the_rule() -> None:
    # A holds 1 of 4; its 2-GPU job fits the quota (queued within it), its 2-GPU job after would make 5 > 4 + 0.
    waits = frame_waits(teams(("A", 4, 0), ("B", 4, None)), [("A", 1)], [("A", 2), ("A", 2)])
    assert waits == {"p1": "team A holds 1 GPU of its 4-GPU quota (its queued jobs within the quota take 2 more); the "
                           "job needs 2, which would take it to 5 GPUs, past its 4-GPU quota plus its borrowing limit "
                           "of 0 (4 in all)"}


def test_a_team_at_and_over_its_quota_borrows_what_may_be_lent() -> None:
    # A at its quota (4 of 4), B holds 3 of its 4 and has a 1-GPU job queued within it: of the 1 free GPU none may be
    # lent. Then A over its quota (4 on a quota of 2), nothing free.
    waits = frame_waits(teams(("A", 4, None), ("B", 4, None)), [("A", 4), ("B", 3)], [("A", 1), ("B", 1)])
    assert waits == {"p0": "team A holds 4 GPUs, all of its 4-GPU quota; the job needs 1, beyond its quota, so it "
                           "must borrow: waiting for idle GPUs to lend, 0 may be lent now (1 free, 1 held for teams "
                           "under their quota)"}
    over = frame_waits(teams(("A", 2, None), ("B", 6, None)), [("A", 4), ("B", 4)], [("A", 1)])
    assert over == {"p0": "team A holds 4 GPUs: its 2-GPU quota and 2 borrowed; the job needs 1, beyond its quota, so "
                          "it must borrow: waiting for idle GPUs to lend, 0 may be lent now (0 free)"}


def test_a_team_without_quota_says_it_only_borrows() -> None:
    """The old words: "team default over its quota (0/0 GPUs)"."""
    waits = frame_waits(teams(("A", 4, None)), [("A", 4), ("default", 4)], [("default", 1)])
    assert waits == {"p0": "team default has no quota: it runs only on GPUs other teams leave idle (borrowing); it "
                           "holds 4 GPUs; the job needs 1: waiting for idle GPUs to lend, 0 may be lent now (0 free)"}
    limited = frame_waits(teams(("A", 4, None), ("C", 0, 1)), [("C", 1)], [("C", 1)])
    assert limited == {"p0": "team C has no quota: it runs only on GPUs other teams leave idle (borrowing); it holds "
                             "1 GPU; the job needs 1, which would take it to 2 GPUs, past its borrowing limit of 1 GPU"}


def test_the_words_name_the_borrowers_ahead() -> None:
    # 2 GPUs free, nobody under quota waits: the first default job (2 GPUs) takes both, the second finds none left.
    waits = frame_waits(teams(("A", 6, None)), [("A", 6)], [("default", 2), ("default", 1)])
    assert waits == {"p1": "team default has no quota: it runs only on GPUs other teams leave idle (borrowing); the "
                           "job needs 1: waiting for idle GPUs to lend, 0 may be lent now (2 free, 2 going to "
                           "borrowers ahead)"}
