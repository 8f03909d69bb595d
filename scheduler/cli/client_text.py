"""The words the client commands write a job in, as every view of it does: GPUs, times, placements, progress,
start estimates, reasons, states and an array's tasks."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeAlias

import corral.models as m
from scheduler.live.job_states import JobState
from scheduler.live.words import gpus_text as gpus_words


def gpus_text(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else f"{float(n):g}"


JobLike: TypeAlias = m.Job | m.JobDetail | m.JobSummary  # a job as the API answers it: whole, or a row


def job_gpus_text(job: JobLike) -> str:
    """A job's GPUs as it asked for them: its one size ("4", "0.5"), or an elastic job's bounds ("2-8")."""
    low, high = job.min_gpus, job.max_gpus
    if low is None or high is None or low == high:
        return gpus_text(job.num_gpus or 0)
    return f"{low}-{high}"


def show_gpus_text(job: m.JobDetail) -> str:
    """A job's GPUs in full, as `corral show` writes them: "4", or an elastic job's "2-8, elastic: sizes 2, 4, 8;
    duration measured at 2 GPUs; resize pause 60 s", and, where admission brought it down, "; submitted at 16 GPUs,
    which the cluster can never hold"."""
    low, high = job.min_gpus, job.max_gpus
    if low is None or high is None or low == high:
        return gpus_text(job.num_gpus or 0)
    sizes = f"sizes {', '.join(map(str, job.sizes))}" if job.sizes else "any size between"
    pause = job.resize_pause_s
    pause_text = f"{pause:g} s" if pause is not None else "the model's estimate"
    asked = job.requested_gpus
    brought = f"; submitted at {asked} GPUs, which the cluster can never hold" if asked is not None else ""
    return (f"{low}-{high}, elastic: {sizes}; duration measured at {gpus_text(job.num_gpus or 0)} GPUs; resize pause "
            f"{pause_text}{brought}")


def placement(allocation: list[m.Allocation] | None, *, cluster_ids: bool = False) -> str:
    """`node-0: GPU 0-1; node-1: GPU 3 ×0.5`: the job's GPUs by node and index on the node (what CUDA_VISIBLE_DEVICES
    names), as every view writes them (`scheduler.live.words`), with the cluster-wide numbers that decisions use after
    them when `cluster_ids` ("(cluster GPUs 16-23)")."""
    if not allocation:
        return ""
    return gpus_words([(a.node or "", a.local_gpu or 0, a.gpu) for a in allocation], allocation[0].share or 1.0,
                      cluster_ids=cluster_ids)


def progress_text(progress: float | None, digits: int = 0) -> str:
    """A job's progress where it is known (the API gives null for a command job, which reports none): "" then."""
    return "" if progress is None else f"{progress:.{digits}%}"


def when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def start_text(job: JobLike) -> str:
    """A pending job's start estimate, as the rough figure it is; a job the rules never start says so, with why (the
    server's words: `start_estimate_text`), and one past the replay's bounds says "not estimated"."""
    outlook = job.start_estimate_outlook
    if outlook == "never":
        return job.start_estimate_text or "never starts under the current rules"
    if outlook == "beyond":
        return "not estimated (past the replay's bounds)"
    est = job.start_estimate_s
    if est is None:
        return "unknown"
    if est < 1:
        return "now"
    return "in ~" + (f"{est:.0f} s" if est < 90 else f"{est / 60:.0f} min" if est < 5400 else f"{est / 3600:.1f} h")


def reason_text(job: JobLike) -> str:
    """Why a job is where it is: the pending reason, or what a failed job died of."""
    if job.state == JobState.PENDING:
        return job.pending_reason or ""
    if job.state == JobState.FAILED:
        return job.error or (f"exit code {job.exit_code}" if job.exit_code is not None else "failed")
    if job.state == JobState.TIMED_OUT:
        return job.error or "time limit reached"
    return ""


STATE_STYLE = {JobState.PENDING: "yellow", JobState.RUNNING: "cyan", JobState.SUCCEEDED: "green",
               JobState.FAILED: "red", JobState.CANCELLED: "dim", JobState.TIMED_OUT: "red"}


def state_text(state: str | None) -> str:
    state = state or "?"
    style = STATE_STYLE.get(JobState(state), "") if state in JobState._value2member_map_ else ""
    return f"[{style}]{state}[/]" if style else state


def array_states_text(array: m.Array) -> str:
    """ "10 tasks, at most 2 running: 3 succeeded, 2 running, 5 pending" """
    bound = f", at most {array.max_running} running" if array.max_running else ""
    states = ", ".join(f"{n} {state}" for state, n in sorted((array.states or {}).items(), key=lambda kv: -kv[1]))
    held = f" ({array.held} held)" if array.held else ""
    return f"{array.count} tasks{bound}: {states}{held}"


def environment_text(env: dict[str, Any] | None) -> str | None:
    """A job's environment (docs/environments.md) on one line: its packages, venv, image and working directory (the
    API gives it as a free-form object: the working directory's archive as its size and digest)."""
    if not env:
        return None
    parts = []
    if env.get("pip"):
        parts.append("pip " + ", ".join(env["pip"]))
    if env.get("venv"):
        parts.append(f"venv {env['venv']}")
    if env.get("image"):
        parts.append(f"image {env['image']}")
    if env.get("working_dir"):
        wd = env["working_dir"]
        parts.append(f"working dir {wd['bytes'] / 1024:.1f} KiB (sha256 {wd['sha256'][:12]})")
    return "; ".join(parts)


def constraints_text(given: m.Constraints | None) -> str | None:
    """Where a job may run, in the core's words ("gpu=h100, not on node3"); None: anywhere."""
    from scheduler.core.constraints import ConstraintError, Constraints

    if given is None:
        return None
    try:
        made = Constraints.from_json(given.to_json())
    except ConstraintError:
        return str(given.to_json())  # a newer server's form: shown as it came
    return made.words() if made is not None else None
