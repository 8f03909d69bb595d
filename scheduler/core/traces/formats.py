"""The three trace formats' parsers, and `load_trace`, which reads a file (or a synthetic spec) into a `Trace`.

Formats (`load_trace(path, format="auto")` tells them apart from the header line):

* **Corral CSV** (our own). A header line is required; lines starting with `#` are comments. Columns
  `job_id,submit_s,num_gpus,duration_s,kind,model`, optionally followed by
  `user,priority,slo_ms,compression,team,preemptible,depends_on,array,array_max_running,min_gpus,max_gpus,constraint,
  nodelist,exclude` (in any
  order; an unknown column is an error, so a typo never silently drops a field). `num_gpus` is an integer >= 1 or a
  fraction in (0, 1) (a share of one GPU, served through MPS); `duration_s` is the isolated run time (> 0); `kind` is
  `training` or `inference`; `model` names a profile of `scheduler/core/workloads.py` of that kind, or is empty to have one
  drawn (rule in `scheduler.core.traces.models`); `slo_ms` empty means the model's default SLO for inference jobs;
  `compression` in (0, 1] is the fraction of gradient bytes sent (default 1); `team` names the job's team
  (`corral simulate --teams`; empty or absent: `default`); `priority` is an integer (higher first, default 0) and
  `preemptible` is `true` or `false` (default true), the rules of `scheduler.core.priorities`; `depends_on` names other
  jobs of the file by `job_id` in Slurm's form (`afterok:a:b,afterany:c`), and `array` names an array the job is a
  task of, with at most `array_max_running` of its tasks running at once (`scheduler.core.dependencies`); `min_gpus`
  and `max_gpus` (both or neither) make a whole-GPU job elastic between them, `num_gpus` the size its `duration_s`
  is measured at (`scheduler.core.elastic`); `constraint` (Slurm's `--constraint`: `gpu=h100&zone=a`, labels joined by
  `&`, or a GPU type such as `h100`), `nodelist` and `exclude` (node names, comma- or space-separated) say where it
  may run (`scheduler.core.constraints`). Example::

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
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scheduler.core.constraints import ConstraintError, from_text
from scheduler.core.dependencies import Dependency, parse_dependency
from scheduler.core.model import DEFAULT_TEAM, JobKind, JobSpec
from scheduler.core.traces.generator import parse_synthetic_spec, synthetic
from scheduler.core.traces.models import draw_models, inference_fits
from scheduler.core.traces.tables import (
    ALIBABA_COLUMNS,
    ALIBABA_FEATURES,
    ALIBABA_USED,
    CORRAL_OPTIONAL,
    CORRAL_REQUIRED,
    PHILLY_COLUMNS,
    PHILLY_USED,
    _read_lines,
    _Rows,
    _Table,
    _table,
    detect_format,
)
from scheduler.core.traces.trace import SMALLEST_GPU_GB, Trace, TraceError
from scheduler.core.workloads import catalog

FORMATS = ("auto", "corral", "philly", "alibaba")
_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


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
        team = opt(row, "team") or DEFAULT_TEAM
        if len(team) > 64:
            raise t.error(line, "team", f"{team[:20]!r}... is longer than 64 characters")
        preemptible = True
        if opt(row, "preemptible"):
            flag = opt(row, "preemptible").lower()
            if flag not in _FLAGS:
                raise t.error(line, "preemptible", f"{opt(row, 'preemptible')!r} is not true or false")
            preemptible = _FLAGS[flag]
        depends: tuple[Dependency, ...] = ()
        if opt(row, "depends_on"):
            try:
                depends = tuple(parse_dependency(opt(row, "depends_on")))
            except ValueError as exc:
                raise t.error(line, "depends_on", str(exc)) from None
        array_max = t.integer(line, "array_max_running", opt(row, "array_max_running")) if opt(
            row, "array_max_running") else None
        if array_max is not None and array_max < 1:
            raise t.error(line, "array_max_running", f"{array_max} is not at least 1")
        if array_max is not None and not opt(row, "array"):
            raise t.error(line, "array_max_running", "give the job's array too")
        sizes = tuple(t.integer(line, col, opt(row, col)) if opt(row, col) else None
                      for col in ("min_gpus", "max_gpus"))
        if (sizes[0] is None) != (sizes[1] is None):
            raise t.error(line, "min_gpus" if sizes[0] is None else "max_gpus",
                          "empty; an elastic job gives min_gpus and max_gpus both (a job of one size, neither)")
        try:
            constraints = from_text(opt(row, "constraint"), opt(row, "nodelist"), opt(row, "exclude"))
        except ConstraintError as exc:
            column = {"gpu_type": "constraint", "labels": "constraint", "nodes": "nodelist"}.get(exc.field, exc.field)
            raise t.error(line, column, exc.why) from None
        rows.add(line, name, submit, num_gpus, duration, inference=kind is JobKind.INFERENCE, model=model,
                 user=opt(row, "user"), priority=priority, slo_ms=slo, compression=compression, team=team,
                 preemptible=preemptible, depends_on=depends, array=(opt(row, "array") or None, array_max),
                 elastic=(sizes[0], sizes[1]), constraints=constraints)
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
    i_features = [(c, t.index[c]) for c in ALIBABA_FEATURES if c in t.index]
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
                 inference=inference, features={c: row[i].strip() for c, i in i_features})
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
        for k in np.flatnonzero(nofit).tolist():
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
                priority=rows.priority[i], slo_ms=slo, compression=rows.compression[i], team=rows.team[i],
                preemptible=rows.preemptible[i] if rows.preemptible else True,
                depends_on=rows.depends_on[i] if rows.depends_on else (),
                array=rows.array[i][0] if rows.array else None,
                array_max_running=rows.array[i][1] if rows.array else None,
                min_gpus=rows.elastic[i][0] if rows.elastic else None,
                max_gpus=rows.elastic[i][1] if rows.elastic else None,
                constraints=rows.constraints[i] if rows.constraints else None,
            ))
        except ValueError as exc:
            raise TraceError(f"{label} line {rows.lines[i]}: {exc}") from None
    features = tuple(rows.features[i] for i in order.tolist()) if any(rows.features) else ()
    return Trace(name=name, format=fmt, jobs=jobs, skipped=dict(rows.skipped), source=source, features=features)


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
