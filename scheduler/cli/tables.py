"""Numbers as the `corral` command prints them: durations, table cells, the metric columns of a simulation."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

METRIC_COLUMNS = [  # (key, header, format)
    ("jobs_completed", "done", "{:d}"),
    ("jobs_rejected", "rejected", "{:d}"),
    ("jobs_timed_out", "timed out", "{:d}"),
    ("avg_jct_s", "avg JCT", "dur"),
    ("p50_jct_s", "p50 JCT", "dur"),
    ("p95_jct_s", "p95 JCT", "dur"),
    ("p99_jct_s", "p99 JCT", "dur"),
    ("avg_queue_s", "avg queue", "dur"),
    ("avg_slowdown", "slowdown", "{:.2f}"),
    ("avg_contention_slowdown", "contention", "{:.3f}"),
    ("gpu_util", "GPU util", "{:.1%}"),
    ("makespan_s", "makespan", "dur"),
    ("preemptions", "preempt", "{:d}"),
    ("resizes", "resizes", "{:d}"),  # only where the trace has elastic jobs
    ("wall_s", "wall", "{:.2f}s"),
]


# Duration units, smallest first: (suffix, seconds in one, the largest value written in it, its format).
_UNITS = [("s", 1.0, 120.0, "{:.0f}"), ("m", 60.0, 7200.0, "{:.1f}"), ("h", 3600.0, 172800.0, "{:.2f}"),
          ("d", 86400.0, math.inf, "{:.2f}")]


def duration_unit(values: Iterable[float]) -> str:
    """The unit a row of durations is written in: the one its largest finite value would take alone, so that a row
    never mixes units (`2.03h | 107.8m` reads as the smaller one being larger)."""
    top = max((abs(float(v)) for v in values if math.isfinite(float(v))), default=0.0)
    return next(u for u, _, limit, _ in _UNITS if top < limit)


def format_duration(seconds: float, unit: str | None = None) -> str:
    """`seconds` in `unit` (s, m, h or d), or in the unit it would take alone."""
    if not math.isfinite(seconds):
        return "-"
    unit = unit or duration_unit([seconds])
    _, size, _, fmt = next(u for u in _UNITS if u[0] == unit)
    return fmt.format(seconds / size) + unit


def table_cell(value: Any, fmt: str, unit: str | None = None) -> str:
    """A table's cell: `fmt` "dur" for a duration (in `unit`, if given), "count" for a count that may be an average
    (whole numbers without a decimal), else a format string."""
    if fmt == "dur":
        return format_duration(float(value), unit)
    if fmt == "{:d}":
        return fmt.format(int(value))
    if fmt == "count":
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return fmt.format(value)
