"""`corral simulate`: policies replayed on a trace in the simulator, their metrics side by side, a JCT plot."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from scheduler.cli.params import COUNT, SEED, Number, OutPath
from scheduler.core.errors import SpecError

if TYPE_CHECKING:
    from scheduler.core.model import Cluster
    from scheduler.core.simulator import SimResult
    from scheduler.core.traces import Trace
from scheduler.cli.params import parse_cluster_option
from scheduler.cli.policy_options import build_policies, guarded_policies, parse_policies
from scheduler.cli.tables import METRIC_COLUMNS, duration_unit, format_duration, table_cell


@click.command()
@click.option("--trace", "trace_path", required=True, metavar="PATH",
              help="Trace file (Corral CSV, Philly or Alibaba openb), or synthetic:N[,iat=S,frac=F,inference=F].")
@click.option("--format", "trace_format", type=click.Choice(["auto", "corral", "philly", "alibaba"]),
              default="auto", show_default=True, help="Trace format.")
@click.option("--limit", type=COUNT, default=None, help="Replay only the first N jobs.")
@click.option("--cluster", "cluster", required=True, callback=parse_cluster_option, metavar="SPEC",
              help="PRESET:NODES[,PRESET:NODES] (presets: dgx-a100, pcie-v100, pcie-t4) or a cluster YAML file.")
@click.option("--policy", "policies", default="fifo,tiresias,contention-greedy", show_default=True,
              callback=parse_policies, metavar="P1,P2,...", help="Policies to compare.")
@click.option("--no-contention", is_flag=True, help="Every job runs at its isolated speed wherever it is placed.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed for model assignment and random policies.")
@click.option("--json", "json_out", type=OutPath(), default=None,
              help="Write the metrics as JSON here.")
@click.option("--plot", "plot_out", type=OutPath(), default=None,
              help="Write a JCT CDF per policy as PNG here.")
@click.option("--teams", "teams_path", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Teams YAML (name, quota_gpus, borrow_limit_gpus; half_life_s): every policy runs inside the "
                   "tenancy frame, and the report shows each team's share.")
@click.option("--time-limits", "time_limits", type=Number("float", 0, 1000, min_open=True), default=None,
              metavar="F", help="Give each job without a time limit one of F times its isolated duration (a run that "
                                "reaches it is stopped and counts as timed out).")
@click.option("--reserve-after", "reserve_after", type=Number("float", 0, 365 * 24 * 3600), default=None,
              metavar="SECONDS",
              help="A whole-GPU job waiting this long gets a reservation; others backfill around it (EASY backfill).")
@click.option("--reserve-share", "reserve_share", type=Number("float", 0, 1, min_open=True), default=None,
              metavar="F", help="A job asking for at least this share of the cluster's GPUs gets a reservation.")
@click.option("--elastic", "elastic", type=Number("float", 0, 1), default=None, metavar="F",
              help="Make a share F of the trace's whole-GPU training jobs elastic, from half to twice their size, "
                   "drawn from --seed (docs/elastic.md). A synthetic trace takes its own: synthetic:N,elastic=F.")
@click.option("--resize-interval", "resize_interval", type=Number("float", 0, 7 * 24 * 3600), default=None,
              metavar="SECONDS", help="The least time between two resizes of an elastic job (default: 600).")
@click.option("--mps-one-user", "mps_one_user", is_flag=True,
              help="The shares of one node go to one user's jobs at a time, as CUDA MPS runs them when jobs run as "
                   "per-user OS accounts (the live service's rule with --job-user-pattern or --job-user-map).")
@click.option("--guard", "guard", default=None, metavar="auto|P1,P2,...",
              help="Run each policy under the guard (docs/learned-policies.md): every 50 arrivals it replays them "
                   "under the policy and under the fallbacks (auto: tiresias, gittins, fifo-backfill, "
                   "contention-greedy) and hands the decisions to the best fallback while the policy is losing by "
                   "over 2% with 95% confidence.")
def simulate(
    trace_path: str, trace_format: str, limit: int | None, cluster: Cluster, policies: list[str],
    no_contention: bool, seed: int, json_out: Path | None, plot_out: Path | None, teams_path: Path | None,
    time_limits: float | None, reserve_after: float | None, reserve_share: float | None, mps_one_user: bool,
    elastic: float | None, resize_interval: float | None, guard: str | None,
) -> None:
    """Replay a trace on a simulated cluster under each policy and compare them."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from scheduler.core.elastic import RESIZE_INTERVAL_S
    from scheduler.core.simulator import SimulationError, Simulator
    from scheduler.core.traces import load_trace

    # Piped output (CI logs, files) has no terminal width; use a wide one rather than fold the table.
    console = Console(width=None if sys.stdout.isatty() else 160)
    built = build_policies(policies, seed)
    if guard is not None:
        built = guarded_policies(policies, guard, seed)
    try:
        trace = load_trace(trace_path, format=trace_format, limit=limit, seed=seed)
    except SpecError as exc:
        raise click.ClickException(str(exc)) from None
    if not trace.jobs:
        raise click.ClickException(f"{trace_path}: no jobs to replay (skipped: {trace.skipped or 'none'})")
    from scheduler.core.reservations import ReservationRule, with_time_limits

    jobs = trace.jobs if time_limits is None else with_time_limits(trace.jobs, time_limits)
    if elastic is not None:
        from scheduler.core.elastic import elastic_window

        jobs = elastic_window(jobs, elastic, seed)
        console.print(f"elastic: {sum(j.elastic for j in jobs)} of {len(jobs)} jobs may run at half to twice their "
                      f"size ({elastic:g} of the whole-GPU training jobs, drawn from seed {seed})")
    rule = None if reserve_after is None and reserve_share is None else ReservationRule(reserve_after, reserve_share)
    teams = None
    if teams_path is not None:
        from scheduler.core.tenancy import Teams

        try:
            teams = Teams.load(teams_path, cluster_gpus=cluster.num_gpus)
            teams.check_jobs(trace.jobs, where=trace_path)
        except SpecError as exc:
            raise click.BadParameter(str(exc), param_hint="'--teams'") from None
    skipped = ", ".join(f"{n} {why}" for why, n in trace.skipped.items()) or "none"
    console.print(
        f"[bold]{trace.name}[/]: {len(trace.jobs):,} jobs ({skipped} skipped) on [bold]{cluster.name}[/] "
        f"({cluster.num_nodes} nodes, {cluster.num_gpus} GPUs), contention {'off' if no_contention else 'on'}"
        + (f", time limits {time_limits:g}x the isolated duration where a job has none" if time_limits else "")
        + (f", reservations after {reserve_after:g} s" if reserve_after is not None else "")
        + (f", reservations for jobs of {reserve_share:.0%} of the GPUs or more" if reserve_share is not None else "")
        + (", one user's shares per node (MPS)" if mps_one_user else "")
    )
    results: list[SimResult] = []
    with Progress(TextColumn("{task.description:>20}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        for name in policies:
            task = progress.add_task(name, total=len(trace.jobs))
            sim = Simulator(cluster, jobs, built[name], contention=not no_contention, teams=teams,
                            progress=partial(progress.advance, task), reservations=rule, mps_one_user=mps_one_user,
                            resize_interval_s=RESIZE_INTERVAL_S if resize_interval is None else resize_interval)
            try:
                results.append(sim.run())
            except SimulationError as exc:
                raise click.ClickException(f"policy {name}: {exc}") from None
    console.print(metrics_table(results, {p.name: p.oracle for p in built.values()}))
    for name, policy in built.items():
        for line in guard_lines(policy, name, results[policies.index(name)]):
            console.print(line)
    if teams is not None:
        console.print(teams_table(results))
    if json_out is not None:
        extra = ({"time_limits": time_limits} if time_limits else {}) | (
            {"reservations": {"after_s": reserve_after, "share": reserve_share}} if rule is not None else {}) | (
            {"mps_one_user": True} if mps_one_user else {})
        json_out.write_text(json.dumps(report(trace, cluster, results, not no_contention, seed) | extra, indent=2)
                            + "\n")
        console.print(f"metrics written to {json_out}")
    if plot_out is not None:
        plot_jct_cdf(results, plot_out, f"{trace.name} on {cluster.name}")
        console.print(f"JCT CDF written to {plot_out}")


def guard_lines(policy: Any, name: str, result: SimResult) -> list[str]:
    """What the guard did in a run: its windows, its switches, how long the fallback acted, and its last verdict."""
    verdicts = getattr(policy, "verdicts", None)
    if verdicts is None:
        return []
    if not verdicts:
        return [f"guard on {name}: no full window of arrivals; {name} acted throughout"]
    name = getattr(policy, "learned_name", name)
    switches = sum(v.switched for v in verdicts)  # (of the verdicts the guard keeps: its latest)
    span = max((j.end_s or 0.0) for j in result.jobs) or 1.0
    return [f"guard on {name}: {policy.rule.windows} windows, {switches} switches, a fallback acted "
            f"{policy.fallback_s / span:.0%} of the time; last: {verdicts[-1].text(name)}"]


def metrics_table(results: list[SimResult], oracle: dict[str, bool]) -> Any:
    """Metrics as rows and policies as columns, so many policies still fit a terminal; best avg JCT in green."""
    from rich.table import Table

    table = Table(title="Policy comparison (JCT: job completion time; contention: avg slowdown while running)")
    table.add_column("metric", style="bold", no_wrap=True)
    for r in results:
        table.add_column(r.policy + (" (oracle)" if oracle[r.policy] else ""), justify="right")
    best = min(r.metrics["avg_jct_s"] for r in results)
    for key, header, fmt in METRIC_COLUMNS:
        if key in ("jobs_timed_out", "resizes") and not any(key in r.metrics for r in results):
            continue  # no job had a time limit, or none was elastic
        cells = []
        rows = [r.metrics | {"wall_s": r.wall_s} for r in results]
        unit = duration_unit(row.get(key, 0) for row in rows) if fmt == "dur" else None  # one unit a row
        for row in rows:
            cell = table_cell(row.get(key, 0), fmt, unit)
            cells.append(f"[green]{cell}[/]" if key == "avg_jct_s" and row[key] == best else cell)
        table.add_row(header, *cells)
    return table


def teams_table(results: list[SimResult]) -> Any:
    """Per team and policy: what it got against its quota, its jobs' finish-time fairness, and the fairness over
    teams."""
    from rich.table import Table

    table = Table(title="Teams (GPU-h: used / quota x time in the system; over: time above quota; starved: time under "
                        "95% of quota with a job that fits waiting; ρ: a job's JCT over its JCT with its team alone on "
                        "its quota, Themis' finish-time fairness; no ρ: jobs larger than the quota, or of a team with "
                        "under 1 GPU of it)")
    for col in ("policy", "team", "quota", "jobs", "avg JCT", "GPU-h used", "GPU-h quota", "over", "starved",
                "max ρ", "median ρ", "no ρ", "Jain's index"):
        table.add_column(col, justify="left" if col in ("policy", "team") else "right")

    def rho(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    for r in results:
        assert r.teams is not None
        for name, t in r.teams["teams"].items():
            table.add_row(r.policy, name, f"{t['quota_gpus']:g}", f"{t['jobs']:.0f}", format_duration(t["avg_jct_s"]),
                          f"{t['gpu_hours']:.1f}", f"{t['quota_gpu_hours']:.1f}", format_duration(t["over_quota_s"]),
                          format_duration(t["starved_s"]), rho(t.get("rho_max")), rho(t.get("rho_median")),
                          str(t.get("rho_excluded", "")), "")
        table.add_row(r.policy, "[bold]all teams[/]", "", f"{sum(t['jobs'] for t in r.teams['teams'].values()):.0f}",
                      "", "", "", "", "", f"[bold]{rho(r.teams.get('rho_max'))}[/]", "",
                      str(r.teams.get("rho_excluded", "")), f"[bold]{r.teams['jain']:.3f}[/]", end_section=True)
    return table


def report(trace: Trace, cluster: Cluster, results: list[SimResult], contention: bool, seed: int) -> dict[str, Any]:
    return {
        "trace": trace.describe(),
        "cluster": cluster.describe(),
        "contention": contention,
        "seed": seed,
        "policies": {r.policy: r.metrics | {"wall_s": r.wall_s, "events": r.events}
                     | ({"teams": r.teams} if r.teams is not None else {}) for r in results},
    }


def plot_jct_cdf(results: list[SimResult], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        jct = np.sort(r.jct())
        if jct.size:
            ax.plot(jct, np.arange(1, jct.size + 1) / jct.size, label=f"{r.policy} (avg {format_duration(jct.mean())})")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


SIMULATE_COMMANDS = [simulate]
