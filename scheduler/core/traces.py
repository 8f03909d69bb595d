"""Job traces: loaders for the Corral CSV, Philly and Alibaba formats, and a synthetic workload generator.

Every loader returns a `Trace`: `JobSpec`s sorted by arrival (ties keep file order) with submit times shifted so the
first kept job arrives at 0.0, plus a count of the rows it skipped and why. Bad data raises `TraceError` naming the
file, the 1-based line and the column; it never escapes as a traceback, because traces come from users and from third
parties whose files we do not control.

Formats (`load_trace(path, format="auto")` tells them apart from the header line):

* **Corral CSV** (our own). A header line is required; lines starting with `#` are comments. Columns
  `job_id,submit_s,num_gpus,duration_s,kind,model`, optionally followed by `user,priority,slo_ms,compression` (in any
  order; an unknown column is an error, so a typo never silently drops a field). `num_gpus` is an integer >= 1 or a
  fraction in (0, 1) (a share of one GPU, served through MPS); `duration_s` is the isolated run time (> 0); `kind` is
  `training` or `inference`; `model` names a profile of `scheduler/core/workloads.py` of that kind, or is empty to have one
  drawn (rule below); `slo_ms` empty means the model's default SLO for inference jobs; `compression` in (0, 1] is the
  fraction of gradient bytes sent (default 1). Example::

      job_id,submit_s,num_gpus,duration_s,kind,model
      a,0,8,3600,training,FSDP
      b,30,0.5,600,inference,

* **Philly** job-level CSV (`#job id,arrival time (sec),topology,shape,size,duration (sec)`). `shape` records how the
  old cluster split the job over servers: it is that scheduler's decision, not a constraint, so it is ignored, as is
  `topology`. Jobs of size 0 or duration 0 are skipped ("zero GPUs", "zero duration"). All jobs are training jobs.
* **Alibaba** GPU-sharing v2023 pod list (`name,cpu_milli,...,creation_time,deletion_time,scheduled_time`). Skipped:
  CPU-only pods ("cpu-only"), pods never scheduled ("never ran"), pods whose run time is zero ("zero run time");
  rarer reasons are counted the same way. Submit = `creation_time`; duration = `deletion_time - scheduled_time`
  (the original queueing delay is dropped: our scheduler makes its own). `gpu_milli` < 1000 on a one-GPU pod becomes
  a fractional job of share `gpu_milli / 1000`. Latency-sensitive pods (`qos` LS) that hold a GPU share become
  inference jobs when an inference model fits in that share (they are services packed onto shared GPUs, exactly the
  case MPS serves); every other pod, including whole-GPU LS pods whose workload we cannot tell, is a training job.
  Pods still running at the trace's end have their run time cut there, as published.

Model assignment (traces that name no model): one uniform number per job, drawn from `numpy.random.default_rng(seed)`
in arrival order over all kept jobs before `limit` applies, so a seed gives the same models, and a shorter `limit`
gives the same models to the jobs it keeps. The number picks a model from the job's pool by weight:

* inference jobs: inference models (each weight 1); the job takes the model's `slo_ms`;
* fractional jobs (share s): only models with `mem_gb <= s * 16`, i.e. that fit in that share of the smallest GPU we
  ship (16 GB); if none fits (a share below ~0.1), the model of the job's kind with the smallest footprint (the
  share's memory is then too small; contention's memory check decides). Corral CSV rows get an error instead;
* one-GPU training jobs: every training model, weight 1 (no communication, so only compute and memory matter);
* multi-GPU training jobs: every training model, communication-heavy ones (`grad_mb >= 500`: FSDP, MoE,
  Transformer-XL in the current catalog) at weight 2, others at weight 1 (about 3/8 heavy), so that jobs sharing
  links contend as DeepShare measured, without every large job being the worst case.

Synthetic workloads (`synthetic()`, or the path `synthetic:N[,iat=S][,frac=F][,inference=F]`): Poisson arrivals,
lognormal durations near Philly's (median 15 min, sigma 2, clipped to [10 s, 7 days], longer for larger jobs), sizes
1/2/4/8/16/32 GPUs (mostly 1), GPU shares 0.25/0.5/0.75, models by the rule above.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import numpy as np

from scheduler.core.model import JobKind, JobSpec, SpecError
from scheduler.core.workloads import catalog, inference_models, training_models

FORMATS = ("auto", "corral", "philly", "alibaba")

SMALLEST_GPU_GB = 16.0  # memory of the smallest GPU in the shipped presets (T4, V100-16GB): fractional jobs fit in it
HEAVY_GRAD_MB = 500.0  # gradient MB per iteration from which a model counts as communication-heavy
HEAVY_WEIGHT = 2.0  # draw weight of a communication-heavy model for multi-GPU jobs (others: 1)

CORRAL_REQUIRED = ("job_id", "submit_s", "num_gpus", "duration_s", "kind", "model")
CORRAL_OPTIONAL = ("user", "priority", "slo_ms", "compression")
PHILLY_COLUMNS = ("#job id", "arrival time (sec)", "topology", "shape", "size", "duration (sec)")
PHILLY_USED = ("#job id", "arrival time (sec)", "size", "duration (sec)")
ALIBABA_COLUMNS = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
    "creation_time", "deletion_time", "scheduled_time",
)
ALIBABA_USED = ("name", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time")

# Synthetic defaults. Sizes: Philly's day-60 slice is 90% one-GPU jobs and tops out at 16; we keep more multi-GPU jobs
# (and some 32-GPU ones) so that placement and network contention matter in short runs.
SYNTH_SIZES: dict[int, float] = {1: 0.82, 2: 0.05, 4: 0.06, 8: 0.05, 16: 0.015, 32: 0.005}
SYNTH_SHARES: dict[float, float] = {0.25: 0.35, 0.5: 0.45, 0.75: 0.2}
SYNTH_KEYS = {"iat": "mean_interarrival_s", "frac": "frac_share", "inference": "inference_share"}


class TraceError(SpecError):
    """A trace that cannot be used; the message names the file, line and column."""


@dataclass(frozen=True)
class Trace:
    """Jobs to replay, sorted by submit time, the first at 0.0, and what the loader left out (reason -> count)."""

    name: str
    format: str
    jobs: list[JobSpec]
    skipped: dict[str, int] = field(default_factory=dict)
    source: str = ""

    def __len__(self) -> int:
        return len(self.jobs)

    def describe(self) -> dict[str, object]:
        """A JSON-able summary, for `corral trace describe` and for checking a loader against a trace's README."""
        jobs = self.jobs
        n = len(jobs)
        gpus = np.fromiter((j.num_gpus for j in jobs), dtype=np.float64, count=n)
        dur = np.fromiter((j.duration_s for j in jobs), dtype=np.float64, count=n)
        whole = gpus >= 1
        sizes, counts = np.unique(gpus[whole].astype(np.int64), return_counts=True)
        profiles = catalog()
        over = sum(
            1 for j in jobs if j.num_gpus < 1 and j.model in profiles
            and profiles[j.model].mem_gb > j.num_gpus * SMALLEST_GPU_GB + 1e-9
        )
        models: dict[str, int] = {}
        for j in jobs:
            models[j.model] = models.get(j.model, 0) + 1
        return {
            "name": self.name,
            "format": self.format,
            "source": self.source,
            "jobs": n,
            "skipped": dict(self.skipped),
            "span_s": float(jobs[-1].submit_s - jobs[0].submit_s) if n else 0.0,
            "gpu_sizes": {str(int(s)): int(c) for s, c in zip(sizes, counts)},
            "fractional": int((~whole).sum()),
            "inference": sum(1 for j in jobs if j.kind is JobKind.INFERENCE),
            "gpu_hours": float((gpus * dur).sum() / 3600.0),
            "median_duration_s": float(np.median(dur)) if n else 0.0,
            "models": dict(sorted(models.items())),
            "fractional_over_share_memory": over,
        }


# --------------------------------------------------------------------------------------------------------------------
# Model assignment
# --------------------------------------------------------------------------------------------------------------------


@cache
def _pool(inference: bool, multi: bool, share: float) -> tuple[tuple[str, ...], np.ndarray]:
    """Models a job may draw and their cumulative weights; empty when no model of its kind fits its share."""
    profiles = catalog()
    names = inference_models() if inference else training_models()
    if share < 1.0:
        names = [m for m in names if profiles[m].mem_gb <= share * SMALLEST_GPU_GB + 1e-9]
    weights = [
        HEAVY_WEIGHT if (multi and not inference and profiles[m].grad_mb >= HEAVY_GRAD_MB) else 1.0 for m in names
    ]
    return tuple(names), np.cumsum(np.array(weights, dtype=np.float64))


def _smallest(inference: bool) -> str:
    names = inference_models() if inference else training_models()
    return min(names, key=lambda m: catalog()[m].mem_gb)


def inference_fits(share: float) -> bool:
    """Whether some inference model fits in `share` of the smallest GPU (decides if an LS pod can be a service)."""
    return bool(_pool(True, False, min(share, 1.0))[0])


def draw_models(num_gpus: np.ndarray, inference: np.ndarray, u: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Pick a model per job from its pool (see the module docstring) with the uniform numbers `u`.

    Vectorised over groups of jobs with the same pool, so a 100,000-job trace costs a few searchsorted calls.
    Returns the names and a mask of jobs whose share no model of their kind fits (given the smallest-footprint model).
    """
    n = len(num_gpus)
    share = np.where(num_gpus < 1, num_gpus, 1.0)
    multi = num_gpus >= 2
    keys = np.stack([inference.astype(np.float64), multi.astype(np.float64), share])
    uniq, inverse = np.unique(keys, axis=1, return_inverse=True)
    inverse = inverse.reshape(-1)
    out = np.empty(n, dtype=object)
    nofit = np.zeros(n, dtype=bool)
    for k in range(uniq.shape[1]):
        inf_k, multi_k, share_k = bool(uniq[0, k]), bool(uniq[1, k]), float(uniq[2, k])
        idx = np.flatnonzero(inverse == k)
        names, cum = _pool(inf_k, multi_k, share_k)
        if not names:
            out[idx] = _smallest(inf_k)
            nofit[idx] = True
            continue
        pick = np.searchsorted(cum, u[idx] * cum[-1], side="right")
        out[idx] = np.array(names, dtype=object)[np.minimum(pick, len(names) - 1)]
    return out.tolist(), nofit


# --------------------------------------------------------------------------------------------------------------------
# Reading CSV files
# --------------------------------------------------------------------------------------------------------------------


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
    skipped: dict[str, int] = field(default_factory=dict)

    def add(self, line: int, name: str, submit: float, num_gpus: float, duration: float, *, inference: bool = False,
            model: str = "", user: str = "", priority: int = 0, slo_ms: float | None = None,
            compression: float = 1.0) -> None:
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
    for line, row in records:
        if len(row) != width:
            raise TraceError(f"{label} line {line}: {len(row)} fields, the header has {width}")
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


# --------------------------------------------------------------------------------------------------------------------
# Format parsers
# --------------------------------------------------------------------------------------------------------------------


def _parse_corral(t: _Table) -> _Rows:
    """Our own format: strict, because the user wrote it and would rather hear about a mistake than lose a job."""
    known = set(CORRAL_REQUIRED) | set(CORRAL_OPTIONAL)
    t.require(CORRAL_REQUIRED, CORRAL_REQUIRED, f" (optional: {','.join(CORRAL_OPTIONAL)})")
    unknown = [c for c in t.header if c not in known]
    if unknown:
        raise TraceError(
            f"{t.label}: unknown column(s) {', '.join(map(repr, unknown))}; expected columns: "
            f"{','.join(CORRAL_REQUIRED)} (optional: {','.join(CORRAL_OPTIONAL)})"
        )
    ix = t.index
    profiles = catalog()
    kinds = {k.value: k for k in JobKind}
    seen: dict[str, int] = {}
    rows = _Rows()

    def opt(row: list[str], col: str) -> str:
        return row[ix[col]].strip() if col in ix else ""

    for line, row in t.records:
        name = row[ix["job_id"]].strip()
        if not name:
            raise t.error(line, "job_id", "empty; every job needs an id")
        if name in seen:
            raise t.error(line, "job_id", f"{name!r} already used on line {seen[name]}")
        seen[name] = line
        submit = t.number(line, "submit_s", row[ix["submit_s"]])
        num_gpus = t.number(line, "num_gpus", row[ix["num_gpus"]])
        if not (num_gpus > 0 and (num_gpus < 1 or num_gpus.is_integer())):
            raise t.error(line, "num_gpus", f"{num_gpus:g} is not an integer >= 1 or a fraction in (0, 1)")
        duration = t.number(line, "duration_s", row[ix["duration_s"]])
        if duration <= 0:
            raise t.error(line, "duration_s", f"{duration:g} is not positive")
        kind_raw = row[ix["kind"]].strip().lower()
        if kind_raw not in kinds:
            raise t.error(line, "kind", f"{row[ix['kind']]!r} is not one of {', '.join(kinds)}")
        kind = kinds[kind_raw]
        model = row[ix["model"]].strip()
        if model:
            if model not in profiles:
                raise t.error(line, "model", f"unknown model {model!r}; known models: {', '.join(profiles)}")
            if profiles[model].kind is not kind:
                raise t.error(line, "model", f"{model!r} is a {profiles[model].kind.value} model, the job is {kind}")
        priority = t.integer(line, "priority", opt(row, "priority")) if opt(row, "priority") else 0
        slo: float | None = None
        if opt(row, "slo_ms"):
            slo = t.number(line, "slo_ms", opt(row, "slo_ms"))
            if slo <= 0:
                raise t.error(line, "slo_ms", f"{slo:g} is not positive")
        compression = 1.0
        if opt(row, "compression"):
            compression = t.number(line, "compression", opt(row, "compression"))
            if not 0 < compression <= 1:
                raise t.error(line, "compression", f"{compression:g} is not in (0, 1]")
        rows.add(line, name, submit, num_gpus, duration, inference=kind is JobKind.INFERENCE, model=model,
                 user=opt(row, "user"), priority=priority, slo_ms=slo, compression=compression)
    return rows


def _parse_philly(t: _Table) -> _Rows:
    """Philly's job-level CSV: arrival, size and duration; the old cluster's `shape` is its placement, not ours."""
    t.require(PHILLY_USED, PHILLY_COLUMNS)
    i_id, i_arr, i_size, i_dur = (t.index[c] for c in PHILLY_USED)
    rows = _Rows()
    for line, row in t.records:
        submit = t.number(line, "arrival time (sec)", row[i_arr])
        size = t.integer(line, "size", row[i_size])
        duration = t.number(line, "duration (sec)", row[i_dur])
        if size < 0:
            raise t.error(line, "size", f"{size} is negative")
        if duration < 0:
            raise t.error(line, "duration (sec)", f"{duration:g} is negative")
        if size == 0:
            rows.skip("zero GPUs")
        elif duration == 0:
            rows.skip("zero duration")
        else:
            rows.add(line, row[i_id].strip(), submit, float(size), duration)
    return rows


def _parse_alibaba(t: _Table) -> _Rows:
    """Alibaba's pod list: GPU pods that ran, whole or a share of one GPU; LS shares become inference services."""
    t.require(ALIBABA_USED, ALIBABA_COLUMNS)
    i_name, i_gpu, i_milli, i_qos, i_create, i_delete, i_sched = (t.index[c] for c in ALIBABA_USED)
    rows = _Rows()
    for line, row in t.records:
        num_gpu = t.integer(line, "num_gpu", row[i_gpu])
        if num_gpu < 0:
            raise t.error(line, "num_gpu", f"{num_gpu} is negative")
        if num_gpu == 0:
            rows.skip("cpu-only")
            continue
        if not row[i_sched].strip():
            rows.skip("never ran")
            continue
        if not row[i_delete].strip():
            rows.skip("no deletion time")
            continue
        milli = t.integer(line, "gpu_milli", row[i_milli])
        if not 0 <= milli <= 1000:
            raise t.error(line, "gpu_milli", f"{milli} is not in [0, 1000]")
        if milli == 0:
            rows.skip("zero gpu_milli")
            continue
        if milli < 1000 and num_gpu > 1:
            rows.skip("share of several GPUs")
            continue
        run = t.number(line, "deletion_time", row[i_delete]) - t.number(line, "scheduled_time", row[i_sched])
        if run <= 0:
            rows.skip("zero run time" if run == 0 else "negative run time")
            continue
        num_gpus = milli / 1000.0 if milli < 1000 else float(num_gpu)
        inference = row[i_qos].strip() == "LS" and num_gpus < 1 and inference_fits(num_gpus)
        rows.add(line, row[i_name].strip(), t.number(line, "creation_time", row[i_create]), num_gpus, run,
                 inference=inference)
    return rows


_PARSERS = {"corral": _parse_corral, "philly": _parse_philly, "alibaba": _parse_alibaba}


# --------------------------------------------------------------------------------------------------------------------
# From rows to a Trace
# --------------------------------------------------------------------------------------------------------------------


def _finish(rows: _Rows, *, name: str, fmt: str, source: str, label: str, limit: int | None, seed: int) -> Trace:
    """Sort by arrival, draw missing models (over all jobs, so `limit` does not change them), cut, shift to 0."""
    n = len(rows.names)
    if n == 0:
        why = f" (skipped: {', '.join(f'{k} {v}' for k, v in rows.skipped.items())})" if rows.skipped else ""
        raise TraceError(f"{label}: no jobs{why}")
    submit = np.array(rows.submit, dtype=np.float64)
    order = np.argsort(submit, kind="stable")
    u = np.random.default_rng(seed).random(n)  # one per job, in arrival order
    if limit is not None:
        order = order[:limit]
        u = u[: len(order)]
    num_gpus = np.array(rows.num_gpus, dtype=np.float64)[order]
    inference = np.array(rows.inference, dtype=bool)[order]
    given = [rows.model[i] for i in order]
    drawn, nofit = draw_models(num_gpus, inference, u)
    if fmt == "corral":
        for k in np.flatnonzero(nofit):
            if not given[k]:
                i = int(order[k])
                kind = "inference" if inference[k] else "training"
                raise TraceError(
                    f"{label} line {rows.lines[i]}: column 'model': empty, and no {kind} model fits in "
                    f"{num_gpus[k]:g} of a {SMALLEST_GPU_GB:g} GB GPU; name a model or use a larger share"
                )
    profiles = catalog()
    t0 = float(submit[order[0]])
    jobs: list[JobSpec] = []
    for k, i in enumerate(order.tolist()):
        model = given[k] or drawn[k]
        is_inf = bool(inference[k])
        slo = rows.slo_ms[i]
        if is_inf and slo is None and profiles[model].slo_ms > 0:
            slo = profiles[model].slo_ms
        try:
            jobs.append(JobSpec(
                name=rows.names[i], submit_s=rows.submit[i] - t0, num_gpus=rows.num_gpus[i],
                duration_s=rows.duration[i], model=model,
                kind=JobKind.INFERENCE if is_inf else JobKind.TRAINING, user=rows.user[i],
                priority=rows.priority[i], slo_ms=slo, compression=rows.compression[i],
            ))
        except ValueError as exc:
            raise TraceError(f"{label} line {rows.lines[i]}: {exc}") from None
    return Trace(name=name, format=fmt, jobs=jobs, skipped=dict(rows.skipped), source=source)


def load_trace(path: str, format: str = "auto", limit: int | None = None, seed: int = 0) -> Trace:
    """Load a trace file (Corral CSV, Philly or Alibaba; see the module docstring) or a `synthetic:N,...` spec.

    `limit` keeps the first N jobs by arrival after skipping; `seed` drives the model draws (and synthetic traces).
    """
    if format not in FORMATS:
        raise TraceError(f"unknown trace format {format!r}; choose one of {', '.join(FORMATS)}")
    if limit is not None and limit < 1:
        raise TraceError(f"limit must be at least 1, got {limit}")
    path = str(path)
    if path.startswith("synthetic:"):
        if format != "auto":
            raise TraceError(f"{path}: a synthetic trace has no file format; leave the format as 'auto'")
        n, kwargs = parse_synthetic_spec(path)
        return synthetic(min(n, limit) if limit is not None else n, seed, **kwargs)
    lines = _read_lines(path)
    fmt = detect_format(path, lines) if format == "auto" else format
    table = _table(path, lines, comments=fmt == "corral")
    rows = _PARSERS[fmt](table)
    return _finish(rows, name=Path(path).stem, fmt=fmt, source=path, label=path, limit=limit, seed=seed)


# --------------------------------------------------------------------------------------------------------------------
# Synthetic workloads
# --------------------------------------------------------------------------------------------------------------------


def parse_synthetic_spec(spec: str) -> tuple[int, dict[str, float]]:
    """`synthetic:N[,iat=S][,frac=F][,inference=F]` -> (N, keyword arguments of `synthetic`)."""
    accepted = ", ".join(f"{k}= ({v})" for k, v in SYNTH_KEYS.items())
    body = spec.removeprefix("synthetic:")
    head, *pairs = [p.strip() for p in body.split(",")]
    try:
        n = int(head)
    except ValueError:
        raise TraceError(f"{spec}: job count {head!r} is not an integer (synthetic:N[,key=value...])") from None
    if n < 1:
        raise TraceError(f"{spec}: job count must be at least 1")
    kwargs: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = (s.strip() for s in pair.partition("="))
        if key not in SYNTH_KEYS or not sep:
            raise TraceError(f"{spec}: {pair!r} is not key=value with a known key; accepted keys: {accepted}")
        try:
            v = float(value)
        except ValueError:
            raise TraceError(f"{spec}: {key}={value!r} is not a number; accepted keys: {accepted}") from None
        kwargs[SYNTH_KEYS[key]] = v
    _check_synthetic(spec, kwargs.get("mean_interarrival_s", 60.0), kwargs.get("frac_share", 0.15),
                     kwargs.get("inference_share", 0.05))
    return n, kwargs


def _check_synthetic(where: str, iat: float, frac: float, inference: float) -> None:
    if not (math.isfinite(iat) and iat > 0):
        raise TraceError(f"{where}: iat (mean interarrival seconds) must be positive, got {iat:g}")
    if not 0 <= frac <= 1:
        raise TraceError(f"{where}: frac (share of fractional-GPU jobs) must be in [0, 1], got {frac:g}")
    if not 0 <= inference <= 1:
        raise TraceError(f"{where}: inference (share of inference jobs) must be in [0, 1], got {inference:g}")


def _categorical(g: np.random.Generator, weights: dict, n: int) -> np.ndarray:
    values = np.array(list(weights), dtype=np.float64)
    cum = np.cumsum(np.array(list(weights.values()), dtype=np.float64))
    return values[np.minimum(np.searchsorted(cum, g.random(n) * cum[-1], side="right"), len(values) - 1)]


def synthetic(
    n_jobs: int,
    seed: int = 0,
    *,
    mean_interarrival_s: float = 60.0,
    frac_share: float = 0.15,
    inference_share: float = 0.05,
    median_duration_s: float = 900.0,
    duration_sigma: float = 2.0,
    min_duration_s: float = 10.0,
    max_duration_s: float = 7 * 86400.0,
    size_duration_exponent: float = 0.5,
    sizes: dict[int, float] | None = None,
    shares: dict[float, float] | None = None,
) -> Trace:
    """A Philly-like workload: Poisson arrivals, lognormal durations, mostly one-GPU jobs, some GPU shares.

    * Durations: lognormal with the given median (Philly's day-60 slice: median 34 min, log-sd 2.5; the whole trace is
      shorter-lived) times `workers ** size_duration_exponent` (larger jobs run longer: Philly's 8-GPU jobs have 20x
      the median of 1-GPU ones), clipped to [min, max].
    * Kinds and sizes: a job is inference with probability `inference_share`; inference jobs take a GPU share with
      probability min(0.5, frac/inference), else one GPU; training jobs take a share with the probability that makes
      the overall fractional share `frac_share` (as nearly as possible), else a size from `sizes`.
    * Models: the module's draw rule.

    All randomness derives from `default_rng(seed)`: one spawned stream per attribute, so `synthetic(m)` is a prefix
    of `synthetic(n)` for m < n (a `limit` does not change the jobs it keeps). 100,000 jobs take ~0.3 s.
    """
    _check_synthetic(f"synthetic({n_jobs})", mean_interarrival_s, frac_share, inference_share)
    if n_jobs < 1:
        raise TraceError(f"synthetic: n_jobs must be at least 1, got {n_jobs}")
    if not (median_duration_s > 0 and duration_sigma >= 0 and 0 < min_duration_s <= max_duration_s):
        raise TraceError("synthetic: need median_duration_s > 0, duration_sigma >= 0, 0 < min <= max duration")
    sizes = SYNTH_SIZES if sizes is None else sizes
    shares = SYNTH_SHARES if shares is None else shares
    if any(not (0 < s < 1) for s in shares) or any(int(s) != s or s < 1 for s in sizes):
        raise TraceError("synthetic: sizes must be integers >= 1 and shares fractions in (0, 1)")
    g_arrive, g_kind, g_frac, g_size, g_share, g_dur, g_model = np.random.default_rng(seed).spawn(7)
    n = n_jobs

    gaps = g_arrive.exponential(mean_interarrival_s, n)
    submit = np.cumsum(gaps)
    submit -= submit[0]

    f_inf = min(0.5, frac_share / inference_share) if inference_share > 0 else 0.0
    q_train = (frac_share - inference_share * f_inf) / (1 - inference_share) if inference_share < 1 else 0.0
    q_train = min(max(q_train, 0.0), 1.0)
    inference = g_kind.random(n) < inference_share
    frac = g_frac.random(n) < np.where(inference, f_inf, q_train)
    size = np.where(inference, 1.0, _categorical(g_size, sizes, n))
    share = _categorical(g_share, shares, n)
    num_gpus = np.where(frac, share, size)

    workers = np.maximum(num_gpus, 1.0)
    duration = np.exp(np.log(median_duration_s) + duration_sigma * g_dur.standard_normal(n))
    duration = np.clip(duration * workers**size_duration_exponent, min_duration_s, max_duration_s)
    duration = np.round(duration, 3)
    submit = np.round(submit, 3)

    models, _ = draw_models(num_gpus, inference, g_model.random(n))
    profiles = catalog()
    slo = {m: (p.slo_ms or None) for m, p in profiles.items()}
    jobs = [
        JobSpec(
            name=f"syn-{i:06d}", submit_s=s, num_gpus=g, duration_s=d, model=m,
            kind=JobKind.INFERENCE if inf else JobKind.TRAINING, slo_ms=slo[m] if inf else None,
        )
        for i, (s, g, d, m, inf) in enumerate(
            zip(submit.tolist(), num_gpus.tolist(), duration.tolist(), models, inference.tolist())
        )
    ]
    spec = (
        f"synthetic:{n_jobs},iat={mean_interarrival_s:g},frac={frac_share:g},inference={inference_share:g}"
        f" seed={seed}"
    )
    return Trace(name=f"synthetic-{n_jobs}", format="synthetic", jobs=jobs, skipped={}, source=spec)


# --------------------------------------------------------------------------------------------------------------------
# Windows and offered load (evaluation scenarios)
# --------------------------------------------------------------------------------------------------------------------

# Trace windows starting at or after this fraction of a trace are held out: `corral train` never draws them, and the
# evaluations that report how a trained policy generalises draw only them.
HOLDOUT_FROM = 0.75


def window(jobs: Sequence[JobSpec], start: int, size: int) -> list[JobSpec]:
    """`size` consecutive jobs from index `start`, submit times shifted so the first arrives at 0.0."""
    if not 0 <= start < len(jobs):
        raise TraceError(f"window start {start} is outside the trace's {len(jobs)} jobs")
    chosen = list(jobs[start:start + size])
    t0 = chosen[0].submit_s
    return [replace(j, submit_s=j.submit_s - t0) for j in chosen]


def window_starts(n_jobs: int, size: int, part: str) -> tuple[int, int]:
    """Range [lo, hi) of window starts in `part` ("train": before the hold-out, "test": in it, "all")."""
    size = min(size, n_jobs)
    split = int(n_jobs * HOLDOUT_FROM)
    if part == "train":
        return 0, max(1, split - size + 1)
    if part == "test":
        return split, max(split + 1, n_jobs - size + 1)
    if part == "all":
        return 0, n_jobs - size + 1
    raise TraceError(f"unknown trace part {part!r}; choose train, test or all")


def offered_load(jobs: Sequence[JobSpec], num_gpus: float) -> float:
    """Mean GPUs busy per GPU over the window's arrival span, if every job started on arrival and ran its isolated
    duration: the utilisation the window asks of the cluster while it arrives.

    Only the part of each run inside the span counts. A long job that arrives late asks for little of this window
    (most of its work lands after it); counting all of its work would size clusters so large that nothing queues.
    """
    if len(jobs) < 2:
        return 0.0
    t0, t1 = jobs[0].submit_s, jobs[-1].submit_s
    span = max(t1 - t0, 1.0)
    busy = sum((min(j.submit_s + j.duration_s, t1) - j.submit_s) * j.gpu_demand for j in jobs)
    return busy / (span * num_gpus)


def nodes_for_load(jobs: Sequence[JobSpec], gpus_per_node: int, load: float, min_nodes: int = 1) -> int:
    """The node count whose offered load is closest to `load`, at least large enough for the biggest job."""
    if not 0 < load:
        raise TraceError(f"load must be positive, got {load}")
    busy = offered_load(jobs, 1.0)
    biggest = max((j.workers for j in jobs), default=1)
    need = max(min_nodes, -(-biggest // gpus_per_node))
    ideal = busy / (load * gpus_per_node)
    lo = max(need, int(ideal))
    return min((lo, lo + 1), key=lambda n: abs(busy / (n * gpus_per_node) - load))


def scale_to_load(jobs: Sequence[JobSpec], num_gpus: int, load: float) -> list[JobSpec]:
    """Stretch or compress arrival times (not durations) until the offered load on `num_gpus` GPUs is `load`."""
    submit = np.array([j.submit_s for j in jobs])
    dur = np.array([j.duration_s for j in jobs])
    demand = np.array([j.gpu_demand for j in jobs])

    def load_at(factor: float) -> float:
        s = submit * factor
        span = max(s[-1] - s[0], 1.0)
        return float((np.minimum(s + dur, s[-1]) - s).clip(min=0) @ demand) / (span * num_gpus)

    lo, hi = 1e-4, 1e4  # load falls as arrivals are stretched: bisect the factor in log space
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if load_at(mid) > load else (lo, mid)
    factor = (lo * hi) ** 0.5
    return [replace(j, submit_s=j.submit_s * factor) for j in jobs]


@dataclass(frozen=True)
class LoadFit:
    """How a window was brought to a target offered load: the node count, the (possibly rescaled) jobs, and what
    was done, in words, for reports."""

    nodes: int
    jobs: list[JobSpec]
    load: float  # the offered load reached
    how: str


LOAD_TOLERANCE = 0.05  # resizing alone is accepted when it lands within 5% of the target


def fit_load(jobs: Sequence[JobSpec], gpus_per_node: int, load: float) -> LoadFit:
    """Bring `jobs` to offered load `load` on nodes of `gpus_per_node` GPUs: resize the cluster where that gets
    within `LOAD_TOLERANCE`, else rescale arrival times (durations unchanged) on the nearest node count.

    Resizing cannot always get there: a cluster cannot shrink below the node count its largest gang needs (Alibaba's
    8-GPU pods keep a pcie-t4 cluster at 2 nodes or more), and a few nodes are coarse steps (2 or 3 nodes is 1.5x).
    Then arrivals are compressed (or stretched) until the window asks for `load` of that cluster."""
    nodes = nodes_for_load(jobs, gpus_per_node, load)
    reached = offered_load(jobs, nodes * gpus_per_node)
    if reached > 0 and abs(reached / load - 1.0) <= LOAD_TOLERANCE:
        return LoadFit(nodes, list(jobs), reached, f"cluster resized to {nodes} nodes")
    scaled = scale_to_load(jobs, nodes * gpus_per_node, load)
    span, new_span = jobs[-1].submit_s - jobs[0].submit_s, scaled[-1].submit_s - scaled[0].submit_s
    factor = span / new_span if new_span > 0 else 1.0
    floor = -(-max(j.workers for j in jobs) // gpus_per_node)
    why = "its largest job's floor" if nodes == floor and reached < load else "the nearest size"
    verb = "compressed" if factor >= 1.0 else "stretched"
    return LoadFit(nodes, scaled, offered_load(scaled, nodes * gpus_per_node),
                   f"{nodes} nodes ({why}), arrivals {verb} {max(factor, 1 / factor):.2f}x")
