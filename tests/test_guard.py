"""The guard for learned policies (issue 50, part 3): the switching rule (scheduler/core/guard.py) on scripted
windows, a replay from the present (scheduler/core/replay.py) against the run it was taken from, and `guarded:POLICY`
(policies/guarded.py) in the simulator handing a losing policy's decisions to its fallback, on small inline cases."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from policies import make_policy
from policies.guarded import Guarded
from scheduler.cli.commands import main
from scheduler.core.guard import GuardRule, GuardSettings
from scheduler.core.model import JobSpec, parse_cluster
from scheduler.core.replay import present, replay
from scheduler.core.simulator import Simulator
from scheduler.core.traces import synthetic

SETTINGS = GuardSettings(threshold=1.02, min_windows=4, keep=8, alpha=0.05, every_jobs=10)


def feed(rule: GuardRule, ratios: list[float], other: float = 100.0) -> list[str | None]:
    """One window per ratio: the learned policy's time is `ratio` x candidate a's; b is 10% worse than a."""
    out = []
    for i, r in enumerate(ratios):
        out.append(rule.observe(float(i), r * other, {"a": other, "b": 1.1 * other}).fallback)
    return out


def test_the_rule_switches_on_evidence_of_a_loss_and_back_when_it_turns() -> None:
    rule = GuardRule(("b", "a"), SETTINGS)
    losing = [1.10, 1.08, 1.12, 1.09, 1.11, 1.10]
    acting = feed(rule, losing)
    assert acting[:3] == [None, None, None]  # fewer windows than min_windows: no switch, however clear
    assert acting[3:] == ["a", "a", "a"]  # to the best candidate (a), not the first named (b)
    assert [v.switched for v in rule.verdicts] == [False, False, False, True, False, False]
    assert rule.verdicts[3].low > 1.02 and rule.verdicts[3].best == "a"
    # The workload shifts: the learned policy now wins; once the kept windows say so, it acts again.
    winning = feed(rule, [0.90] * 8)
    assert winning[0] == "a" and winning[-1] is None
    back = next(i for i, v in enumerate(list(rule.verdicts)[6:]) if v.switched)
    assert rule.verdicts[6 + back].high < 1.02
    assert "switched to learned" in rule.verdicts[6 + back].text("learned")


@pytest.mark.parametrize("ratios", [[1.01, 1.0, 1.02, 1.01] * 3, [1.30, 0.80, 1.25, 0.85] * 3])
def test_the_rule_keeps_the_learned_policy_within_the_threshold_or_without_evidence(ratios: list[float]) -> None:
    """1% worse is within the 2% threshold; a noisy policy worse on half the windows and better on the others gives
    no one-sided evidence."""
    rule = GuardRule(("a", "b"), SETTINGS)
    assert feed(rule, ratios) == [None] * len(ratios)


def test_settings_out_of_range_name_the_field() -> None:
    with pytest.raises(ValueError, match="keep"):
        GuardSettings(min_windows=6, keep=4)
    with pytest.raises(ValueError, match="threshold"):
        GuardSettings(threshold=0.9)


CLUSTER = parse_cluster("dgx-a100:2")


def busy_trace(n: int = 160) -> list[JobSpec]:
    """Mixed sizes arriving faster than 16 GPUs serve them: big gangs block a FIFO head that will not backfill."""
    return synthetic(n, seed=3, mean_interarrival_s=40.0, frac_share=0.0).jobs


def test_a_replay_from_the_present_runs_as_the_run_it_was_taken_from() -> None:
    specs = busy_trace(60)
    whole = Simulator(CLUSTER, specs, make_policy("fifo-backfill"))
    ends = {j.spec.name: j.end_s for j in whole.run().jobs}
    sim = Simulator(CLUSTER, specs, make_policy("fifo-backfill"))
    while sim.advance():  # halfway: some jobs run, some wait, some have not arrived
        sim.schedule()
        if sim.now >= specs[len(specs) // 2].submit_s:
            break
    at = sim.now
    start = present(sim.view, sorted(sim.pending.values(), key=lambda j: j.id), at)
    assert start.running and start.pending
    later = [s for s in specs if s.submit_s > sim.now]
    jobs = replay(start, at, later, make_policy("fifo-backfill"))
    assert len(jobs) == len(start.pending) + len(later)
    for job in jobs:
        assert job.end_s is not None
        assert job.end_s + at == pytest.approx(ends[job.spec.name], rel=1e-6, abs=1e-3)
    # Up to a horizon: the jobs still running then have no end, and the replay stops there.
    cut = replay(start, at, later, make_policy("fifo-backfill"), until=600.0)
    assert any(j.end_s is None for j in cut) and all(j.end_s is None or j.end_s <= 600.0 for j in cut)


def run(policy: object, specs: list[JobSpec]) -> float:
    result = Simulator(CLUSTER, specs, policy).run()  # type: ignore[arg-type]
    return float(result.jct().mean())


def test_a_guarded_policy_hands_over_to_its_fallback_while_it_loses() -> None:
    specs = busy_trace()
    fifo, backfill = run(make_policy("fifo"), specs), run(make_policy("fifo-backfill"), specs)
    assert fifo > 1.1 * backfill  # the case: FIFO without backfill loses clearly
    guarded = Guarded("fifo", candidates=("fifo-backfill",), settings=SETTINGS)
    jct = run(guarded, specs)
    switched = [v for v in guarded.verdicts if v.switched]
    assert switched and switched[0].fallback == "fifo-backfill" and guarded.fallback_s > 0
    assert jct < fifo  # the fallback acted after the switch: better than the losing policy alone
    assert guarded.name == "guarded:fifo" and not guarded.failed
    # The other way round, the guard never switches away from the policy that wins.
    keeps = Guarded("fifo-backfill", candidates=("fifo",), settings=SETTINGS)
    assert run(keeps, specs) == pytest.approx(backfill)
    assert keeps.verdicts and all(v.fallback is None for v in keeps.verdicts)
    assert all(math.isfinite(v.ratio) for v in keeps.verdicts)


def test_corral_simulate_guard_says_what_the_guard_did() -> None:
    args = ["simulate", "--trace", "synthetic:120,iat=40,frac=0", "--seed", "3", "--cluster", "dgx-a100:2",
            "--policy", "fifo"]
    out = CliRunner().invoke(main, [*args, "--guard", "fifo-backfill"])
    assert out.exit_code == 0, out.output
    assert "guarded:fifo" in out.output and "guard on fifo: " in out.output and " windows, " in out.output
    bad = CliRunner().invoke(main, [*args, "--guard", "nope"])
    assert bad.exit_code == 2 and "--guard" in bad.output and "unknown policy 'nope'" in bad.output
