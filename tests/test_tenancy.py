"""The tenancy frame (scheduler.core.tenancy) in the simulator, rule by rule, on small inline clusters."""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path

import pytest
from conftest import small_cluster

from policies import make_policy
from scheduler.core.decisions import Decision, Place, Preempt
from scheduler.core.model import Job, JobSpec, JobState, Placement
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
    assert all(j.state is JobState.DONE for j in jobs)
    a = [j for j in jobs if j.spec.team == "A"]
    assert sum(j.preemptions for j in a) == 4 and all(j.preemptions <= 1 for j in a)
    assert rec.frame.reclaims == 4
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
    assert all("team A at its quota: 4/2 GPUs, borrowing limit reached (2 GPUs)" == reasons[j] for j in waiting)


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
        assert report["policies"][policy]["preemptions"] == 1
    # A team the trace names but the file does not: refused, naming them, before anything runs.
    (tmp_path / "teams.yaml").write_text("teams:\n  - {name: vision, quota_gpus: 8}\n")
    res = CliRunner().invoke(main, ["simulate", "--trace", str(tmp_path / "jobs.csv"), "--cluster", "pcie-v100:2",
                                    "--policy", "fifo", "--teams", str(tmp_path / "teams.yaml")])
    assert res.exit_code == 2 and "unknown team(s) ['nlp']" in res.output
    (tmp_path / "teams.yaml").write_text("teams:\n  - {name: vision, quota_gpus: 40}\n")
    res = CliRunner().invoke(main, ["simulate", "--trace", str(tmp_path / "jobs.csv"), "--cluster", "pcie-v100:2",
                                    "--policy", "fifo", "--teams", str(tmp_path / "teams.yaml")])
    assert res.exit_code == 2 and "more than the cluster's 16 GPUs" in res.output
