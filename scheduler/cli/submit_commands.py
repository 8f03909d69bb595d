"""`corral submit` and `corral resubmit`: a job's fields from flags, a JSON file or an earlier job, and what the
server answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

import corral.models as m
from scheduler.cli.client_io import api_errors, client, connection, print_json
from scheduler.cli.client_text import array_states_text, gpus_text
from scheduler.cli.params import COUNT, JOB_ID, NATURAL, NON_NEGATIVE, POSITIVE, Number
from scheduler.live import environments
from scheduler.live.job_states import DEFAULT_JOB_KIND, JobType, RestartPolicy

GPUS = Number("number", 0, min_open=True)  # whole GPUs or a share of one: the server checks which shares it takes
ELASTIC = ("min_gpus", "max_gpus", "sizes", "resize_pause_s")  # what makes a job elastic, and --gpus N takes away


class GpuRequest(click.ParamType):
    """`--gpus`: N, one size (whole GPUs or a share of one, as GPUS), or MIN-MAX, an elastic job's bounds: whole
    GPUs, MIN at least 1 and at most MAX. Converts to {num_gpus} or {min_gpus, max_gpus}. The server checks the
    rest (the largest count, the sizes), naming the field."""

    name = "gpus"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        text = str(value).strip()
        low, dash, high = text.partition("-")
        if not dash or not low:  # a number ("-2" too: GPUS refuses it as one)
            return {"num_gpus": GPUS.convert(text, param, ctx)}
        if not high:
            self.fail(f"write MIN-MAX with both ends (2-8), got {text!r}", param, ctx)
        try:
            lo, hi = int(low), int(high)
        except ValueError:
            self.fail(f"an elastic job's bounds are whole GPUs (MIN-MAX, e.g. 2-8), got {text!r}", param, ctx)
        if lo < 1:
            self.fail(f"the minimum is at least 1 GPU, got {text!r}", param, ctx)
        if lo > hi:
            self.fail(f"the minimum ({lo}) is above the maximum ({hi}): write MIN-MAX, got {text!r}", param, ctx)
        return {"min_gpus": lo, "max_gpus": hi}

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N|MIN-MAX"


def _sizes(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    """--sizes 2,4,8: whole GPU counts separated by commas, taken in increasing order."""
    if value is None:
        return None
    try:
        sizes = sorted({int(size) for size in value.split(",")})
    except ValueError:
        raise click.BadParameter(f"give whole GPU counts separated by commas (2,4,8), got {value!r}") from None
    if sizes[0] < 1:
        raise click.BadParameter(f"each size is at least 1 GPU, got {value!r}")
    return sizes


def _gpu_fields(spec: dict[str, Any], flags: dict[str, Any]) -> None:
    """Put --gpus and the elastic flags into `spec` (a --file's fields): --gpus N makes a job of one size, whatever
    the file said; --gpus MIN-MAX an elastic one, its duration measured at --ref-gpus (default MIN)."""
    gpus, ref = flags.pop("gpus"), flags.pop("ref_gpus")
    if gpus is not None and "num_gpus" in gpus:
        for hint, given in (("--ref-gpus", ref), ("--sizes", flags["sizes"]),
                            ("--resize-pause", flags["resize_pause_s"])):
            if given is not None:
                raise click.BadParameter("only for an elastic job (--gpus MIN-MAX); --gpus N is the job's one size",
                                         param_hint=hint)
        for name in ELASTIC:
            spec.pop(name, None)
    spec |= gpus or {}
    if ref is None and gpus is not None and "min_gpus" in gpus:
        ref = gpus["min_gpus"]
    if ref is not None:
        low, high = spec.get("min_gpus"), spec.get("max_gpus")
        if not isinstance(low, int) or not isinstance(high, int):
            raise click.BadParameter("only for an elastic job (--gpus MIN-MAX)", param_hint="--ref-gpus")
        if not low <= ref <= high:
            raise click.BadParameter(f"must be within the job's sizes, {low}-{high}, got {ref}", param_hint="--ref-gpus")
        spec["num_gpus"] = ref


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


def _constraint_fields(spec: dict[str, Any], flags: dict[str, Any]) -> None:
    """--constraint, --nodelist and --exclude (Slurm's) as the submission's `constraints`, each part given replacing
    that part of --file's; the core's parsers (`scheduler.core.constraints`), so the server reads what was meant."""
    from scheduler.core.constraints import ConstraintError, from_text

    texts = {name: flags.pop(name) for name in ("constraint", "nodelist", "exclude")}
    if all(text is None for text in texts.values()):
        return
    try:
        made = from_text(texts["constraint"] or "", texts["nodelist"] or "", texts["exclude"] or "")
    except ConstraintError as exc:
        option = {"gpu_type": "--constraint", "labels": "--constraint", "nodes": "--nodelist"}.get(exc.field,
                                                                                                 "--exclude")
        raise click.BadParameter(exc.why, param_hint=f"'{option}'") from None
    given = made.to_json() if made is not None else {}
    parts = {"constraint": ("gpu_type", "labels"), "nodelist": ("nodes",), "exclude": ("exclude",)}
    merged = dict(spec.get("constraints") or {})
    for name, text in texts.items():
        if text is not None:
            for part in parts[name]:
                merged.pop(part, None)
                if part in given:
                    merged[part] = given[part]
    spec["constraints"] = merged or None


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


@click.command()
@click.option("--file", "spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A JOB.json with the submission's fields; the flags below override it.")
@click.option("--name", help="The job's name.")
@click.option("--kind", type=click.Choice([k.value for k in JobType]),
              help="emulated (runs for the time the contention model predicts) or command (runs --entrypoint); "
                   f"default: --file's, else {DEFAULT_JOB_KIND.value}.")
@click.option("--model", help="A model of the catalog (GET /api/v1/models); a command job may leave it out and gets the "
              "generic profile, refined from measured runs of jobs alike.")
@click.option("--gpus", "gpus", type=GpuRequest(),
              help="Whole GPUs (1, 2, ...) or a share of one (0.5); or MIN-MAX (2-8): an elastic job, which runs on "
                   "any whole number of GPUs from MIN to MAX and may be resized while it runs.")
@click.option("--ref-gpus", "ref_gpus", type=COUNT,
              help="Elastic jobs: the size --duration is measured at, from MIN to MAX [default: MIN].")
@click.option("--sizes", "sizes", callback=_sizes, metavar="N,N,...",
              help="Elastic jobs: the only sizes it may run at (2,4,8), from MIN to MAX and including --ref-gpus "
                   "[default: any].")
@click.option("--resize-pause", "resize_pause_s", type=NON_NEGATIVE, metavar="SECONDS",
              help="Elastic jobs: seconds a resize stops it for, a checkpoint and a restart [default: the model's, "
                   "measured on a GPU: about 10 s plus 0.3 s per GB of the job's memory].")
@click.option("--duration", "duration_s", type=POSITIVE, help="Seconds: the run time (emulated) or an estimate.")
@click.option("--entrypoint", help="The shell command (command jobs).")
@click.option("--workdir", help="Working directory of the command.")
@click.option("--env", "env", multiple=True, callback=_env, metavar="K=V", help="Environment variable (repeatable).")
@click.option("--pip", "pip", multiple=True, metavar="REQUIREMENT",
              help="Command jobs: a package its environment has, e.g. 'numpy>=1.26' (repeatable; docs/environments.md).")
@click.option("--venv", metavar="NAME", help="Command jobs: a virtual environment the nodes' operator named.")
@click.option("--image", metavar="IMAGE", help="Command jobs: a container image to run in (podman or Apptainer).")
@click.option("--working-dir", "working_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Command jobs: a folder uploaded with the job, where its command runs.")
@click.option("--priority", type=Number("int"), help="Higher first; a job preempts only lower priorities [default: 0].")
@click.option("--preemptible/--not-preemptible", default=None,
              help="Whether the job may be preempted [default: preemptible].")
@click.option("--priority-class", help="A priority class (`corral priority-class list`): its value and preemptibility.")
@click.option("--depends-on", "depends_on", callback=_depends_on, metavar="afterok:ID[:ID][,afterany:ID]",
              help="Run only once these jobs succeed (afterok), end (afterany) or fail (afternotok).")
@click.option("--array", "array", callback=_array, metavar="N[%K]|0-LAST[%K]",
              help="Submit N tasks (CORRAL_ARRAY_INDEX 0..N-1), at most K running at once.")
@click.option("--constraint", metavar="FEATURE[&FEATURE]", help="Where it may run (Slurm's --constraint): node labels "
              "KEY=VALUE joined by '&' (gpu=h100&zone=a), or a GPU type (h100, A100-80GB).")
@click.option("--nodelist", metavar="NODE[,NODE]", help="Only these nodes, by name (Slurm's --nodelist).")
@click.option("--exclude", metavar="NODE[,NODE]", help="Never these nodes, by name (Slurm's --exclude).")
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
    _environment(spec, flags)
    _gpu_fields(spec, flags)
    _constraint_fields(spec, flags)
    spec |= {k: v for k, v in flags.items() if v is not None}
    if env:
        spec["env"] = {**(spec.get("env") or {}), **env}
    # Not a flag default: that would override the kind in --file. The server has the same default.
    spec.setdefault("kind", DEFAULT_JOB_KIND.value)
    with api_errors():
        job, created = client(url, token).submit_once(spec)
    _submitted(job, created, as_json, "submitted job")
    if job.webhook and not as_json:
        click.echo(f"webhook {job.webhook.id}, secret {job.webhook.secret} (shown only now: keep it to verify the "
                   "requests' signatures)")


def _environment(spec: dict[str, Any], flags: dict[str, Any]) -> None:
    """--pip, --venv, --image and --working-dir into the job's `environment` (over --file's)."""
    given = {"pip": list(flags.pop("pip")) or None, "venv": flags.pop("venv"), "image": flags.pop("image")}
    folder = flags.pop("working_dir")
    if folder is not None:
        try:
            given["working_dir"] = environments.archive_folder(folder)
        except environments.EnvRefused as exc:
            raise click.BadParameter(str(exc), param_hint="--working-dir") from None
    given = {k: v for k, v in given.items() if v is not None}
    if given:
        spec["environment"] = {**(spec.get("environment") or {}), **given}


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
        job, created = client(url, token).resubmit_once(job_id, fields)
    _submitted(job, created, as_json, f"resubmitted job {job_id} as job")


def _submitted(job: m.Job, created: bool, as_json: bool, what: str) -> None:
    if as_json:
        print_json(job)
    elif created and job.array and job.array.tasks:
        a, tasks = job.array, job.array.tasks
        click.echo(f"{what.replace('job', 'array')} {a.id}: jobs {tasks[0].id} to {tasks[-1].id} "
                   f"({array_states_text(a)})")
    elif created:
        click.echo(f"{what} {job.id} ({job.state})")
        if job.requested_gpus is not None:  # an elastic job admission brought down (`requested_gpus`)
            click.echo(f"stored at {gpus_text(job.num_gpus or 0)} GPUs: the cluster can never hold the "
                       f"{job.requested_gpus} it asked for (`corral show {job.id}`)")
    else:
        click.echo(f"job {job.id} was already submitted with this client token ({job.state})")

SUBMIT_COMMANDS = [submit, resubmit]
