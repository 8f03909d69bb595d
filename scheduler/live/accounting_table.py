"""The accounting report as a table (`scheduler.live.accounting` computes it): its groupings, its columns and its CSV.
Nothing here reads the store, so `corral accounting` writes the CSV without importing a database layer."""

from __future__ import annotations

import csv
import io
from typing import Any

GROUPS = ("user", "team", "day")
END_STATES = ("succeeded", "failed", "cancelled", "timed_out")  # the terminal `JobState`s, as the rows count them
COLUMNS = ["key", "gpu_hours", "idle_gpu_hours", "jobs_ended", *(f"jobs_{s}" for s in END_STATES), "jobs_started",
           "wait_p50_s", "wait_p95_s", "jct_p50_s", "jct_p95_s", "preemptions"]


def as_csv(report: dict[str, Any]) -> str:
    """The report's rows and total as CSV, a header first (empty cells where a figure has no value)."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in [*report["rows"], report["total"]]:
        w.writerow({k: "" if row[k] is None else row[k] for k in COLUMNS})
    return out.getvalue()
