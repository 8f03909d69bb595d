"""The table `corral jobs` prints: the columns, and which of them fit the terminal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.cells import cell_len
from rich.markup import escape
from rich.table import Table

import corral.models as m
from scheduler.cli.client_text import job_gpus_text, placement, progress_text, reason_text, start_text, state_text
from scheduler.live.job_states import JobState


@dataclass(frozen=True)
class JobColumn:
    cell: Callable[[m.JobSummary], str]  # plain text
    right: bool = False
    wraps: bool = False  # folds onto more lines rather than widen the table (the reason, free text)


JOB_COLUMNS: dict[str, JobColumn] = {  # in the order they are shown
    "id": JobColumn(lambda j: str(j.id), right=True),
    "name": JobColumn(lambda j: j.name or ""),
    "user": JobColumn(lambda j: j.user or ""),
    "team": JobColumn(lambda j: j.team or ""),
    "state": JobColumn(lambda j: j.state or ""),
    "gpus": JobColumn(job_gpus_text, right=True),  # an elastic job's bounds: 2-8
    "model": JobColumn(lambda j: j.model or ""),
    "progress": JobColumn(lambda j: progress_text(j.progress), right=True),
    "queue": JobColumn(lambda j: f"#{j.queue_position}" if j.queue_position else "", right=True),
    "starts": JobColumn(lambda j: start_text(j) if j.state == JobState.PENDING else ""),
    "preempted": JobColumn(lambda j: str(j.preemptions or ""), right=True),
    "placement": JobColumn(lambda j: placement(j.allocation)),
    "reason": JobColumn(reason_text, wraps=True),
}
# Always shown, whole: what a job is and where it stands. The name alone shrinks (with an ellipsis) to make room.
ESSENTIAL_COLUMNS = ("id", "name", "user", "state", "gpus", "progress")
# The others get room in this order while the terminal has it: why a job waits or failed first.
OPTIONAL_COLUMNS = ("reason", "queue", "starts", "model", "placement", "team", "preempted")
NAME_MIN, REASON_MIN = 16, 20  # the name keeps this much before the optional columns get room
COLUMN_PAD = 2  # rich's padding of one space either side
STATE_WIDTH = max(len(s.value) for s in JobState)  # "succeeded", "cancelled": never "fai…"


def jobs_table(jobs: list[m.JobSummary], width: int) -> tuple[Table, list[str]]:
    """The jobs as a table that fits `width` columns, and the columns left out for want of room (those with
    something to show). Rich squeezes every column of a table too wide for the terminal, ids and states included
    ("fai…", "runn…"), so the columns are chosen here instead: the essential ones whole, then the others while
    they fit."""
    rows = [{col: spec.cell(j) for col, spec in JOB_COLUMNS.items()} for j in jobs]
    natural = {col: max([len(col), *(cell_len(r[col]) for r in rows)]) for col in JOB_COLUMNS}
    natural["state"] = max(natural["state"], STATE_WIDTH)
    used = sum(natural[c] + COLUMN_PAD for c in ESSENTIAL_COLUMNS if c != "name")
    used += min(natural["name"], NAME_MIN) + COLUMN_PAD
    chosen = set(ESSENTIAL_COLUMNS)
    # Columns with nothing in them (no preemptions yet) get room last.
    for col in sorted(OPTIONAL_COLUMNS, key=lambda c: not any(r[c] for r in rows)):
        need = (min(natural[col], REASON_MIN) if JOB_COLUMNS[col].wraps else natural[col]) + COLUMN_PAD
        if used + need <= width:
            chosen.add(col)
            used += need
    name_width = max(NAME_MIN, min(natural["name"], width - used + min(natural["name"], NAME_MIN)))
    table = Table(box=None, header_style="bold")
    for col, spec in JOB_COLUMNS.items():
        if col in chosen:
            table.add_column(col, justify="right" if spec.right else "left", no_wrap=not spec.wraps,
                             overflow="ellipsis" if col == "name" else "fold",
                             min_width=natural[col] if col != "name" and not spec.wraps else None,
                             max_width=name_width if col == "name" else None)
    for job, r in zip(jobs, rows, strict=True):
        table.add_row(*(state_text(job.state) if col == "state" else escape(r[col])
                        for col in JOB_COLUMNS if col in chosen))
    hidden = [col for col in JOB_COLUMNS if col not in chosen and any(r[col] for r in rows)]
    return table, hidden
