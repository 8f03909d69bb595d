"""`scheduler.live.team_usage`: each team's fair-share usage (GPU-seconds decayed with a half-life) and GPUs in use
over a window, on figures computed by hand and against the integral summed interval by interval."""

from __future__ import annotations

import math
import random

import pytest

from scheduler.live.team_usage import Held, usage_over_quota, usage_series

H = 100 / math.log(2)  # h / ln 2 for a half-life of 100 s: one GPU held for ever, seen now, has used H GPU-seconds


def exact(held: list[Held], team: str, t: float, h: float) -> float:
    """The decayed integral at t, one interval at a time: gpus * h/ln2 * (2^-((t - b)/h) - 2^-((t - a)/h))."""
    total = 0.0
    for x in held:
        b = t if x.end is None else min(x.end, t)
        if x.team == team and x.start < b:
            total += x.gpus * h / math.log(2) * (2 ** (-(t - b) / h) - 2 ** (-(t - x.start) / h))
    return total


def test_usage_and_gpus_in_use_by_hand() -> None:
    # Half-life 100 s, a window of 400 s ending at t=400 in 4 points (t = 100, 200, 300, 400).
    # a: 2 GPUs over [0, 100]. b: 1 GPU over [-100, 50] (half of it before the window) and a 0.5 share from 150 on.
    held = [Held("a", 2, 0, 100), Held("b", 1, -100, 50), Held("b", 0.5, 150, None)]
    r = usage_series(held, ["a", "b", "idle"], now=400, window_s=400, points=4, half_life_s=100)
    assert r.times == [100, 200, 300, 400] and r.step_s == 100
    a, b, idle = r.teams["a"], r.teams["b"], r.teams["idle"]
    # a: 2 * H * (1 - 1/2) = 144.27 GPU-s at t=100, then halved every 100 s.
    assert a.usage == pytest.approx([144.2695, 72.1348, 36.0674, 18.0337], abs=1e-4)
    assert a.usage_now == a.usage[-1]
    assert a.gpus_in_use == pytest.approx([2, 0, 0, 0])
    # b at t=100: the 1-GPU interval, ended 50 s ago, begun 200 s ago: H * (2^-0.5 - 2^-2) = 65.947.
    # at t=200: H * (2^-1.5 - 2^-3) = 32.973, plus the share held for 50 s: 0.5 H (1 - 2^-0.5) = 21.128.
    # at t=400: H * (2^-3.5 - 2^-5) = 8.242, plus 0.5 H (1 - 2^-2.5) = 59.384.
    assert b.usage[0] == pytest.approx(65.9466, abs=1e-4)
    assert b.usage[1] == pytest.approx(32.9733 + 21.1277, abs=1e-4)
    assert b.usage[3] == pytest.approx(8.2417 + 59.3846, abs=1e-4)
    # Mean GPUs held over each step: 1 GPU for 50 of the first 100 s; the share for 50 s, then throughout.
    assert b.gpus_in_use == pytest.approx([0.5, 0.25, 0.5, 0.5])
    assert idle.usage == [0, 0, 0, 0] and idle.gpus_in_use == [0, 0, 0, 0]


def test_usage_over_quota() -> None:
    assert usage_over_quota(7200.0, 2.0) == 3600.0  # as much as its whole quota for an hour (decayed)
    assert usage_over_quota(7200.0, 0.0) is None  # no quota (the default team): no ratio, it only borrows


def test_matches_the_integral_summed_interval_by_interval() -> None:
    rng = random.Random(13)
    now, h = 10_000.0, 1_500.0
    held = []
    for _ in range(300):
        start = rng.uniform(-20_000, now + 500)  # some before the window, some after now (not counted)
        end = None if rng.random() < 0.2 else start + rng.expovariate(1 / 800)
        held.append(Held(rng.choice(["x", "y", "z"]), rng.choice([0.25, 0.5, 1, 2, 4, 8]), start, end))
    held.append(Held("x", 3, 2_000, 2_000))  # empty: nothing
    held.append(Held("gone", 4, 0, 5_000))  # a team not asked for: ignored
    r = usage_series(held, ["x", "y", "z"], now=now, window_s=6_000, points=37, half_life_s=h)
    assert r.times[-1] == now and len(r.times) == 37
    for team, series in r.teams.items():
        want = [exact(held, team, t, h) for t in r.times]
        assert series.usage == pytest.approx(want, rel=1e-9, abs=1e-6)
        # GPUs in use, averaged over each step, from the same intervals clipped to the step.
        for k, t in enumerate(r.times):
            lo = t - r.step_s
            gpu_s = sum(x.gpus * max(0.0, min(now if x.end is None else x.end, t) - max(x.start, lo))
                        for x in held if x.team == team)
            assert series.gpus_in_use[k] == pytest.approx(gpu_s / r.step_s, rel=1e-9, abs=1e-9)


def test_a_short_half_life_over_a_long_window_stays_finite() -> None:
    # 30 days at a 1 s half-life: 2^(days / h) would overflow a float; every power here has exponent <= 0.
    day = 86_400.0
    held = [Held("t", 8, -40 * day, -35 * day), Held("t", 1, -10.0, None)]
    r = usage_series(held, ["t"], now=0.0, window_s=30 * day, points=2000, half_life_s=1.0)
    assert all(math.isfinite(u) for u in r.teams["t"].usage)
    assert r.teams["t"].usage_now == pytest.approx(1 / math.log(2) * (1 - 2 ** -10))


def test_refuses_a_grid_it_cannot_build() -> None:
    for bad in ({"points": 0}, {"window_s": 0.0}, {"half_life_s": -1.0}):
        args = {"now": 0.0, "window_s": 60.0, "points": 10, "half_life_s": 100.0} | bad
        with pytest.raises(ValueError, match="points >= 1"):
            usage_series([], ["t"], **args)
