"""Steering a job the queue holds: `corral hold`, `corral release`, `corral requeue`, `corral update` (its time
limit or priority), and the cluster's `corral time-limits`."""

from __future__ import annotations

from typing import Any

import click

from scheduler.cli.client_io import api_errors, client, connection, print_json
from scheduler.cli.params import JOB_ID, Number
from scheduler.live.job_states import JobState


@click.command()
@click.argument("job_id", type=JOB_ID)
@connection
def hold(job_id: int, url: str, token: str | None) -> None:
    """Hold a pending job: it keeps its place in the queue but does not start until `corral release` (Slurm's
    `scontrol hold`). A running job cannot be held."""
    with api_errors():
        j = client(url, token).hold(job_id)
    click.echo(f"job {job_id}: {j.pending_reason}")


@click.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--hold", is_flag=True, help="Hold it once requeued, until `corral release` (Slurm's requeuehold).")
@connection
def requeue(job_id: int, hold: bool, url: str, token: str | None) -> None:
    """Checkpoint a running job and put it back in the queue, in its place, spending no restart (Slurm's `scontrol
    requeue`): its workers get SIGTERM and the stop's grace period to save, at the controller's next pass."""
    with api_errors():
        client(url, token).requeue(job_id, hold=hold)
    click.echo(f"job {job_id}: requeue requested" + ("; it will be held" if hold else "") +
               "; the controller checkpoints it at its next pass")


@click.command()
@click.argument("job_id", type=JOB_ID)
@connection
def release(job_id: int, url: str, token: str | None) -> None:
    """Release a held job: it may start again, in its place in the queue. An admin's hold only an admin releases."""
    with api_errors():
        j = client(url, token).release(job_id)
    click.echo(f"job {job_id}: released; " + ("it may start" if j.state == JobState.PENDING else str(j.state)))


# ---- time limits ---------------------------------------------------------------------------------------------------


def time_limit_text(seconds: float | None) -> str:
    """A time limit as the CLI prints it: "3600 s", or "none"."""
    return "none" if seconds is None else f"{seconds:g} s"


def _seconds_or_none(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None | str:
    """SECONDS, or `none` to clear; absent: unchanged (returned as "")."""
    if value is None:
        return ""
    if value.lower() == "none":
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r}: give seconds or none", ctx, param) from None
    if not seconds > 0:
        raise click.BadParameter(f"{value!r}: must be positive", ctx, param)
    return seconds


@click.command("time-limits")
@click.option("--default", "default_s", callback=_seconds_or_none, metavar="SECONDS|none",
              help="The time limit a job gets when it gives none (admins).")
@click.option("--max", "max_s", callback=_seconds_or_none, metavar="SECONDS|none",
              help="The most a job may give (admins).")
@click.option("--json", "as_json", is_flag=True)
@connection
def time_limits(default_s: float | None | str, max_s: float | None | str, as_json: bool, url: str,
                token: str | None) -> None:
    """Show the cluster's time limits, or change them (admins)."""
    changes: dict[str, float | None] = {k: v for k, v in (("default_s", default_s), ("max_s", max_s))
                                        if not isinstance(v, str)}
    with api_errors():
        c = client(url, token)
        res = c.set_time_limits(changes) if changes else c.time_limits()
    if as_json:
        print_json(res)
        return
    click.echo(f"default time limit {time_limit_text(res.default_s)}, maximum {time_limit_text(res.max_s)}")


@click.command("update")
@click.argument("job_id", type=JOB_ID)
@click.option("--time-limit", "limit", callback=_seconds_or_none, metavar="SECONDS|none",
              help="Its new time limit, from its run's start (none: no limit). A run that has lasted longer is "
                   "stopped, timed out.")
@click.option("--priority", type=Number("int"), help="Its new priority (higher first).")
@connection
def update_job(job_id: int, limit: float | None | str, priority: int | None, url: str, token: str | None) -> None:
    """Change a pending or running job's time limit or priority (Slurm's `scontrol update`): you may lower your job's;
    an admin may set any."""
    changes: dict[str, Any] = {} if isinstance(limit, str) else {"time_limit_s": limit}
    if priority is not None:
        changes["priority"] = priority
    if not changes:
        raise click.UsageError("give --time-limit, --priority or both")
    with api_errors():
        c = client(url, token)
        before = c.job(job_id)
        j = c.update(job_id, **changes)
    said = []
    if "time_limit_s" in changes:
        said.append(f"time limit {time_limit_text(j.time_limit_s)} (was {time_limit_text(before.time_limit_s)})")
    if "priority" in changes:
        said.append(f"priority {j.priority} (was {before.priority})")
    click.echo(f"job {job_id}: {', '.join(said)}")

JOB_CONTROL_COMMANDS = [hold, release, requeue, update_job, time_limits]
