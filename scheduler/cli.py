"""The `corral` command: the composition root. Only here are policy names resolved through the registry, and the
upper layers (`policies`, later `agents` and `web`) imported, lazily, per sub-command."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from scheduler.model import Cluster, SpecError, parse_cluster

if TYPE_CHECKING:
    from scheduler.simulator import SimResult
    from scheduler.traces import Trace

METRIC_COLUMNS = [  # (key, header, format)
    ("jobs_completed", "done", "{:d}"),
    ("jobs_rejected", "rejected", "{:d}"),
    ("avg_jct_s", "avg JCT", "dur"),
    ("p50_jct_s", "p50 JCT", "dur"),
    ("p95_jct_s", "p95 JCT", "dur"),
    ("p99_jct_s", "p99 JCT", "dur"),
    ("avg_queue_s", "avg queue", "dur"),
    ("avg_slowdown", "slowdown", "{:.2f}"),
    ("avg_contention_slowdown", "contention", "{:.3f}"),
    ("gpu_util", "GPU util", "{:.1%}"),
    ("makespan_s", "makespan", "dur"),
    ("preemptions", "preempt", "{:d}"),
    ("wall_s", "wall", "{:.2f}s"),
]


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.2f}h"
    return f"{seconds / 86400:.2f}d"


def _cell(value: Any, fmt: str) -> str:
    if fmt == "dur":
        return format_duration(float(value))
    if fmt == "{:d}":
        return fmt.format(int(value))
    return fmt.format(value)


def _parse_cluster_option(ctx: click.Context, param: click.Parameter, value: str) -> Cluster:
    try:
        return parse_cluster(value)
    except SpecError as exc:
        raise click.BadParameter(str(exc).removeprefix("--cluster: "), ctx, param) from None


def _parse_policies(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    from policies import available

    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise click.BadParameter(f"give at least one policy; choose from {', '.join(available())}", ctx, param)
    if len(set(names)) != len(names):
        raise click.BadParameter("a policy is listed twice", ctx, param)
    return names


def _build_policies(names: list[str], seed: int) -> dict[str, Any]:
    """Each policy built once, before any work starts (an `rl:` agent loads a model), bad names refused as flags."""
    from policies import make_policy

    built = {}
    for name in names:
        try:
            built[name] = make_policy(name, seed=seed)
        except SpecError as exc:
            raise click.BadParameter(str(exc), param_hint="'--policy'") from None
    return built


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="corral")
def main() -> None:
    """Corral: a contention-aware scheduler for shared GPU clusters."""


@main.command()
@click.option("--trace", "trace_path", required=True, metavar="PATH",
              help="Trace file (Corral CSV, Philly or Alibaba openb), or synthetic:N[,iat=S,frac=F,inference=F].")
@click.option("--format", "trace_format", type=click.Choice(["auto", "corral", "philly", "alibaba"]),
              default="auto", show_default=True, help="Trace format.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Replay only the first N jobs.")
@click.option("--cluster", "cluster", required=True, callback=_parse_cluster_option, metavar="SPEC",
              help="PRESET:NODES[,PRESET:NODES] (presets: dgx-a100, pcie-v100, pcie-t4) or a cluster YAML file.")
@click.option("--policy", "policies", default="fifo,tiresias,contention-greedy", show_default=True,
              callback=_parse_policies, metavar="P1,P2,...", help="Policies to compare.")
@click.option("--no-contention", is_flag=True, help="Every job runs at its isolated speed wherever it is placed.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for model assignment and random policies.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write the metrics as JSON here.")
@click.option("--plot", "plot_out", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write a JCT CDF per policy as PNG here.")
def simulate(
    trace_path: str, trace_format: str, limit: int | None, cluster: Cluster, policies: list[str],
    no_contention: bool, seed: int, json_out: Path | None, plot_out: Path | None,
) -> None:
    """Replay a trace on a simulated cluster under each policy and compare them."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from scheduler.simulator import SimulationError, Simulator
    from scheduler.traces import load_trace

    # Piped output (CI logs, files) has no terminal width; use a wide one rather than fold the table.
    console = Console(width=None if sys.stdout.isatty() else 160)
    built = _build_policies(policies, seed)
    try:
        trace = load_trace(trace_path, format=trace_format, limit=limit, seed=seed)
    except SpecError as exc:
        raise click.ClickException(str(exc)) from None
    if not trace.jobs:
        raise click.ClickException(f"{trace_path}: no jobs to replay (skipped: {trace.skipped or 'none'})")
    skipped = ", ".join(f"{n} {why}" for why, n in trace.skipped.items()) or "none"
    console.print(
        f"[bold]{trace.name}[/]: {len(trace.jobs):,} jobs ({skipped} skipped) on [bold]{cluster.name}[/] "
        f"({cluster.num_nodes} nodes, {cluster.num_gpus} GPUs), contention {'off' if no_contention else 'on'}"
    )
    results: list[SimResult] = []
    with Progress(TextColumn("{task.description:>20}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        for name in policies:
            task = progress.add_task(name, total=len(trace.jobs))
            sim = Simulator(cluster, trace.jobs, built[name], contention=not no_contention,
                            progress=lambda n, task=task: progress.advance(task, n))
            try:
                results.append(sim.run())
            except SimulationError as exc:
                raise click.ClickException(f"policy {name}: {exc}") from None
    console.print(metrics_table(results, {name: p.oracle for name, p in built.items()}))
    if json_out is not None:
        json_out.write_text(json.dumps(report(trace, cluster, results, not no_contention, seed), indent=2) + "\n")
        console.print(f"metrics written to {json_out}")
    if plot_out is not None:
        plot_jct_cdf(results, plot_out, f"{trace.name} on {cluster.name}")
        console.print(f"JCT CDF written to {plot_out}")


def metrics_table(results: list[SimResult], oracle: dict[str, bool]) -> Any:
    """Metrics as rows and policies as columns, so many policies still fit a terminal; best avg JCT in green."""
    from rich.table import Table

    table = Table(title="Policy comparison (JCT: job completion time; contention: avg slowdown while running)")
    table.add_column("metric", style="bold", no_wrap=True)
    for r in results:
        table.add_column(r.policy + (" (oracle)" if oracle[r.policy] else ""), justify="right")
    best = min(r.metrics["avg_jct_s"] for r in results)
    for key, header, fmt in METRIC_COLUMNS:
        cells = []
        for r in results:
            row = r.metrics | {"wall_s": r.wall_s}
            cell = _cell(row.get(key, 0), fmt)
            cells.append(f"[green]{cell}[/]" if key == "avg_jct_s" and row[key] == best else cell)
        table.add_row(header, *cells)
    return table


def report(trace: Trace, cluster: Cluster, results: list[SimResult], contention: bool, seed: int) -> dict[str, Any]:
    return {
        "trace": trace.describe(),
        "cluster": cluster.describe(),
        "contention": contention,
        "seed": seed,
        "policies": {r.policy: r.metrics | {"wall_s": r.wall_s, "events": r.events} for r in results},
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


if __name__ == "__main__":
    main()
