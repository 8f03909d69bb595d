"""The service and its nodes: `corral serve`, `corral ray-token`, `corral node-resources` and `corral node start | health
| drain | resume`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from scheduler.cli.client_io import api_errors, client, connection
from scheduler.cli.params import Number
from scheduler.core.errors import SpecError
from scheduler.live.runs import START_STRIKES, START_TIMEOUT_S


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the API listens on.")
@click.option("--port", default=8080, show_default=True, type=Number("int", 0, 65535),
              help="API port (0: any free one).")
@click.option("--nodes", default=4, show_default=True, type=Number("int", 1, 1024),
              help="Virtual nodes of the local Ray cluster (ignored with --ray-address).")
@click.option("--gpus-per-node", default=8, show_default=True, type=Number("int", 1, 64),
              help="Virtual GPUs per node of the local Ray cluster.")
@click.option("--preset", default="dgx-a100", show_default=True,
              help="Server model the contention model assumes for a node that does not say which it is (dgx-a100, "
                   "pcie-v100, pcie-t4); a node started with `corral node start` or `node-resources --preset` "
                   "brings its own.")
@click.option("--fabric", default=None, metavar="NAME",
              help="The network above the servers the contention model sees: a fabric preset (fat-tree, "
                   "fat-tree-3:1, rail-optimised; docs/contention-model.md), nodes in the racks they name or filling "
                   "its leaf groups in order; 'none' for one uplink per rack. The store records it: default, keep the "
                   "store's (none on a new store).")
@click.option("--ray-address", default=None,
              help="Join this Ray cluster instead of starting a local one (replicas must all join the same one).")
@click.option("--policy", default=None,
              help="Make this policy active (default: keep the store's active one; rl:default on a new store).")
@click.option("--tick", default=0.5, show_default=True, type=Number("float", 0.05, 60),
              help="Seconds between the controller's periodic passes (events wake it sooner).")
@click.option("--job-user-pattern", default=None, metavar="PATTERN",
              help="Run each user's command jobs as an OS account of their own, made on first use, e.g. "
                   "'corral-{user}' ({user}: the Corral user's name, {id}: its number). Needs root.")
@click.option("--job-user-map", default=None, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              metavar="FILE", help="Run command jobs as the OS accounts a YAML file maps Corral users to "
                                   "(`alice: alice`). Needs root.")
@click.option("--job-user", default=None, metavar="USER",
              help="Run every command job as this one unprivileged OS user (isolates the server, not users from "
                   "each other). Needs root.")
@click.option("--command-jobs", type=click.Choice(["isolated", "admins", "everyone"]), default="isolated",
              show_default=True,
              help="Who may submit command jobs. isolated: admins, and other users when their jobs run as an OS "
                   "account that is not the server's; admins: admins only; everyone: every user, even as the "
                   "server's own account (not as root).")
@click.option("--show-others-jobs", is_flag=True,
              help="Show every user the names and users of other users' jobs on the cluster map (GET /cluster); by "
                   "default only admins see them, others see each job's id, share and team.")
@click.option("--log-limit-mb", default=64.0, show_default=True, type=Number("float", 0.01, 1e6),
              help="What one rank of a command job may write to its log in one run; the rest is dropped, with a note.")
@click.option("--allow-unauthenticated-ray", is_flag=True,
              help="Join a --ray-address cluster that takes no token (anyone who reaches it runs code as its "
                   "workers' user; refused without this flag).")
@click.option("--fair-share-half-life", "half_life_h", default=168.0, show_default=True,
              type=Number("float", 0.01, 1e6), metavar="HOURS",
              help="Half-life of the teams' fair-share usage: how fast past GPU use is forgotten (Slurm's "
                   "PriorityDecayHalfLife; 168 h is its default, 7 days).")
@click.option("--on-gpu-fault", type=click.Choice(["requeue", "keep"]), default="requeue", show_default=True,
              help="What the jobs on a GPU its node agent reports faulty (XID, ECC, unreachable, over temperature) "
                   "do: requeue (checkpointed and started elsewhere, spending no restart) or keep running. Either "
                   "way no new job starts on it.")
@click.option("--drain-timeout", default=0.0, show_default=True, type=Number("float", 0, 7 * 24 * 3600),
              metavar="SECONDS",
              help="At SIGTERM or Ctrl-C, stop starting jobs and give the running ones this long to end on their own "
                   "before the rest are checkpointed and requeued (an orderly upgrade; a second signal stops "
                   "waiting). Requeued jobs spend no restart and resume from their checkpoints at the next start.")
@click.option("--webhook-allow", "webhook_allow", multiple=True, metavar="LIST",
              help="Where users' webhooks may call, separated by commas (repeatable): IP addresses, CIDR blocks "
                   "(10.0.0.0/8), host names (hooks.example.com) and domains (.example.com), each with an optional "
                   ":PORT or :FIRST-LAST (10.0.0.5:8443, 10.0.0.0/8:8000-8999); without one, ports 80 and 443. This "
                   "server's own ports (API, database, Ray) are never called. Without it webhooks are off. See "
                   "docs/webhooks.md.")
@click.option("--reserve-after", "reserve_after", type=Number("float", 0, 365 * 24 * 3600), default=None,
              metavar="SECONDS",
              help="A whole-GPU job that has waited this long holds a reservation: GPUs are kept for it as they free, "
                   "and other jobs start on them only if their time limits end first (EASY backfill). Default: no "
                   "reservations by waiting.")
@click.option("--reserve-share", "reserve_share", type=Number("float", 0, 1, min_open=True), default=None,
              metavar="F",
              help="A job asking for at least this share of the cluster's GPUs holds a reservation at once. Default: "
                   "no reservations by size.")
@click.option("--resize-interval", "resize_interval", type=Number("float", 0, 7 * 24 * 3600), default=None,
              metavar="SECONDS",
              help="The least time between two resizes of an elastic job (a resize costs the job a checkpoint and a "
                   "restart; see docs/elastic.md). Default: 600.")
@click.option("--start-timeout", "start_timeout", type=Number("float", 1, 24 * 3600), default=START_TIMEOUT_S,
              show_default=True, metavar="SECONDS",
              help="A job whose workers Ray has not started this long after it was placed is taken back: requeued "
                   "elsewhere without spending a restart, its nodes held out for a minute (Slurm's "
                   "BatchStartTimeout).")
@click.option("--drain-after", "drain_after", type=Number("int", 0, 1000), default=START_STRIKES, show_default=True,
              metavar="JOBS",
              help="Drain a node (as `corral node drain` would, by `controller`, with why) once the workers of this "
                   "many different jobs placed there did not start within --start-timeout, all within an hour; its "
                   "running jobs may finish. 0: never.")
@click.option("--lease", "lease", default=4.0, show_default=True, type=Number("float", 0.5, 3600), metavar="SECONDS",
              help="Replicas on PostgreSQL: the controller lease's term. A standby takes over this long (at most) "
                   "after the leader dies; a leader that cannot renew it for most of a term stands down. Longer where "
                   "the database or the hosts may stall for seconds (docs/deployment.md).")
@click.option("--lease-renew", "lease_renew", default=None, type=Number("float", 0.05, 3600), metavar="SECONDS",
              help="How often the leader renews the lease. Default: a quarter of --lease.")
@click.option("--threads", default=16, show_default=True, type=Number("int", 1, 1024),
              help="Threads answering API requests (in each API process).")
@click.option("--api-workers", "api_workers", default=1, show_default=True, type=Number("int", 1, 64), metavar="N",
              help="Processes answering API requests. 1: the controller's own process. More: N processes of their "
                   "own beside it, sharing its port (more submissions a second on a machine with cores to spare); "
                   "per-user rate limits then count in each process, as they do per replica.")
@click.option("--idle-timeout", "idle_timeout", default=10.0, show_default=True, type=Number("float", 0.1, 3600),
              metavar="SECONDS", help="Close a connection that sends and receives nothing this long.")
@click.option("--request-timeout", "request_timeout", default=15.0, show_default=True,
              type=Number("float", 0.1, 3600), metavar="SECONDS",
              help="Close a connection whose request (headers and body) has not fully arrived this long after its "
                   "first byte (slow clients, slowloris).")
@click.option("--max-connections", "max_connections", default=4096, show_default=True,
              type=Number("int", 1, 1_000_000),
              help="Open API connections in all (the open-file limit is raised to fit, up to its hard limit).")
@click.option("--max-connections-per-address", "max_per_address", default=64, show_default=True,
              type=Number("int", 0, 1_000_000), metavar="N",
              help="Open API connections from one client address; the next is answered 503 and closed. 0: no cap "
                   "(behind a reverse proxy, whose connections all come from one address, let it cap instead).")
@click.option("--max-requests-per-user", "max_in_flight", default=8, show_default=True,
              type=Number("int", 1, 1_000_000), metavar="N",
              help="API requests one user (not an admin) may have in progress at once; beyond, 429. Keep it below "
                   "--threads so no one user holds every thread.")
def serve(host: str, port: int, nodes: int, gpus_per_node: int, preset: str, fabric: str | None,
          ray_address: str | None,
          policy: str | None, tick: float, job_user_pattern: str | None, job_user_map: Path | None,
          job_user: str | None, command_jobs: str, show_others_jobs: bool, log_limit_mb: float,
          allow_unauthenticated_ray: bool,
          half_life_h: float, on_gpu_fault: str, drain_timeout: float, webhook_allow: tuple[str, ...],
          reserve_after: float | None, reserve_share: float | None, resize_interval: float | None, start_timeout: float,
          drain_after: int,
          lease: float, lease_renew: float | None, threads: int, idle_timeout: float, request_timeout: float,
          max_connections: int, max_per_address: int, max_in_flight: int, api_workers: int) -> None:
    """Run the live service: controller on Ray, job store, REST API (SQLite under CORRAL_HOME unless DATABASE_URL).

    Two or more replicas (high availability) need PostgreSQL: start each with the same DATABASE_URL and the same
    --ray-address. One controller leads through a lease in the database (--lease, 4 s, renewed every second); the
    others serve the API and stand by, and one takes over within about 5 s if the leader dies. With SQLite the store
    belongs to one process, which always leads: a second `corral serve` on the same store refuses to start, naming
    the first.

    Stopping (SIGTERM, Ctrl-C) costs the jobs nothing: with a local Ray cluster, each running job is checkpointed and
    requeued without spending a restart, and resumes at the next start; with --ray-address the workers keep running
    and the next controller adopts them.
    """
    from scheduler.cli.serve import ServeConfig, ServeError
    from scheduler.cli.serve import serve as run_service
    from scheduler.live.leader import timings

    try:
        timings(lease, lease_renew)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--lease-renew") from None
    try:
        run_service(ServeConfig(host=host, port=port, nodes=nodes, gpus_per_node=gpus_per_node, preset=preset,
                                fabric=fabric, ray_address=ray_address, policy=policy, tick_s=tick, job_user=job_user,
                                job_user_pattern=job_user_pattern, job_user_map=job_user_map,
                                command_jobs=command_jobs, show_others_jobs=show_others_jobs,
                                log_limit_mb=log_limit_mb,
                                allow_unauthenticated_ray=allow_unauthenticated_ray, half_life_s=half_life_h * 3600.0,
                                on_gpu_fault=on_gpu_fault, drain_timeout_s=drain_timeout,
                                webhook_allow=webhook_allow, reserve_after_s=reserve_after,
                                reserve_share=reserve_share, start_timeout_s=start_timeout,
                                drain_after=drain_after, lease_s=lease, lease_renew_s=lease_renew, threads=threads,
                                idle_timeout_s=idle_timeout,
                                request_timeout_s=request_timeout, max_connections=max_connections,
                                max_per_address=max_per_address, max_in_flight=max_in_flight,
                                api_workers=api_workers,
                                **({} if resize_interval is None else {"resize_interval_s": resize_interval})))
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    except ServeError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("ray-token")
@click.option("--print", "show", is_flag=True,
              help="Print the token itself, to copy to another machine's CORRAL_HOME/ray-token over a secure channel.")
def ray_token_cmd(show: bool) -> None:
    """Make the Ray cluster's token in CORRAL_HOME/ray-token (mode 0600) if there is none yet, and print its path.

    `corral serve` makes it on its own; a cluster of several machines needs the same token on every Ray node
    (`corral node start` and `ray start` read it there, or where RAY_AUTH_TOKEN_PATH says)."""
    from scheduler.live import ray_auth

    path = ray_auth.ensure_token()
    click.echo(path.read_text().strip() if show else str(path))


RACK_HELP = ("The rack this node sits in (1 to 64 letters, digits, '.', '_' or '-'): nodes naming one rack share it, "
             "and topology-aware policies keep a gang in one rack when one holds it. Default: none (the node fills "
             "racks in order).")
LABEL_HELP = ("A label this node carries, KEY=VALUE (repeat for more; letters, digits and ._/- each): jobs' "
              "constraints select nodes by them (`corral submit --constraint zone=a`) and by the labels its hardware "
              "gives it (gpu=h100, interconnect=nvlink).")


def _parse_labels(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    """--label KEY=VALUE, repeated, as a dict (the core's rule for a label: `scheduler.core.constraints`)."""
    from scheduler.core.constraints import ConstraintError, parse_label

    labels: dict[str, str] = {}
    for text in value:
        try:
            key, val = parse_label(text, "--label")
        except ConstraintError as exc:
            raise click.BadParameter(exc.why, ctx, param) from None
        labels[key] = val
    return labels


@click.command("node-resources")
@click.option("--name", required=True, help="The Corral node name this Ray node will be (unique in the cluster).")
@click.option("--gpus", required=True, type=Number("int", 1, 64), help="GPUs on this node.")
@click.option("--preset", default=None, help="The server model this node is (dgx-a100, pcie-v100, pcie-t4): the "
              "controller models it so. Default: none, and the controller models it as `corral serve --preset`.")
@click.option("--rack", default=None, help=RACK_HELP)
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", callback=_parse_labels, help=LABEL_HELP)
def node_resources_cmd(name: str, gpus: int, preset: str | None, rack: str | None, labels: dict[str, str]) -> None:
    """Print the JSON for `ray start --resources` that makes a Ray node a Corral node."""
    from scheduler.live.cluster import node_type
    from scheduler.live.runs import check_rack, node_resources

    if preset is not None:
        try:
            node_type(preset, gpus)
        except SpecError as exc:
            raise click.BadParameter(str(exc), param_hint="'--preset'") from None
    if rack is not None:
        try:
            check_rack(rack)
        except SpecError as exc:
            raise click.BadParameter(str(exc), param_hint="'--rack'") from None
    click.echo(json.dumps(node_resources(name, gpus, preset, rack, labels)))



@click.group("node")
def node_group() -> None:
    """Run this machine as a Corral node (the node agent) and read its state; drain and resume nodes (admins)."""


def _parse_gpus(ctx: click.Context, param: click.Parameter, value: str) -> int | None:
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= 64:
        raise click.BadParameter("give auto or a number of GPUs from 1 to 64", ctx, param)
    return n


def _api_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from corral.errors import CorralError
    from corral.transport import check_url

    if value is None:
        return None
    try:
        return check_url(value)
    except CorralError as exc:
        raise click.BadParameter(str(exc).replace("(CORRAL_URL or --url) ", ""), ctx, param) from None


@node_group.command("start", context_settings={"ignore_unknown_options": True})
@click.option("--address", required=True, metavar="HOST:PORT", help="The Ray head's address (its GCS port).")
@click.option("--name", default=None, help="Corral node name, unique in the cluster [default: the short hostname].")
@click.option("--gpus", "gpus", default="auto", show_default=True, callback=_parse_gpus, metavar="auto|N",
              help="auto: discover the GPUs through NVML; N: offer N virtual GPUs (no driver needed; give --preset).")
@click.option("--preset", default=None, help="Server model (dgx-a100, pcie-v100, pcie-t4): with --gpus N, what the "
              "virtual GPUs are; with auto, overrides the model NVML's names match.")
@click.option("--rack", default=None, help=RACK_HELP)
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", callback=_parse_labels, help=LABEL_HELP)
@click.option("--mps-control", default=None, metavar="PATH",
              help="The CUDA MPS control program [default: nvidia-cuda-mps-control on PATH; none: no MPS].")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The agent's folder: MPS pipes and logs, health.json [default: CORRAL_HOME/nodes/NAME].")
@click.option("--health-interval", default=10.0, show_default=True, type=Number("float", 0.2, 3600),
              help="Seconds between GPU health readings.")
@click.option("--api", default=None, metavar="URL", callback=_api_url,
              help="Push each GPU health reading to the Corral API at URL (e.g. http://corral:8080), with the admin "
                   "token in CORRAL_TOKEN; the cluster map shows it.")
@click.option("--dry-run", is_flag=True, help="Discover and print what the node would join with, then exit.")
@click.option("--allow-unauthenticated-ray", is_flag=True,
              help="Join a Ray cluster that takes no token (anyone who reaches it runs code on this node).")
@click.argument("ray_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- RAY_START_ARGS]...")
def node_start_cmd(address: str, name: str | None, gpus: int | None, preset: str | None, rack: str | None,
                   labels: dict[str, str], mps_control: str | None, state_dir: Path | None, health_interval: float, api: str | None, dry_run: bool,
                   allow_unauthenticated_ray: bool, ray_args: tuple[str, ...]) -> None:
    """Join the Ray cluster at ADDRESS as a Corral node, in the foreground until stopped (like `ray start --block`):
    discover the GPUs (NVML), run `ray start` with Corral's resources for them, start CUDA MPS while fractional jobs
    run here, and write GPU health (and push it to the API with --api). SIGTERM or SIGINT stops Ray; the command
    exits with Ray's status."""
    from scheduler.live.node.daemon import TOKEN_ENV, AgentError, AgentOptions, NodeAgent, default_name

    opts = AgentOptions(address=address, name=name or default_name(), gpus=gpus, preset=preset, rack=rack,
                        labels=tuple(sorted(labels.items())), node_dir=state_dir, mps_control=mps_control, ray_args=ray_args, health_interval_s=health_interval,
                        dry_run=dry_run, api=api, api_token=os.environ.get(TOKEN_ENV) or None,
                        allow_unauthenticated_ray=allow_unauthenticated_ray)
    try:
        code = NodeAgent(opts).run()
    except AgentError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(code)


@node_group.command("health")
@click.option("--name", default=None, help="The node's name [default: the short hostname].")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The agent's folder [default: CORRAL_HOME/nodes/NAME].")
def node_health_cmd(name: str | None, state_dir: Path | None) -> None:
    """Print the node's last GPU health report (health.json, written by `corral node start`)."""
    from scheduler.core.paths import corral_home
    from scheduler.live.node.daemon import default_name
    from scheduler.live.node.health import read_health

    folder = state_dir or corral_home() / "nodes" / (name or default_name())
    try:
        click.echo(json.dumps(read_health(folder), indent=1))
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"no health report in {folder}: {exc}") from None


@node_group.command("drain")
@click.argument("name")
@click.option("--reason", default="", help="Why (shown on the cluster map and in the reasons of the jobs it moves).")
@click.option("--now", is_flag=True,
              help="Also checkpoint and requeue the jobs running there now (they spend no restart); without it they "
                   "finish and nothing new starts there (Slurm's DRAIN).")
@connection
def node_drain_cmd(name: str, reason: str, now: bool, url: str, token: str | None) -> None:
    """Take node NAME out of service for maintenance (admins): no new job starts there until `corral node resume`."""
    with api_errors():
        node = client(url, token).drain_node(name, reason=reason, now=now)
    what = "its jobs are being checkpointed and requeued" if node.drain and node.drain.now else \
        "its running jobs may finish"
    click.echo(f"node {name} drained: nothing new starts there; {what}")


@node_group.command("resume")
@click.argument("name")
@connection
def node_resume_cmd(name: str, url: str, token: str | None) -> None:
    """Put drained node NAME back in service (admins): it takes new jobs again."""
    with api_errors():
        client(url, token).resume_node(name)
    click.echo(f"node {name} resumed: it takes new jobs again")


NODE_COMMANDS = [serve, ray_token_cmd, node_resources_cmd, node_group]
