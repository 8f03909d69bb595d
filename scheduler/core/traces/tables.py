"""Reading trace CSV files: lines, a header and records with their line numbers, and the format from the header.

The column names of the three formats live here, beside `detect_format`, which tells the formats apart by them; the
parsers in `scheduler.core.traces.formats` require the same columns. `_Rows` is what a parser fills.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.core.constraints import Constraints
from scheduler.core.dependencies import Dependency
from scheduler.core.model import DEFAULT_TEAM
from scheduler.core.traces.trace import TraceError

CORRAL_REQUIRED = ("job_id", "submit_s", "num_gpus", "duration_s", "kind", "model")
CORRAL_OPTIONAL = ("user", "priority", "slo_ms", "compression", "team", "preemptible", "depends_on", "array",
                   "array_max_running", "min_gpus", "max_gpus", "constraint", "nodelist", "exclude")
PHILLY_COLUMNS = ("#job id", "arrival time (sec)", "topology", "shape", "size", "duration (sec)")
PHILLY_USED = ("#job id", "arrival time (sec)", "size", "duration (sec)")
ALIBABA_COLUMNS = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
    "creation_time", "deletion_time", "scheduled_time",
)
ALIBABA_USED = ("name", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time")
# What a pod asked for at creation, kept as text beside its job (`Trace.features`) for readers that learn from a trace's
# own columns (`scheduler.core.durations`); read where present, never required. `pod_phase` is not among them: it is
# the pod's fate, known only after it ran.
ALIBABA_FEATURES = ("qos", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec")


@dataclass
class _Rows:
    """Column lists a format parser fills, in file order; `_finish` turns them into a Trace."""

    lines: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    submit: list[float] = field(default_factory=list)
    num_gpus: list[float] = field(default_factory=list)
    duration: list[float] = field(default_factory=list)
    inference: list[bool] = field(default_factory=list)
    model: list[str] = field(default_factory=list)  # "" = draw one
    user: list[str] = field(default_factory=list)
    priority: list[int] = field(default_factory=list)
    slo_ms: list[float | None] = field(default_factory=list)
    compression: list[float] = field(default_factory=list)
    team: list[str] = field(default_factory=list)
    preemptible: list[bool] = field(default_factory=list)
    depends_on: list[tuple[Dependency, ...]] = field(default_factory=list)
    array: list[tuple[str | None, int | None]] = field(default_factory=list)
    elastic: list[tuple[int | None, int | None]] = field(default_factory=list)  # (min_gpus, max_gpus)
    features: list[dict[str, str]] = field(default_factory=list)  # a format's own columns, as text ({}: none)
    constraints: list[Constraints | None] = field(default_factory=list)  # empty: none in the file
    skipped: dict[str, int] = field(default_factory=dict)

    def add(self, line: int, name: str, submit: float, num_gpus: float, duration: float, *, inference: bool = False,
            model: str = "", user: str = "", priority: int = 0, slo_ms: float | None = None,
            compression: float = 1.0, team: str = DEFAULT_TEAM, preemptible: bool = True,
            depends_on: tuple[Dependency, ...] = (), array: tuple[str | None, int | None] = (None, None),
            elastic: tuple[int | None, int | None] = (None, None), features: dict[str, str] | None = None,
            constraints: Constraints | None = None) -> None:
        self.lines.append(line)
        self.names.append(name)
        self.submit.append(submit)
        self.num_gpus.append(num_gpus)
        self.duration.append(duration)
        self.inference.append(inference)
        self.model.append(model)
        self.user.append(user)
        self.priority.append(priority)
        self.slo_ms.append(slo_ms)
        self.compression.append(compression)
        self.team.append(team)
        self.preemptible.append(preemptible)
        self.depends_on.append(depends_on)
        self.array.append(array)
        self.elastic.append(elastic)
        self.features.append(features or {})
        self.constraints.append(constraints)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


class _Table:
    """A CSV file's header and records with their physical line numbers, and error helpers that cite them."""

    def __init__(self, label: str, header: list[str], records: list[tuple[int, list[str]]]) -> None:
        self.label = label
        self.header = header
        self.records = records
        self.index = {c: i for i, c in enumerate(header)}

    def error(self, line: int, column: str | None, msg: str) -> TraceError:
        where = f" column {column!r}:" if column is not None else ""
        return TraceError(f"{self.label} line {line}:{where} {msg}")

    def require(self, required: Sequence[str], expected: Sequence[str], note: str = "") -> None:
        missing = [c for c in required if c not in self.index]
        if missing:
            raise TraceError(
                f"{self.label}: missing column(s) {', '.join(map(repr, missing))}; "
                f"expected columns: {','.join(expected)}{note}"
            )

    def number(self, line: int, column: str, raw: str) -> float:
        text = raw.strip()
        if not text:
            raise self.error(line, column, "empty; a number is required")
        try:
            value = float(text)
        except ValueError:
            raise self.error(line, column, f"{raw!r} is not a number") from None
        if not math.isfinite(value):
            raise self.error(line, column, f"{raw!r} is not a finite number")
        return value

    def integer(self, line: int, column: str, raw: str) -> int:
        value = self.number(line, column, raw)
        if not value.is_integer():
            raise self.error(line, column, f"{raw!r} is not an integer")
        return int(value)


def _read_lines(path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"trace file {path} does not exist" if not p.exists() else f"{path} is not a file")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror}") from None
    return text.splitlines()


def _table(label: str, lines: list[str], comments: bool) -> _Table:
    """Parse CSV lines; blank lines (and `#` comments when `comments`) are dropped but line numbers stay the file's."""
    kept: list[str] = []
    numbers: list[int] = []
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s or (comments and s.startswith("#")):
            continue
        kept.append(line)
        numbers.append(i)
    if not kept:
        raise TraceError(f"{label}: no header line (the file is empty)")
    reader = csv.reader(kept)
    rows: list[tuple[int, list[str]]] = []
    try:
        for row in reader:
            rows.append((numbers[reader.line_num - 1], row))
    except csv.Error as exc:
        raise TraceError(f"{label} line {numbers[min(reader.line_num, len(numbers)) - 1]}: {exc}") from None
    header = [c.strip() for c in rows[0][1]]
    records = rows[1:]
    width = len(header)
    for number, row in records:
        if len(row) != width:
            raise TraceError(f"{label} line {number}: {len(row)} fields, the header has {width}")
    return _Table(label, header, records)


def _first_header(lines: list[str]) -> tuple[str, list[str]]:
    """The first non-blank line, and the first non-comment line's columns (Philly's header itself starts with #)."""
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    cols: list[str] = []
    for ln in lines:
        s = ln.strip()
        if s and not s.startswith("#"):
            cols = [c.strip() for c in next(csv.reader([s]))]
            break
    return first, cols


def detect_format(path: str, lines: list[str] | None = None) -> str:
    """Tell the format from the header line; TraceError when it matches none."""
    lines = _read_lines(path) if lines is None else lines
    first, cols = _first_header(lines)
    first_cols = [c.strip().lower() for c in first.split(",")]
    if first_cols and first_cols[0] == "#job id" or "arrival time (sec)" in first_cols:
        return "philly"
    colset = set(cols)
    if {"gpu_milli", "num_gpu"} & colset and {"creation_time", "scheduled_time", "name"} & colset:
        return "alibaba"
    if colset & {"job_id", "submit_s", "duration_s"}:
        return "corral"
    shown = first if first else "(empty file)"
    raise TraceError(
        f"{path}: cannot tell the trace format from the header {shown!r}; expected a Corral header "
        f"({','.join(CORRAL_REQUIRED)}), Philly's ({','.join(PHILLY_COLUMNS)}) or Alibaba's "
        f"({','.join(ALIBABA_COLUMNS)}), or pass the format explicitly"
    )
