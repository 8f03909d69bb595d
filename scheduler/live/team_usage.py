"""Each team's fair-share usage and GPUs in use over a recent window, from the store's allocation intervals.

Fair-share usage is the tenancy frame's (`scheduler.core.tenancy.FairShare`): GPU-seconds decayed with a half-life h,
so at time t a team's usage is the integral over its holdings of gpus * 2^-((t - s) / h) ds. Over one interval [a, b]
held before t that is exactly

    gpus * h / ln 2 * (2^-((t - b) / h) - 2^-((t - a) / h)).

The figures are computed from the intervals alone (no state kept between calls), on a grid of `points` instants
ending at `now`, in O(n log n + points) for n intervals: each interval's start and end fall in exactly one step of the
grid, and the step-to-step recurrence usage(t_k) = usage(t_k-1) * 2^-(step / h) + (what was held during the step,
decayed to t_k) needs per step only the starts and ends inside it and what was held at its two edges. Every power of
two has an exponent <= 0, so nothing overflows however long the history or short the half-life (an underflow to 0 is
the right answer there).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# Intervals that ended this many half-lives before the window are left out of the query: each would add less than
# 2^-64 of its decayed GPU-seconds, below a float's resolution of the total.
NEGLIGIBLE_HALF_LIVES = 64.0


@dataclass(frozen=True, slots=True)
class Held:
    """`gpus` (a share counts as its fraction) held by a job of `team` from `start` to `end` (None: still held)."""

    team: str
    gpus: float
    start: float
    end: float | None


@dataclass(frozen=True, slots=True)
class TeamSeries:
    usage_now: float  # decayed GPU-seconds at the grid's last instant (`now`)
    usage: list[float]  # decayed GPU-seconds at each instant of the grid
    gpus_in_use: list[float]  # mean GPUs held over the step ending at each instant


@dataclass(frozen=True, slots=True)
class UsageSeries:
    times: list[float]  # the grid's instants, `now - window_s + step_s` ... `now`
    step_s: float
    teams: dict[str, TeamSeries]


def history_start(now: float, window_s: float, half_life_s: float) -> float:
    """The earliest end an interval needs to matter to `usage_series(now, window_s, ...)`."""
    return now - window_s - NEGLIGIBLE_HALF_LIVES * half_life_s


def usage_series(held: Iterable[Held], teams: Sequence[str], *, now: float, window_s: float, points: int,
                 half_life_s: float) -> UsageSeries:
    """Each team's decayed usage at `points` evenly spaced instants ending at `now`, and the mean GPUs it held over
    the step before each. Intervals of teams not in `teams` are ignored; open ones (`end` None) are held until now,
    and whatever lies after `now` is not counted."""
    if points < 1 or not window_s > 0 or not half_life_s > 0:
        raise ValueError(f"need points >= 1, window_s > 0 and half_life_s > 0 "
                         f"(got {points}, {window_s}, {half_life_s})")
    step = window_s / points
    grid = now - window_s + step * np.arange(points + 1, dtype=np.float64)  # t_0 .. t_m, t_m = now
    grid[-1] = now  # exactly, whatever the rounding of the multiplications
    index = {name: i for i, name in enumerate(teams)}
    rows = [(index[h.team], h.gpus, h.start, math.inf if h.end is None else h.end)
            for h in held if h.team in index and (h.end is None or h.end > h.start)]
    n_teams, m = len(teams), points
    arr = np.array(rows, dtype=np.float64).reshape(-1, 4)
    team, gpus, start, end = arr[:, 0].astype(np.intp), arr[:, 1], arr[:, 2], arr[:, 3]

    def per_step(at: FloatArray, weights: FloatArray, side: Literal["left", "right"]) -> FloatArray:
        """Sum of `weights` by (team, step), for the events `at` falling in a step of the grid: with side "left",
        t_k-1 < at <= t_k (ends); with "right", t_k-1 <= at < t_k (starts). Row 0 (before the grid) stays empty."""
        k = np.searchsorted(grid, at, side=side)
        inside = (k >= 1) & (k <= m)
        out = np.bincount(team[inside] * (m + 1) + k[inside], weights=weights[inside], minlength=n_teams * (m + 1))
        return np.asarray(out, dtype=np.float64).reshape(n_teams, m + 1)

    def held_at(t: FloatArray) -> FloatArray:
        """GPUs each team holds at each instant of `t` (start < t < end), shape (teams, len(t))."""
        out = np.zeros((n_teams, len(t)))
        for i in range(n_teams):
            mine = team == i
            starts, ends, g = start[mine], end[mine], gpus[mine]
            by_start, by_end = np.argsort(starts), np.argsort(ends)
            began = np.concatenate([[0.0], np.cumsum(g[by_start])])[np.searchsorted(starts[by_start], t, "left")]
            ended = np.concatenate([[0.0], np.cumsum(g[by_end])])[np.searchsorted(ends[by_end], t, "right")]
            out[i] = began - ended
        return out

    # For each interval, the step its end and its start fall in, and that step's end instant t_k.
    k_end = np.clip(np.searchsorted(grid, end, side="left"), 0, m)
    k_start = np.clip(np.searchsorted(grid, start, side="right"), 0, m)
    edge = held_at(grid)  # (teams, m + 1)
    h = half_life_s
    keep = 2.0 ** (-step / h)
    scale = h / math.log(2)

    # Within step k an overlapping interval contributes w(min(end, t_k)) - w(max(start, t_k-1)) for the weight w of
    # the quantity: 2^-((t_k - s) / h) for the decayed usage (times h / ln 2), s - t_k-1 for the GPU-seconds held.
    with np.errstate(over="ignore", invalid="ignore"):  # inf ends (still held) lie outside every step: masked out
        decay_end = per_step(end, gpus * 2.0 ** (-(grid[k_end] - end) / h), "left")
        decay_start = per_step(start, gpus * 2.0 ** (-(grid[k_start] - start) / h), "right")
        lin_end = per_step(end, gpus * (end - grid[np.maximum(k_end - 1, 0)]), "left")
        lin_start = per_step(start, gpus * (start - grid[np.maximum(k_start - 1, 0)]), "right")
    gained = scale * (decay_end[:, 1:] + edge[:, 1:] - decay_start[:, 1:] - keep * edge[:, :-1])
    gpu_s = lin_end[:, 1:] + step * edge[:, 1:] - lin_start[:, 1:]

    # Usage at t_0, from everything held before the window, decayed to t_0 directly.
    t0 = grid[0]
    before = start < t0
    initial = np.bincount(team[before], minlength=n_teams, weights=scale * gpus[before] * (
        2.0 ** (-(t0 - np.minimum(end[before], t0)) / h) - 2.0 ** (-(t0 - start[before]) / h)))
    usage = np.empty((n_teams, m))
    previous = initial
    for k in range(m):
        previous = previous * keep + gained[:, k]
        usage[:, k] = previous
    in_use = gpu_s / step
    return UsageSeries(
        times=grid[1:].tolist(), step_s=step,
        teams={name: TeamSeries(usage_now=float(usage[i, -1]), usage=usage[i].tolist(), gpus_in_use=in_use[i].tolist())
               for name, i in index.items()})


def usage_over_quota(usage: float, quota_gpus: float) -> float | None:
    """The fair-share key, usage / quota (decayed seconds at full quota); None for a team without quota, which the
    frame puts after every team with one whatever its usage."""
    return usage / quota_gpus if quota_gpus > 0 else None
