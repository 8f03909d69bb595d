"""Reading and ending jobs: `corral jobs`, `corral show`, `corral cancel` and `corral logs`."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

import corral.models as m
from corral import Client
from scheduler.cli.client_io import api_errors, client, connection, console, print_json
from scheduler.cli.client_text import (
    array_states_text,
    constraints_text,
    environment_text,
    placement,
    progress_text,
    reason_text,
    show_gpus_text,
    start_text,
    state_text,
    when,
)
from scheduler.cli.jobs_table import jobs_table
from scheduler.cli.params import JOB_ID, NATURAL, Number
from scheduler.live.job_states import JobState

RECENT_EVENTS = 20


def retry_on_text(retry_on: str | list[int] | None) -> str:
    if retry_on is None:
        return "-"
    return "any" if retry_on == "any" else ", ".join(map(str, retry_on))


def dependencies_text(deps: list[m.DependencyState]) -> str | None:
    """ "afterok 12 (prep, succeeded: met); afterany 13 (running)" """
    parts = []
    for d in deps:
        met = {True: ": met", False: ": never met"}.get(d.met, "") if d.met is not None else ""
        parts.append(f"{d.condition} {d.job}" + (f" ({d.name}, {d.state}{met})" if d.name else ""))
    return "; ".join(parts) or None


def priority_text(j: m.JobDetail) -> str:
    """ "5 (class batch-high, not preemptible)", "0"."""
    notes = [f"class {j.priority_class}"] if j.priority_class else []
    if j.preemptible is False:
        notes.append("not preemptible")
    return f"{j.priority}" + (f" ({', '.join(notes)})" if notes else "")


@click.command()
@click.option("--state", type=click.Choice([s.value for s in JobState]))
@click.option("--user", help="Another user's jobs (admins only).")
@click.option("--team", help="Jobs submitted under this team.")
@click.option("--limit", type=Number("int", 1, 1000), default=100, show_default=True)
@click.option("--offset", type=NATURAL, default=0)
@click.option("--json", "as_json", is_flag=True)
@connection
def jobs(state: str | None, user: str | None, team: str | None, limit: int, offset: int, as_json: bool, url: str,
         token: str | None) -> None:
    """List jobs, newest first."""
    with api_errors():
        page = client(url, token).jobs(state=state, user=user, team=team, limit=limit, offset=offset)
    if as_json:
        print_json(page)
        return
    out = console()
    table, hidden = jobs_table(page.jobs or [], out.width)
    out.print(table)
    shown = len(page.jobs or [])
    out.print(f"{offset + 1 if shown else 0}-{offset + shown} of {page.total} jobs", style="dim")
    if hidden:
        out.print(f"left out at this width: {', '.join(hidden)} (`corral show ID` or --json has them)", style="dim")


def duration_text(j: m.JobDetail) -> str:
    """The job's duration, and where none was given, what it was estimated from."""
    estimate = j.duration_estimate
    return f"{j.duration_s or 0:g}s" + (f" (estimated: {estimate['text']})" if estimate else "")


def model_text(j: m.JobDetail) -> str:
    """The job's model, and for one that named none (the generic profile) the measured runs that refine it."""
    alike: dict[str, Any] = (j.profile_usage or {}).get("usage") or {}
    own = j.measured_usage or {}
    runs = int(alike.get("runs", 0)) + int(own.get("runs", 0))
    if not runs:
        return j.model or ""
    return f"{j.model} (refined from {runs} measured run{'s' if runs > 1 else ''}; `GET /jobs/{j.id}/explain`)"


@click.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True)
@connection
def show(job_id: int, as_json: bool, url: str, token: str | None) -> None:
    """A job's details, placement, latest decisions and events."""
    with api_errors():
        j = client(url, token).job(job_id)
    if as_json:
        print_json(j)
        return
    out = console()
    out.print(f"[bold]job {j.id}[/] {escape(j.name or '')}  {state_text(j.state)}"
              + ("  [red](cancel requested)[/]" if j.cancel_requested and j.state == JobState.RUNNING else ""))
    rows = [
        ("user", j.user), ("team", j.team), ("kind", j.kind), ("model", model_text(j)), ("gpus", show_gpus_text(j)),
        ("duration", duration_text(j)), ("entrypoint", j.entrypoint), ("workdir", j.workdir),
        ("env", " ".join(f"{k}={v}" for k, v in (j.env or {}).items()) or None),
        ("environment", environment_text(j.environment)), ("priority", priority_text(j)),
        ("time limit", f"{j.time_limit_s:g} s" if j.time_limit_s else None),
        ("constraints", constraints_text(j.constraints)),
        ("depends on", dependencies_text(j.dependencies or [])),
        ("array", f"task {j.array_index} of array {j.array.id} ({array_states_text(j.array)})" if j.array else None),
        ("slo", f"{j.slo_ms:g} ms" if j.slo_ms else None),
        ("queue position", f"#{j.queue_position}" if j.queue_position else None),
        ("start estimate", start_text(j) if j.state == JobState.PENDING else None),
        ("restarts", f"{j.restarts}/{j.max_restarts} ({j.restart_policy}), preemptions {j.preemptions}"),
        ("retries", f"{j.retries}/{j.max_retries} on exit code {retry_on_text(j.retry_on)}, backoff "
                    f"{j.retry_backoff_s or 0:g} s" if j.max_retries else None),
        ("attempt", j.attempt), ("progress", progress_text(j.progress, 1) or None),
        ("submitted", when(j.submitted_at)),
        ("started", when(j.started_at or j.first_started_at) if j.started_at or j.first_started_at else
                    "not yet: preparing its environment" if j.state == JobState.RUNNING and j.environment else None),
        ("finished", j.finished_at and when(j.finished_at)),
        ("placement", placement(j.allocation, cluster_ids=True) or None),
        ("predicted slowdown", f"{j.predicted_slowdown:.3f}" if j.predicted_slowdown is not None else None),
        ("held", f"by {j.held_by} since {when(j.held_at)}" if j.held_at is not None else None),
        ("pending reason", j.pending_reason if j.state == JobState.PENDING else None),
        ("exit code", j.exit_code),
        ("failure reason", reason_text(j) if j.state in (JobState.FAILED, JobState.TIMED_OUT) else None),
    ]
    for key, value in rows:
        if value is not None and value != "":
            out.print(f"  {key:<19}{escape(str(value))}")
    if j.decisions:
        out.print("[bold]decisions[/]")
        for d in j.decisions:
            slow = f", predicted slowdown {d.predicted_slowdown:.3f}" if d.predicted_slowdown is not None else ""
            out.print(f"  {when(d.at)}  {escape(d.policy or '')}: {d.action} {escape(str(d.gpus))}{slow}"
                      + (f" - {escape(d.reason)}" if d.reason else ""))
    out.print("[bold]events[/]")
    events = (j.events or [])[-RECENT_EVENTS:]
    width = max((len(e.kind or "") for e in events), default=0) + 2  # a kind as long as the column never glues on
    for e in events:
        out.print(f"  {when(e.at)}  {e.kind or '':<{width}}{escape(e.message or '')}")


@click.command()
@click.argument("job_id", type=JOB_ID)
@connection
def cancel(job_id: int, url: str, token: str | None) -> None:
    """Cancel a job: a pending one at once, a running one once the controller stops its workers."""
    with api_errors():
        api = client(url, token)
        before = api.job(job_id)
        if before.state and JobState(before.state).terminal:  # nothing to cancel: say so, and fail, so scripts
            raise click.ClickException(f"job {job_id} already {before.state} at {when(before.finished_at)}; "  # notice
                                       "nothing to cancel")
        j = api.cancel(job_id)
    if j.state == JobState.RUNNING:
        click.echo(f"job {job_id}: cancel requested; the controller is stopping its workers")
    else:
        click.echo(f"job {job_id}: {j.state}")


@click.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--rank", type=NATURAL, help="One worker's log (default: all).")
@click.option("--attempt", type=NATURAL, help="Which run (default: the current one).")
@click.option("--tail", type=Number("int", 1, 100_000), default=None, help="Last lines per rank [default: 200; 10 "
              "with --follow].")
@click.option("--follow", "-f", is_flag=True, help="Keep printing what the logs gain until the job ends (and its next "
              "runs', if it is requeued or retried).")
@connection
def logs(job_id: int, rank: int | None, attempt: int | None, tail: int | None, follow: bool, url: str,
         token: str | None) -> None:
    """Print a job's worker logs."""
    if follow:
        if attempt is not None:
            raise click.UsageError("--follow follows the job's current run: leave out --attempt")
        _follow(client(url, token), job_id, rank, 10 if tail is None else tail)
        return
    with api_errors():
        res = client(url, token).logs(job_id, attempt=attempt, rank=rank, tail=200 if tail is None else tail)
    if not any(entry.text for entry in res.logs or []):  # say so: silence and exit 0 read as "it printed nothing"
        what = "no logs" if not res.logs else f"rank {rank}'s log is empty" if rank is not None else \
            "its logs are empty"
        click.echo(f"job {job_id} ({res.state}): {what} for attempt {res.attempt}", err=True)
        return
    many = len(res.logs) > 1
    for entry in res.logs:
        if many:  # like tail(1): headers only when they are needed to tell the files apart
            click.echo(f"==> rank {entry.rank} ({entry.path}) <==")
        text = entry.text or ""
        click.echo(text, nl=not text.endswith("\n") and bool(text))


def _follow(api: Client, job_id: int, rank: int | None, tail: int) -> None:
    """`corral logs --follow`: each chunk as it comes, under a header naming its rank when the ranks take turns; at
    the end, on stderr, how the job ended."""
    last: int | None = None
    with api_errors():
        j = api.job(job_id)
        if j.state == JobState.PENDING:  # nothing to print for a while: say why, not silence
            click.echo(f"job {job_id} is pending ({j.pending_reason or 'waiting to start'}); its logs follow "
                       "once it starts (Ctrl-C to stop)", err=True)
        for chunk in api.follow_logs(job_id, rank=rank, tail=tail):
            if chunk.rank is None:
                click.echo(f"==> job {job_id}: run {chunk.attempt} <==")
                continue
            if rank is None and chunk.rank != last:  # like tail -f on several files
                click.echo(f"==> rank {chunk.rank} <==")
            last = chunk.rank
            click.echo(chunk.text, nl=False)
        j = api.job(job_id)
    click.echo(f"job {job_id}: {j.state}" + (f" (exit code {j.exit_code})" if j.exit_code is not None else ""),
               err=True)

JOB_COMMANDS = [jobs, show, cancel, logs]
