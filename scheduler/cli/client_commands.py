"""The `corral` commands that talk to a running server (submit, jobs, show, cancel, logs, cluster, team, user) and
`corral token create`, which opens the store directly: a token is what the other commands need, so it cannot require
one.

CORRAL_URL (default http://127.0.0.1:8080) and CORRAL_TOKEN say where and who. A failure prints one line on stderr
and exits 1 (2 for usage errors, as click does).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scheduler.cli.client import DEFAULT_URL, ClientError, CorralClient
from scheduler.cli.params import COUNT, JOB_ID, NATURAL, NON_NEGATIVE, POSITIVE, Number
from scheduler.live.job_states import DEFAULT_JOB_KIND, JobState, JobType, RestartPolicy
from scheduler.live.words import duration_text as duration_words
from scheduler.live.words import gpus_text as gpus_words

F = TypeVar("F", bound=Callable[..., Any])
GPUS = Number("number", 0, min_open=True)  # whole GPUs or a share of one: the server checks which shares it takes
RECENT_EVENTS = 20


def console() -> Console:
    # Piped output (scripts, tests) gets wide tables instead of rich's 80-column default.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def connection(f: F) -> F:
    f = click.option("--token", envvar="CORRAL_TOKEN", metavar="TOKEN", show_envvar=True,
                     help="API token (`corral token create`).")(f)
    f = click.option("--url", envvar="CORRAL_URL", default=DEFAULT_URL, show_default=True, show_envvar=True,
                     help="The Corral server.")(f)
    return f


def client(url: str, token: str | None) -> CorralClient:
    if not token:
        raise click.ClickException("no API token: set CORRAL_TOKEN (or --token); an admin creates one with "
                                   "`corral token create --user NAME`")
    try:
        return CorralClient(url, token)
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None


@contextmanager
def api_errors() -> Iterator[None]:
    """ClientError as click's one-line error and exit status 1."""
    try:
        yield
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


# ---- formatting ----------------------------------------------------------------------------------------------------


def gpus_text(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else f"{float(n):g}"


def placement(allocation: list[dict[str, Any]], *, cluster_ids: bool = False) -> str:
    """`node-0: GPU 0-1; node-1: GPU 3 ×0.5`: the job's GPUs by node and index on the node (what CUDA_VISIBLE_DEVICES
    names), as every view writes them (`scheduler.live.words`), with the cluster-wide numbers that decisions use after
    them when `cluster_ids` ("(cluster GPUs 16-23)")."""
    if not allocation:
        return ""
    return gpus_words([(a["node"], a["local_gpu"], a.get("gpu")) for a in allocation], allocation[0]["share"],
                      cluster_ids=cluster_ids)


def progress_text(progress: float | None, digits: int = 0) -> str:
    """A job's progress where it is known (the API gives null for a command job, which reports none): "" then."""
    return "" if progress is None else f"{progress:.{digits}%}"


def when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def start_text(job: dict[str, Any]) -> str:
    """A pending job's start estimate, as the rough figure it is."""
    est = job.get("start_estimate_s")
    if est is None:
        return "unknown"
    if est < 1:
        return "now"
    return "in ~" + (f"{est:.0f} s" if est < 90 else f"{est / 60:.0f} min" if est < 5400 else f"{est / 3600:.1f} h")


def reason_text(job: dict[str, Any]) -> str:
    """Why a job is where it is: the pending reason, or what a failed job died of."""
    if job["state"] == JobState.PENDING:
        return job["pending_reason"] or ""
    if job["state"] == JobState.FAILED:
        return job["error"] or (f"exit code {job['exit_code']}" if job["exit_code"] is not None else "failed")
    if job["state"] == JobState.TIMED_OUT:
        return job["error"] or "time limit reached"
    return ""


STATE_STYLE = {JobState.PENDING: "yellow", JobState.RUNNING: "cyan", JobState.SUCCEEDED: "green",
               JobState.FAILED: "red", JobState.CANCELLED: "dim", JobState.TIMED_OUT: "red"}


def state_text(state: str) -> str:
    style = STATE_STYLE.get(JobState(state), "") if state in JobState._value2member_map_ else ""
    return f"[{style}]{state}[/]" if style else state


# ---- the jobs table ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobColumn:
    cell: Callable[[dict[str, Any]], str]  # plain text
    right: bool = False
    wraps: bool = False  # folds onto more lines rather than widen the table (the reason, free text)


JOB_COLUMNS: dict[str, JobColumn] = {  # in the order they are shown
    "id": JobColumn(lambda j: str(j["id"]), right=True),
    "name": JobColumn(lambda j: j["name"]),
    "user": JobColumn(lambda j: j["user"]),
    "team": JobColumn(lambda j: j["team"]),
    "state": JobColumn(lambda j: j["state"]),
    "gpus": JobColumn(lambda j: gpus_text(j["num_gpus"]), right=True),
    "model": JobColumn(lambda j: j["model"]),
    "progress": JobColumn(lambda j: progress_text(j["progress"]), right=True),
    "queue": JobColumn(lambda j: f"#{j['queue_position']}" if j.get("queue_position") else "", right=True),
    "starts": JobColumn(lambda j: start_text(j) if j["state"] == JobState.PENDING else ""),
    "preempted": JobColumn(lambda j: str(j["preemptions"] or ""), right=True),
    "placement": JobColumn(lambda j: placement(j["allocation"])),
    "reason": JobColumn(reason_text, wraps=True),
}
# Always shown, whole: what a job is and where it stands. The name alone shrinks (with an ellipsis) to make room.
ESSENTIAL_COLUMNS = ("id", "name", "user", "state", "gpus", "progress")
# The others get room in this order while the terminal has it: why a job waits or failed first.
OPTIONAL_COLUMNS = ("reason", "queue", "starts", "model", "placement", "team", "preempted")
NAME_MIN, REASON_MIN = 16, 20  # the name keeps this much before the optional columns get room
COLUMN_PAD = 2  # rich's padding of one space either side
STATE_WIDTH = max(len(s.value) for s in JobState)  # "succeeded", "cancelled": never "fai…"


def jobs_table(jobs: list[dict[str, Any]], width: int) -> tuple[Table, list[str]]:
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
        table.add_row(*(state_text(job["state"]) if col == "state" else escape(r[col])
                        for col in JOB_COLUMNS if col in chosen))
    hidden = [col for col in JOB_COLUMNS if col not in chosen and any(r[col] for r in rows)]
    return table, hidden


# ---- commands ------------------------------------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    """json.loads takes NaN and Infinity, which no JSON parser (nor the server) reads back: refuse them here."""
    raise ValueError(f"{name} is not a JSON number")


def _env(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for item in value:
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE")
        env[key] = val
    return env


def _retry_on(ctx: click.Context, param: click.Parameter, value: str | None) -> str | list[int] | None:
    """--retry-on any, or exit codes separated by commas (the server checks their range)."""
    if value is None or value.strip() == "any":
        return value and "any"
    try:
        return [int(code) for code in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give any, or exit codes separated by commas (1,2,137)") from None


def _depends_on(ctx: click.Context, param: click.Parameter, value: str | None) -> list[dict[str, Any]] | None:
    """--depends-on in Slurm's form: afterok:12[:13][,afterany:14]."""
    if value is None:
        return None
    from scheduler.core.dependencies import parse_dependency

    try:
        deps = parse_dependency(value)
        return [{"job": int(d.job), "condition": d.condition.value} for d in deps]
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: {exc}" if "invalid literal" not in str(exc) else
                                 f"{value!r}: jobs are named by their ids (afterok:12:13)", ctx, param) from None


def _array(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any] | None:
    """--array N[%K] or 0-(N-1)[%K] (Slurm's form, from 0): N tasks, at most K running at once."""
    if value is None:
        return None
    body, _, most = value.partition("%")
    try:
        first, dash, last = body.partition("-")
        count = int(last) - int(first) + 1 if dash else int(first)
        if dash and int(first) != 0:
            raise ValueError("indices start at 0")
        out: dict[str, Any] = {"count": count}
        if most:
            out["max_running"] = int(most)
    except ValueError as exc:
        why = str(exc) if "start at 0" in str(exc) else "write N, N%K or 0-LAST%K (e.g. 0-99%10)"
        raise click.BadParameter(f"{value!r}: {why}", ctx, param) from None
    return out


def retry_on_text(retry_on: str | list[int]) -> str:
    return "any" if retry_on == "any" else ", ".join(map(str, retry_on))


@click.command()
@click.option("--file", "spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A JOB.json with the submission's fields; the flags below override it.")
@click.option("--name", help="The job's name.")
@click.option("--kind", type=click.Choice([k.value for k in JobType]),
              help="emulated (runs for the time the contention model predicts) or command (runs --entrypoint); "
                   f"default: --file's, else {DEFAULT_JOB_KIND.value}.")
@click.option("--model", help="A model of the catalog (GET /api/v1/models).")
@click.option("--gpus", "num_gpus", type=GPUS, help="Whole GPUs (1, 2, ...) or a share of one (0.5).")
@click.option("--duration", "duration_s", type=POSITIVE, help="Seconds: the run time (emulated) or an estimate.")
@click.option("--entrypoint", help="The shell command (command jobs).")
@click.option("--workdir", help="Working directory of the command.")
@click.option("--env", "env", multiple=True, callback=_env, metavar="K=V", help="Environment variable (repeatable).")
@click.option("--priority", type=Number("int"), help="Higher first; a job preempts only lower priorities [default: 0].")
@click.option("--preemptible/--not-preemptible", default=None,
              help="Whether the job may be preempted [default: preemptible].")
@click.option("--priority-class", help="A priority class (`corral priority-class list`): its value and preemptibility.")
@click.option("--depends-on", "depends_on", callback=_depends_on, metavar="afterok:ID[:ID][,afterany:ID]",
              help="Run only once these jobs succeed (afterok), end (afterany) or fail (afternotok).")
@click.option("--array", "array", callback=_array, metavar="N[%K]|0-LAST[%K]",
              help="Submit N tasks (CORRAL_ARRAY_INDEX 0..N-1), at most K running at once.")
@click.option("--time-limit", "time_limit_s", type=POSITIVE,
              help="Seconds a run may last; then it is stopped and the job ends timed_out [default: the cluster's].")
@click.option("--client-token", help="Idempotency key: resubmitting with it returns the first job.")
@click.option("--slo-ms", type=POSITIVE, help="Latency SLO (inference).")
@click.option("--restart-policy", type=click.Choice([r.value for r in RestartPolicy]))
@click.option("--max-restarts", type=NATURAL)
@click.option("--max-retries", type=NATURAL, help="Run again after a non-zero exit, at most this many times.")
@click.option("--retry-on", callback=_retry_on, metavar="any|CODE,...",
              help="The exit codes a failed run is retried on [default: any].")
@click.option("--retry-backoff", "retry_backoff_s", type=Number("float", 0, 3600),
              help="Seconds before the first retry, doubled for each one after [default: 30].")
@click.option("--webhook", metavar="URL", help="Call this URL (a signed POST) on each of the job's state changes; "
              "prints the secret that signs them, once (docs/webhooks.md).")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@connection
def submit(spec_file: Path | None, as_json: bool, url: str, token: str | None, **flags: Any) -> None:
    """Submit a job; prints its id and state."""
    spec: dict[str, Any] = {}
    if spec_file is not None:
        try:
            spec = json.loads(spec_file.read_text(), parse_constant=_no_constant)
        except ValueError as exc:
            raise click.ClickException(f"{spec_file} is not valid JSON: {exc}") from None
        if not isinstance(spec, dict):
            raise click.ClickException(f"{spec_file} must hold a JSON object of job fields")
    env = flags.pop("env")
    spec |= {k: v for k, v in flags.items() if v is not None}
    if env:
        spec["env"] = {**(spec.get("env") or {}), **env}
    # Not a flag default: that would override the kind in --file. The server has the same default.
    spec.setdefault("kind", DEFAULT_JOB_KIND.value)
    with api_errors():
        job, created = client(url, token).submit(spec)
    _submitted(job, created, as_json, "submitted job")
    if job.get("webhook") and not as_json:
        click.echo(f"webhook {job['webhook']['id']}, secret {job['webhook']['secret']} (shown only now: keep it to "
                   "verify the requests' signatures)")


@click.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--with-changes", "changes", metavar="JSON", help='Fields to change, as a JSON object: '
              '\'{"num_gpus": 4, "max_retries": 2}\'.')
@click.option("--json", "as_json", is_flag=True, help="Print the new job as JSON.")
@connection
def resubmit(job_id: int, changes: str | None, as_json: bool, url: str, token: str | None) -> None:
    """Submit a job again: the fields it was submitted with, changed by --with-changes; the new job is yours."""
    try:
        fields = json.loads(changes, parse_constant=_no_constant) if changes else {}
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--with-changes") from None
    if not isinstance(fields, dict):
        raise click.BadParameter("give a JSON object of job fields", param_hint="--with-changes")
    with api_errors():
        job, created = client(url, token).resubmit(job_id, fields)
    _submitted(job, created, as_json, f"resubmitted job {job_id} as job")


def _submitted(job: dict[str, Any], created: bool, as_json: bool, what: str) -> None:
    if as_json:
        print_json(job)
    elif created and job.get("array"):
        a = job["array"]
        click.echo(f"{what.replace('job', 'array')} {a['id']}: jobs {a['tasks'][0]['id']} to {a['tasks'][-1]['id']} "
                   f"({array_states_text(a)})")
    elif created:
        click.echo(f"{what} {job['id']} ({job['state']})")
    else:
        click.echo(f"job {job['id']} was already submitted with this client token ({job['state']})")


def _hypothetical(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[dict[str, Any]]:
    """--job MODEL:GPUS:SECONDS[:IN_SECONDS], repeatable: hypothetical jobs (the server checks each field)."""
    out = []
    for value in values:
        parts = value.split(":")
        try:
            if len(parts) not in (3, 4):
                raise ValueError
            job = {"model": parts[0], "num_gpus": float(parts[1]), "duration_s": float(parts[2])}
            if len(parts) == 4:
                job["submit_in_s"] = float(parts[3])
        except ValueError:
            raise click.BadParameter(f"{value!r}: write MODEL:GPUS:SECONDS[:IN_SECONDS], e.g. ResNet-50-bs64:2:3600",
                                     ctx, param) from None
        out.append(job)
    return out


WHATIF_ROWS = (("avg_jct_s", "average JCT"), ("p95_jct_s", "p95 JCT"), ("avg_queue_s", "average queueing"),
               ("makespan_s", "makespan"), ("gpu_util", "GPU use"))


@click.command()
@click.option("--policy", help="The policy to simulate [default: the active one].")
@click.option("--extra-nodes", type=Number("int", 0, 64), default=0, help="Nodes like the last live one, added now.")
@click.option("--job", "jobs", multiple=True, callback=_hypothetical, metavar="MODEL:GPUS:SECONDS[:IN]",
              help="A hypothetical job arriving now (or IN seconds from now); repeatable.")
@click.option("--seeds", type=Number("int", 1, 20), default=None, help="Simulations [default: the server's, 5].")
@click.option("--horizon", "horizon_s", type=POSITIVE, default=None, help="Simulate only this many seconds ahead.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole answer as JSON.")
@connection
def whatif(policy: str | None, extra_nodes: int, jobs: list[dict[str, Any]], seeds: int | None,
           horizon_s: float | None, as_json: bool, url: str, token: str | None) -> None:
    """Simulate the present queue under another policy, more nodes or extra jobs, next to the active policy."""
    with api_errors():
        res = client(url, token).whatif(policy=policy, extra_nodes=extra_nodes, jobs=jobs, seeds=seeds,
                                        horizon_s=horizon_s)
    if as_json:
        print_json(res)
        return
    base = res.get("baseline")
    table = Table(title=f"what if: {res['policy']}" + (f", {extra_nodes} more node(s)" if extra_nodes else "")
                  + (f", {len(jobs)} more job(s)" if jobs else "") + f" ({len(res['seeds'])} seeds)")
    table.add_column("")
    table.add_column(res["policy"], justify="right")
    if base is not None:
        table.add_column(f"now: {base['policy']}", justify="right")
        table.add_column("difference", justify="right")

    def cell(key: str, d: dict[str, Any] | None) -> str:
        if d is None:
            return ""
        if key == "gpu_util":
            return f"{d['mean']:.0%} ({d['min']:.0%}-{d['max']:.0%})"
        return f"{duration_words(d['mean'])} ({duration_words(d['min'])}-{duration_words(d['max'])})"

    for key, label in WHATIF_ROWS:
        row = [label, cell(key, res["metrics"][key])]
        if base is not None:
            delta = (res.get("delta") or {}).get(key)
            sign = "" if delta is None else ("+" if delta["mean"] >= 0 else "-")
            diff = "" if delta is None else (f"{sign}{abs(delta['mean']):.0%}" if key == "gpu_util"
                                             else f"{sign}{duration_words(abs(delta['mean']))}")
            row += [cell(key, base["metrics"][key]), diff]
        table.add_row(*row)
    console().print(table)
    for job in res.get("hypothetical") or []:
        jct = duration_words(job["jct_s"]) if job["jct_s"] is not None else "does not finish"
        n = job["num_gpus"]
        size = f"{n:g} of a GPU" if n < 1 else f"{gpus_text(n)} GPU{'s' if n > 1 else ''}"
        click.echo(f"{job['name']}: {size} of {job['model']}, done {jct} after it arrives "
                   f"(waits {duration_words(job['queue_s'] or 0.0)})")
    for note in res.get("notes") or []:
        click.echo(f"note: {note}", err=True)


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
    table, hidden = jobs_table(page["jobs"], out.width)
    out.print(table)
    shown = len(page["jobs"])
    out.print(f"{offset + 1 if shown else 0}-{offset + shown} of {page['total']} jobs", style="dim")
    if hidden:
        out.print(f"left out at this width: {', '.join(hidden)} (`corral show ID` or --json has them)", style="dim")


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
    out.print(f"[bold]job {j['id']}[/] {escape(j['name'])}  {state_text(j['state'])}"
              + ("  [red](cancel requested)[/]" if j["cancel_requested"] and j["state"] == JobState.RUNNING else ""))
    rows = [
        ("user", j["user"]), ("team", j["team"]), ("kind", j["kind"]), ("model", j["model"]), ("gpus", gpus_text(j["num_gpus"])),
        ("duration", f"{j['duration_s']:g}s"), ("entrypoint", j["entrypoint"]), ("workdir", j["workdir"]),
        ("env", " ".join(f"{k}={v}" for k, v in j["env"].items()) or None), ("priority", priority_text(j)),
        ("time limit", f"{j['time_limit_s']:g} s" if j.get("time_limit_s") else None),
        ("depends on", dependencies_text(j.get("dependencies") or [])),
        ("array", f"task {j['array_index']} of array {j['array']['id']} ({array_states_text(j['array'])})"
                  if j.get("array") else None),
        ("slo", f"{j['slo_ms']:g} ms" if j["slo_ms"] else None),
        ("queue position", f"#{j['queue_position']}" if j.get("queue_position") else None),
        ("start estimate", start_text(j) if j["state"] == JobState.PENDING else None),
        ("restarts", f"{j['restarts']}/{j['max_restarts']} ({j['restart_policy']}), preemptions {j['preemptions']}"),
        ("retries", f"{j['retries']}/{j['max_retries']} on exit code {retry_on_text(j['retry_on'])}, backoff "
                    f"{j['retry_backoff_s']:g} s" if j["max_retries"] else None),
        ("attempt", j["attempt"]), ("progress", progress_text(j["progress"], 1) or None),
        ("submitted", when(j["submitted_at"])),
        ("started", j["started_at"] and when(j["started_at"])),
        ("finished", j["finished_at"] and when(j["finished_at"])),
        ("placement", placement(j["allocation"], cluster_ids=True) or None),
        ("predicted slowdown", f"{j['predicted_slowdown']:.3f}" if j["predicted_slowdown"] is not None else None),
        ("held", f"by {j['held_by']} since {when(j['held_at'])}" if j.get("held_at") is not None else None),
        ("pending reason", j["pending_reason"] if j["state"] == JobState.PENDING else None),
        ("exit code", j["exit_code"]), ("failure reason", reason_text(j) if j["state"] in (JobState.FAILED, JobState.TIMED_OUT) else None),
    ]
    for key, value in rows:
        if value is not None and value != "":
            out.print(f"  {key:<19}{escape(str(value))}")
    if j["decisions"]:
        out.print("[bold]decisions[/]")
        for d in j["decisions"]:
            slow = f", predicted slowdown {d['predicted_slowdown']:.3f}" if d["predicted_slowdown"] is not None else ""
            out.print(f"  {when(d['at'])}  {escape(d['policy'])}: {d['action']} {escape(str(d['gpus']))}{slow}"
                      + (f" - {escape(d['reason'])}" if d["reason"] else ""))
    out.print("[bold]events[/]")
    for e in j["events"][-RECENT_EVENTS:]:
        out.print(f"  {when(e['at'])}  {e['kind']:<17}{escape(e['message'])}")


@click.command()
@click.argument("job_id", type=JOB_ID)
@connection
def cancel(job_id: int, url: str, token: str | None) -> None:
    """Cancel a job: a pending one at once, a running one once the controller stops its workers."""
    with api_errors():
        api = client(url, token)
        before = api.job(job_id)
        if JobState(before["state"]).terminal:  # nothing to cancel: say so, and fail, so scripts notice
            raise click.ClickException(f"job {job_id} already {before['state']} at {when(before['finished_at'])}; "
                                       "nothing to cancel")
        j = api.cancel(job_id)
    if j["state"] == JobState.RUNNING:
        click.echo(f"job {job_id}: cancel requested; the controller is stopping its workers")
    else:
        click.echo(f"job {job_id}: {j['state']}")


@click.command()
@click.argument("job_id", type=JOB_ID)
@connection
def hold(job_id: int, url: str, token: str | None) -> None:
    """Hold a pending job: it keeps its place in the queue but does not start until `corral release` (Slurm's
    `scontrol hold`). A running job cannot be held."""
    with api_errors():
        j = client(url, token).hold(job_id)
    click.echo(f"job {job_id}: {j['pending_reason']}")


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
    click.echo(f"job {job_id}: released; " + ("it may start" if j["state"] == JobState.PENDING else j["state"]))


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
    if not res["logs"]:
        click.echo(f"job {job_id} has no logs for attempt {res['attempt']}", err=True)
        return
    many = len(res["logs"]) > 1
    for entry in res["logs"]:
        if many:  # like tail(1): headers only when they are needed to tell the files apart
            click.echo(f"==> rank {entry['rank']} ({entry['path']}) <==")
        click.echo(entry["text"], nl=not entry["text"].endswith("\n") and bool(entry["text"]))


def _follow(api: CorralClient, job_id: int, rank: int | None, tail: int) -> None:
    """`corral logs --follow`: each chunk as it comes, under a header naming its rank when the ranks take turns; at
    the end, on stderr, how the job ended."""
    last: int | None = None
    with api_errors():
        for chunk in api.follow_logs(job_id, rank=rank, tail=tail):
            if chunk.rank is None:
                click.echo(f"==> job {job_id}: run {chunk.attempt} <==")
                continue
            if rank is None and chunk.rank != last:  # like tail -f on several files
                click.echo(f"==> rank {chunk.rank} <==")
            last = chunk.rank
            click.echo(chunk.text, nl=False)
        j = api.job(job_id)
    click.echo(f"job {job_id}: {j['state']}" + (f" (exit code {j['exit_code']})" if j.get("exit_code") is not None
                                                  else ""), err=True)


def health_text(health: dict[str, Any] | None) -> str:
    """', GPUs ok' / ', GPUs degraded' / ', health stale (...)' for a node's title; '' without a report."""
    if health is None:
        return ""
    if health["stale"]:
        return f", [yellow]health stale[/] ({health['age_s']:.0f} s old)"
    if health["agent"] == "stopped":
        return ", [yellow]agent stopped[/]"
    return ", GPUs [green]ok[/]" if health["status"] == "ok" else ", GPUs [red]degraded[/]"


def gpu_health_text(reading: dict[str, Any] | None) -> str:
    """One GPU's reading: its status, with the temperature and whatever made it not ok."""
    if reading is None:
        return "-"
    parts = [reading["status"]]
    if reading.get("temperature_c") is not None:
        parts.append(f"{reading['temperature_c']} °C")
    if reading.get("ecc_uncorrected"):
        parts.append(f"{reading['ecc_uncorrected']} ECC")
    if reading.get("xid_errors"):
        parts.append("XID " + ",".join(map(str, reading["xid_errors"][-3:])))
    if reading.get("error"):
        parts.append(reading["error"][:60])
    return escape(" ".join(parts))


def _tenant_text(t: dict[str, Any]) -> str:
    """A GPU's tenant as `corral cluster` prints it: another user's job comes without its name and user."""
    who = f"{t['name']} ({t['user']})" if t["user"] is not None else "(another user's job)"
    return f"job {t['job_id']} {who} ×{t['share']:g}"


@click.command()
@click.option("--json", "as_json", is_flag=True)
@connection
def cluster(as_json: bool, url: str, token: str | None) -> None:
    """Nodes and GPUs with their tenants and shares, and the totals."""
    with api_errors():
        c = client(url, token).cluster()
    if as_json:
        print_json(c)
        return
    out = console()
    for node in c["nodes"]:
        status = "[green]alive[/]" if node["alive"] else "[red]down[/]"
        drain = node.get("drain")
        if drain:  # an admin's drain: nothing new starts there (`corral node resume`)
            status += f", [yellow]drained[/]{': ' + escape(drain['reason']) if drain['reason'] else ''}"
        health = node.get("health")
        by_gpu = {h["index"]: h for h in health["gpus"]} if health else {}
        # The rack the node names (`corral node start --rack`), before its preset: the map groups by it too.
        rack = f"rack {escape(node['rack'])}, " if node.get("rack") else ""
        table = Table(title=f"{escape(node['name'])} ({rack}{escape(node['preset'])}, {status}{health_text(health)})",
                      title_justify="left", box=None, header_style="bold")
        for col in ("gpu", "local", "type", "mem", "free", *(("health",) if health else ()), "tenants"):
            table.add_column(col, justify="left" if col in ("type", "health", "tenants") else "right")
        for g in node["gpus"]:
            tenants = ", ".join(_tenant_text(t) for t in g["tenants"])
            gpu_health = (gpu_health_text(by_gpu.get(g["local_index"])),) if health else ()
            # A closed GPU (down, drained or faulty node) takes no new job: its idle share is not free.
            free = "closed" if g.get("closed") else f"{g['free_share']:g}"
            table.add_row(str(g["index"]), str(g["local_index"]), escape(g["gpu_type"]), f"{g['mem_gb']:g} GB",
                          free, *gpu_health, escape(tenants) or "-")
        out.print(table)
    t, q = c["totals"], c["queue"]
    closed = t["gpus"] - t.get("gpus_usable", t["gpus"])
    usable = f" ({t['gpus_free']} free of {t['gpus_usable']} usable, {closed} closed)" if closed else ""
    out.print(f"{t['nodes']} nodes, {t['gpus']} GPUs{usable}: {t['gpus_allocated']} allocated "
              f"({t['gpus_shared']} shared), "
              f"{t['share_allocated']:g} GPUs of share in use; queue: {q['pending']} pending, {q['running']} running; "
              f"policy: {c['active_policy'] or '(controller default)'}"
              + (f"; fabric: {escape(c['fabric'])}" if c.get("fabric") else ""))


@click.command()
@click.option("--json", "as_json", is_flag=True)
@connection
def models(as_json: bool, url: str, token: str | None) -> None:
    """The model catalog: what `submit --model` accepts, with each model's kind and isolated demands."""
    with api_errors():
        catalog = client(url, token).models()
    if as_json:
        print_json(catalog)
        return
    table = Table(box=None, header_style="bold")
    keys = [k for k in ("name", "kind", "compute_ms", "mem_gb", "grad_mb", "latency_ms", "slo_ms", "source")
            if any(k in m for m in catalog)]
    for k in keys:
        table.add_column(k, justify="left" if k in ("name", "kind") else "right")
    for m in catalog:
        table.add_row(*(escape(str(m[k])) if m.get(k) is not None else "-" for k in keys))
    console().print(table)


@click.command()
@click.argument("name", required=False)
@connection
def policy(name: str | None, url: str, token: str | None) -> None:
    """Show the active placement policy and the available ones; with NAME, switch to it (admins only)."""
    with api_errors():
        api = client(url, token)
        if name is not None:
            click.echo(f"active policy: {api.set_policy(name)}")
            return
        info = api.policies()
    out = console()
    out.print(f"active policy: {escape(info['active'] or '(the controller default)')}")
    out.print("available: " + ", ".join(escape(n) for n in info["available"]))


DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
DURATION_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _expiry(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """`--expires 30d` (s, m, h, d or w) as a wall-clock expiry time."""
    if value is None:
        return None
    match = DURATION.fullmatch(value.strip())
    if match is None or float(match[1]) <= 0:
        raise click.BadParameter(f"{value!r}: give a positive duration such as 12h, 30d or 1w", ctx, param)
    return time.time() + float(match[1]) * DURATION_UNIT_S[match[2]]


def _user_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from scheduler.live.store.queries import check_user_name  # here: only the token commands need the store

    try:
        return check_user_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@click.group()
def token() -> None:
    """API tokens (opens the database directly: DATABASE_URL, or SQLite under CORRAL_HOME)."""


@token.command("create")
@click.option("--user", "user_name", required=True, callback=_user_name,
              help="The user (created if new): letters, digits, '.', '_' or '-'.")
@click.option("--admin", is_flag=True, help="Make the user an admin (sees and manages every job).")
@click.option("--expires", "expires_at", callback=_expiry, metavar="DURATION",
              help="Expire the token after this long (e.g. 12h, 30d, 1w); default: never.")
@click.option("--team", help="The user's team: a new user joins it, an existing one moves to it (refused while they "
                             "have jobs pending or running). Default: 'default' for a new user, unchanged otherwise.")
def token_create(user_name: str, admin: bool, expires_at: float | None, team: str | None) -> None:
    """Create a token and print it alone on stdout (store it now: only its hash is kept)."""
    from scheduler.live.store import Store, database_url  # alembic and the migrations: only the token commands
    from scheduler.live.store.db import store_exists
    from scheduler.live.store.queries import TeamConflict, UnknownTeam, create_token, list_teams

    url = database_url()
    new_store = not store_exists(url)
    store = Store.open(url)
    try:
        # A refusal raised inside the session rolls it back: no user, no token, no move.
        with store.session(write=True) as s:
            try:
                tok = create_token(s, user_name, admin=admin, expires_at=expires_at, team=team)
            except UnknownTeam as exc:
                teams = ", ".join(t.name for t in list_teams(s))
                raise click.BadParameter(f"{exc}; the teams are {teams} (`corral team create` adds one)",
                                         param_hint="'--team'") from None
            except TeamConflict as exc:
                raise click.ClickException(f"--team: {exc}") from None
    finally:
        store.close()
    click.echo(tok)
    # On stderr: stdout is the token alone, for `export CORRAL_TOKEN=$(corral token create ...)`.
    click.echo(f"token written to {store_text(url)}", err=True)
    if new_store:
        click.echo("corral: warning: no store was there, so a new, empty one was made: a server started with another "
                   "CORRAL_HOME (or DATABASE_URL) will not know this token", err=True)


def store_text(url: str) -> str:
    """The store `corral token` opened, as a person checks it against the server's: the URL without its password,
    and the setting it came from."""
    import os

    from scheduler.core.paths import corral_home
    from scheduler.live.history import redact

    if os.environ.get("DATABASE_URL"):
        return f"{redact(url)} (DATABASE_URL)"
    home = os.environ.get("CORRAL_HOME")
    return f"{redact(url)} ({f'CORRAL_HOME={home}' if home else f'CORRAL_HOME unset: {corral_home()}'})"


@token.command("list")
@click.option("--json", "as_json", is_flag=True)
def token_list(as_json: bool) -> None:
    """Every token: its id, first characters, user, creation, expiry and revocation (never the token itself)."""
    from scheduler.live.store import Store
    from scheduler.live.store.queries import list_tokens, token_usable

    store = Store.open()
    try:
        with store.session() as s:
            rows: list[dict[str, Any]] = [
                {"id": t.id, "prefix": t.prefix, "user": t.user.name, "admin": t.user.admin,
                 "created_at": t.created_at, "expires_at": t.expires_at, "revoked": t.revoked,
                 "revoked_at": t.revoked_at} for t in list_tokens(s)]
    finally:
        store.close()
    if as_json:
        print_json(rows)
        return
    table = Table(box=None)
    for col in ("id", "prefix", "user", "created", "expires", "status"):
        table.add_column(col)
    for r in rows:
        status = ("revoked " + when(r["revoked_at"])) if r["revoked"] else (
            "active" if token_usable(False, r["expires_at"]) else "expired")
        table.add_row(str(r["id"]), r["prefix"], escape(r["user"]) + (" (admin)" if r["admin"] else ""),
                      when(r["created_at"]), when(r["expires_at"]) if r["expires_at"] else "never", status)
    console().print(table)


@token.command("revoke")
@click.argument("key", metavar="ID|PREFIX")
def token_revoke(key: str) -> None:
    """Revoke a token by its id or prefix (as `corral token list` shows them). It stops working at once."""
    from scheduler.live.store import Store
    from scheduler.live.store.queries import find_tokens, revoke_token

    store = Store.open()
    try:
        with store.session(write=True) as s:
            found = find_tokens(s, key)
            if not found:
                raise click.ClickException(f"no token {key!r}: `corral token list` shows ids and prefixes")
            if len(found) > 1:
                raise click.ClickException(f"{len(found)} tokens start with {key!r}: revoke one by its id")
            tok = revoke_token(s, found[0])
            click.echo(f"revoked token {tok.id} ({tok.prefix}…) of {tok.user.name}")
    finally:
        store.close()


def dependencies_text(deps: list[dict[str, Any]]) -> str | None:
    """ "afterok 12 (prep, succeeded: met); afterany 13 (running)" """
    parts = []
    for d in deps:
        met = {True: ": met", False: ": never met"}.get(d["met"], "")
        parts.append(f"{d['condition']} {d['job']}" + (f" ({d['name']}, {d['state']}{met})" if d["name"] else ""))
    return "; ".join(parts) or None


def array_states_text(array: dict[str, Any]) -> str:
    """ "10 tasks, at most 2 running: 3 succeeded, 2 running, 5 pending" """
    bound = f", at most {array['max_running']} running" if array.get("max_running") else ""
    states = ", ".join(f"{n} {state}" for state, n in sorted(array["states"].items(), key=lambda kv: -kv[1]))
    held = f" ({array['held']} held)" if array.get("held") else ""
    return f"{array['count']} tasks{bound}: {states}{held}"


# ---- arrays ------------------------------------------------------------------------------------------------------


@click.group("array")
def array_group() -> None:
    """Job arrays: show one, or cancel, hold or release every task of one."""


@array_group.command("show")
@click.argument("array_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True)
@connection
def array_show(array_id: int, as_json: bool, url: str, token: str | None) -> None:
    """An array's tasks and their states."""
    with api_errors():
        a = client(url, token).array(array_id)
    if as_json:
        print_json(a)
        return
    out = console()
    out.print(f"[bold]array {a['id']}[/] {escape(a['name'])}: {array_states_text(a)}")
    for t in a["tasks"]:
        held = f" (held by {escape(t['held_by'])})" if t.get("held_by") else ""
        out.print(f"  task {t['index']:<5} job {t['id']:<8} {state_text(t['state'])}{held}")


@array_group.command("cancel")
@click.argument("array_id", type=JOB_ID)
@connection
def array_cancel(array_id: int, url: str, token: str | None) -> None:
    """Cancel every task of the array not yet finished."""
    with api_errors():
        a = client(url, token).cancel_array(array_id)
    click.echo(f"array {a['id']}: {array_states_text(a)}")


@array_group.command("hold")
@click.argument("array_id", type=JOB_ID)
@connection
def array_hold(array_id: int, url: str, token: str | None) -> None:
    """Hold every pending task of the array: they keep their places but do not start until released."""
    with api_errors():
        a = client(url, token).hold_array(array_id)
    click.echo(f"array {a['id']}: {array_states_text(a)}")


@array_group.command("release")
@click.argument("array_id", type=JOB_ID)
@connection
def array_release(array_id: int, url: str, token: str | None) -> None:
    """Release every held task of the array you may release (an admin's holds only an admin releases)."""
    with api_errors():
        a = client(url, token).release_array(array_id)
    click.echo(f"array {a['id']}: {array_states_text(a)}")


def priority_text(j: dict[str, Any]) -> str:
    """ "5 (class batch-high, not preemptible)", "0"."""
    notes = [f"class {j['priority_class']}"] if j.get("priority_class") else []
    if not j.get("preemptible", True):
        notes.append("not preemptible")
    return f"{j['priority']}" + (f" ({', '.join(notes)})" if notes else "")


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
    click.echo(f"default time limit {time_limit_text(res['default_s'])}, maximum {time_limit_text(res['max_s'])}")


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
        j = c.update_job(job_id, changes)
    said = []
    if "time_limit_s" in changes:
        said.append(f"time limit {time_limit_text(j['time_limit_s'])} (was {time_limit_text(before['time_limit_s'])})")
    if "priority" in changes:
        said.append(f"priority {j['priority']} (was {before['priority']})")
    click.echo(f"job {job_id}: {', '.join(said)}")


# ---- priority classes --------------------------------------------------------------------------------------------


@click.group("priority-class")
def priority_class() -> None:
    """Priority classes: named priorities jobs can take (admins define them)."""


@priority_class.command("create")
@click.argument("name")
@click.option("--value", type=Number("int"), required=True, help="The priority its jobs get (higher first).")
@click.option("--preemptible", type=click.BOOL, default=True, show_default=True,
              help="false: its jobs are never preempted (with teams, they then run only within their quota).")
@click.option("--description", help="What the class is for.")
@connection
def priority_class_create(name: str, value: int, preemptible: bool, description: str | None, url: str,
                          token: str | None) -> None:
    """Create priority class NAME."""
    with api_errors():
        c = client(url, token).create_priority_class(name, value, preemptible=preemptible, description=description)
    click.echo(f"created priority class {c['name']}: value {c['value']}, "
               f"{'preemptible' if c['preemptible'] else 'not preemptible'}")


@priority_class.command("list")
@click.option("--json", "as_json", is_flag=True)
@connection
def priority_class_list(as_json: bool, url: str, token: str | None) -> None:
    """Every priority class, highest value first."""
    with api_errors():
        classes = client(url, token).priority_classes()
    if as_json:
        print_json(classes)
        return
    if not classes:
        click.echo("no priority classes (an admin adds one with `corral priority-class create`)")
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "value", "preemptible", "description"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for c in classes:
        table.add_row(escape(c["name"]), str(c["value"]), "yes" if c["preemptible"] else "no",
                      escape(c["description"] or ""))
    console().print(table)


@priority_class.command("delete")
@click.argument("name")
@connection
def priority_class_delete(name: str, url: str, token: str | None) -> None:
    """Delete priority class NAME (jobs that named it keep its figures)."""
    with api_errors():
        c = client(url, token).delete_priority_class(name)
    click.echo(f"deleted priority class {c['name']}")


# ---- teams and users (admins) --------------------------------------------------------------------------------------


def limit_text(limit: float | None) -> str:
    return "none" if limit is None else gpus_text(limit)


# Who may rank how high (scheduler.live.priority_ceilings): a user's or a team's settings.
CEILING_OPTIONS = (("max_priority", "highest priority"), ("allow_nonpreemptible", "non-preemptible"),
                   ("priority_classes", "priority classes"))


def _clear_option(names: tuple[tuple[str, str], ...], where: str) -> Callable[[F], F]:
    return click.option("--clear", "clear", multiple=True, metavar="SETTING",
                        type=click.Choice([n.replace("_", "-") for n, _ in names]),
                        help=f"Remove a setting (back to {where}); repeat for several.")


def ceiling_options(f: F) -> F:
    """--max-priority, --allow-nonpreemptible/--no-allow-nonpreemptible and --priority-classes: a priority ceiling,
    as `user limits` and `team set` take it. The server checks the values and names the field."""
    f = click.option("--priority-classes", metavar="A,B",
                     help="Priority classes its jobs may name whatever their figures, comma-separated ('' for none).")(f)
    f = click.option("--allow-nonpreemptible/--no-allow-nonpreemptible", default=None,
                     help="Whether its jobs may say --not-preemptible themselves.")(f)
    f = click.option("--max-priority", type=Number("int"), metavar="N",
                     help="The highest priority its jobs may give (the built-in ceiling is 0).")(f)
    return f


def ceiling_text(c: dict[str, Any]) -> str:
    """A ceiling in a few words: `<= 0`, `<= 100; non-preemptible; classes serving, batch`."""
    parts = [f"<= {c['max_priority']}"]
    if c["allow_nonpreemptible"]:
        parts.append("non-preemptible")
    if c["priority_classes"]:
        parts.append("classes " + ", ".join(c["priority_classes"]))
    return "; ".join(parts)


@click.group()
def team() -> None:
    """Teams: quotas, borrowing limits and what each uses now (changes are for admins)."""


@team.command("create")
@click.argument("name")
@click.option("--quota", type=NON_NEGATIVE, required=True, help="GPUs the team may always use.")
@click.option("--borrow-limit", type=NON_NEGATIVE,
              help="GPUs it may borrow beyond its quota while others leave them idle (default: no limit).")
@connection
def team_create(name: str, quota: float, borrow_limit: float | None, url: str, token: str | None) -> None:
    """Create team NAME."""
    with api_errors():
        t = client(url, token).create_team(name, quota, borrow_limit)
    click.echo(f"created team {t['name']}: quota {gpus_text(t['quota_gpus'])} GPUs, borrow limit "
               f"{limit_text(t['borrow_limit_gpus'])}")


@team.command("list")
@click.option("--json", "as_json", is_flag=True)
@connection
def team_list(as_json: bool, url: str, token: str | None) -> None:
    """Every team: quota, borrowing limit, and now the GPUs in use, borrowed and lent, and its jobs."""
    with api_errors():
        res = client(url, token).teams()
    if as_json:
        print_json(res)
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "quota", "borrow limit", "in use", "borrowed", "lent", "pending", "running",
                "priority ceiling"):
        table.add_column(col, justify="left" if col in ("name", "priority ceiling") else "right")
    for t in res["teams"]:
        table.add_row(escape(t["name"]), gpus_text(t["quota_gpus"]), limit_text(t["borrow_limit_gpus"]),
                      gpus_text(t["in_use_gpus"]), gpus_text(t["borrowed_gpus"]), gpus_text(t["lent_gpus"]),
                      str(t["pending_jobs"]), str(t["running_jobs"]), escape(ceiling_text(t["priority_ceiling"])))
    out = console()
    out.print(table)
    quotas = sum(t["quota_gpus"] for t in res["teams"])
    cluster = res["cluster_gpus"]
    out.print(f"quotas add up to {gpus_text(quotas)} of {cluster} GPUs" if cluster else
              f"quotas add up to {gpus_text(quotas)} GPUs; the controller has not registered the cluster yet",
              style="dim")


@team.command("set")
@click.argument("name")
@click.option("--quota", type=NON_NEGATIVE, help="The new quota, in GPUs.")
@click.option("--borrow-limit", type=NON_NEGATIVE, help="The new borrowing limit, in GPUs.")
@click.option("--no-borrow-limit", is_flag=True, help="Remove the borrowing limit.")
@ceiling_options
@_clear_option(CEILING_OPTIONS, "the built-in one")
@connection
def team_set(name: str, quota: float | None, borrow_limit: float | None, no_borrow_limit: bool,
             clear: tuple[str, ...], url: str, token: str | None, **ceiling: Any) -> None:
    """Change team NAME's quota, borrowing limit or priority ceiling; what is not given stays.

    The ceiling applies to the team's members without a setting of their own (`corral user limits`): the highest
    priority their jobs may give, whether they may be non-preemptible, the classes they may name beyond that."""
    if borrow_limit is not None and no_borrow_limit:
        raise click.UsageError("give --borrow-limit or --no-borrow-limit, not both")
    changes: dict[str, Any] = _limit_changes(ceiling, clear)
    if quota is not None:
        changes["quota_gpus"] = quota
    if borrow_limit is not None or no_borrow_limit:
        changes["borrow_limit_gpus"] = borrow_limit  # None with --no-borrow-limit: no limit
    if not changes:
        raise click.UsageError("nothing to change: give --quota, --borrow-limit, --no-borrow-limit, --max-priority, "
                               "--[no-]allow-nonpreemptible, --priority-classes or --clear")
    with api_errors():
        t = client(url, token).update_team(name, changes)
    click.echo(f"team {t['name']}: quota {gpus_text(t['quota_gpus'])} GPUs, borrow limit "
               f"{limit_text(t['borrow_limit_gpus'])}, priority ceiling {ceiling_text(t['priority_ceiling'])}")


@team.command("delete")
@click.argument("name")
@connection
def team_delete(name: str, url: str, token: str | None) -> None:
    """Delete team NAME (refused while it has jobs pending or running); its users move to 'default'."""
    with api_errors():
        res = client(url, token).delete_team(name)
    click.echo(res["message"])


@click.group()
def user() -> None:
    """Users and their teams (admins). Users are created by `corral token create`."""


@user.command("list")
@click.option("--json", "as_json", is_flag=True)
@connection
def user_list(as_json: bool, url: str, token: str | None) -> None:
    """Every user: team, admin or not, and jobs pending or running."""
    with api_errors():
        users = client(url, token).users()
    if as_json:
        print_json(users)
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "team", "admin", "active jobs"):
        table.add_column(col, justify="right" if col == "active jobs" else "left")
    for u in users:
        table.add_row(escape(u["name"]), escape(u["team"]), "yes" if u["admin"] else "", str(u["active_jobs"]))
    console().print(table)


@user.command("set-team")
@click.argument("name")
@click.argument("team_name", metavar="TEAM")
@connection
def user_set_team(name: str, team_name: str, url: str, token: str | None) -> None:
    """Move user NAME to TEAM (refused while they have jobs pending or running)."""
    with api_errors():
        u = client(url, token).set_user_team(name, team_name)
    click.echo(f"user {u['name']} is in team {u['team']}")


# ---- fair use: per-user limits (admins) ----------------------------------------------------------------------------

LIMIT_OPTIONS = (("max_pending", "max pending"), ("submit_rate", "submissions/s"), ("submit_burst", "burst"),
                 ("whatif_per_min", "what-ifs/min"), ("request_rate", "requests/s"), ("request_burst", "request burst"))


def limit_options(f: F) -> F:
    """--max-pending, --submit-rate, --submit-burst, --whatif-per-min, --request-rate and --request-burst: what
    `user limits` and `limits` share (each adds its --clear). The server checks the values and names the field."""
    f = click.option("--request-burst", type=COUNT, help="API requests at once before the request rate applies.")(f)
    f = click.option("--request-rate", type=POSITIVE, metavar="PER_S",
                     help="API requests of any kind a second after the burst.")(f)
    f = click.option("--whatif-per-min", type=COUNT, help="What-if calls a minute.")(f)
    f = click.option("--submit-burst", type=COUNT, help="Submissions at once before the rate applies.")(f)
    f = click.option("--submit-rate", type=POSITIVE, metavar="PER_S", help="Submissions a second after the burst.")(f)
    f = click.option("--max-pending", type=COUNT, help="Jobs pending at once.")(f)
    return f


def _limit_changes(given: dict[str, Any], clear: tuple[str, ...]) -> dict[str, Any]:
    cleared = {c.replace("-", "_") for c in clear}
    both = sorted(n for n in cleared if given.get(n) is not None)
    if both:
        raise click.UsageError(f"--{both[0].replace('_', '-')} given and cleared: choose one")
    if given.get("priority_classes") is not None:
        given["priority_classes"] = [c.strip() for c in given["priority_classes"].split(",") if c.strip()]
    return {n: v for n, v in given.items() if v is not None} | dict.fromkeys(cleared)


def print_limits(res: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(res)
        return
    who = f"user {res['user']}" if res["user"] else "cluster-wide defaults"
    if res["exempt"]:
        who += " (an admin: exempt from every limit)"
    table = Table(box=None, header_style="bold", title=escape(who), title_justify="left")
    for col in ("limit", "value", "from"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for name, label in LIMIT_OPTIONS:
        table.add_row(label, f"{res[name]:g}", res["sources"][name])
    if "max_priority" in res:  # a user's: their priority ceiling
        table.add_row("highest priority", str(res["max_priority"]), res["sources"]["max_priority"])
        table.add_row("non-preemptible", "allowed" if res["allow_nonpreemptible"] else "no",
                      res["sources"]["allow_nonpreemptible"])
        table.add_row("priority classes", escape(", ".join(res["priority_classes"]) or "none"),
                      res["sources"]["priority_classes"])
    console().print(table)


@user.command("limits")
@click.argument("name")
@limit_options
@ceiling_options
@_clear_option(LIMIT_OPTIONS + CEILING_OPTIONS, "the cluster's default; a ceiling's, the team's")
@click.option("--json", "as_json", is_flag=True)
@connection
def user_limits(name: str, clear: tuple[str, ...], as_json: bool, url: str, token: str | None,
                **given: Any) -> None:
    """Show user NAME's fair-use limits and priority ceiling, or override them (admins); what is not given stays.

    The ceiling: the highest priority NAME's jobs may give, whether they may be non-preemptible, and the priority
    classes they may name beyond that; each setting NAME's own, else their team's (`corral team set`), else built
    in (0, no, none). Admins are exempt."""
    changes = _limit_changes(given, clear)
    with api_errors():
        c = client(url, token)
        res = c.set_limits(changes, name) if changes else c.limits(name)
    print_limits(res, as_json)


@click.command("limits")
@limit_options
@_clear_option(LIMIT_OPTIONS, "the built-in value")
@click.option("--json", "as_json", is_flag=True)
@connection
def limits(clear: tuple[str, ...], as_json: bool, url: str, token: str | None, **given: Any) -> None:
    """Show the cluster-wide fair-use limits, or change them (admins); users' overrides stay."""
    changes = _limit_changes(given, clear)
    with api_errors():
        c = client(url, token)
        res = c.set_limits(changes) if changes else c.limits()
    print_limits(res, as_json)


COMMANDS = (submit, resubmit, whatif, jobs, show, cancel, hold, release, requeue, update_job, logs, cluster, models,
            policy, token, team, user, limits, priority_class, time_limits, array_group)


def register_client_commands(group: click.Group) -> None:
    for command in COMMANDS:
        group.add_command(command)
