"""Numbers as the `corral` command prints them: durations, table cells, the metric columns of a simulation."""

from __future__ import annotations

import math
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
    ("wall_s", "wall", "{:.2f}s"),
]


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.2f}h"
    return f"{seconds / 86400:.2f}d"


def table_cell(value: Any, fmt: str) -> str:
    if fmt == "dur":
        return format_duration(float(value))
    if fmt == "{:d}":
        return fmt.format(int(value))
    return fmt.format(value)
