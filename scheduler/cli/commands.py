"""The `corral` command: the composition root. Only here are policy names resolved through the registry, and the
upper layers (`policies`, later `agents` and `web`) imported, lazily, per sub-command."""

from __future__ import annotations

import json
import math
import os
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from scheduler.cli.params import COUNT, FRACTION, NATURAL, SEED, CorralGroup, Number, OutPath
from scheduler.core.errors import SpecError

if TYPE_CHECKING:
    from scheduler.core.model import Cluster
    from scheduler.core.simulator import SimResult
    from scheduler.core.traces import Trace

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
    from scheduler.core.model import parse_cluster
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


@click.group(cls=CorralGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="corral")
def main() -> None:
    """Corral: a contention-aware scheduler for shared GPU clusters."""


@main.command()
@click.option("--trace", "trace_path", required=True, metavar="PATH",
              help="Trace file (Corral CSV, Philly or Alibaba openb), or synthetic:N[,iat=S,frac=F,inference=F].")
@click.option("--format", "trace_format", type=click.Choice(["auto", "corral", "philly", "alibaba"]),
              default="auto", show_default=True, help="Trace format.")
@click.option("--limit", type=COUNT, default=None, help="Replay only the first N jobs.")
@click.option("--cluster", "cluster", required=True, callback=_parse_cluster_option, metavar="SPEC",
              help="PRESET:NODES[,PRESET:NODES] (presets: dgx-a100, pcie-v100, pcie-t4) or a cluster YAML file.")
@click.option("--policy", "policies", default="fifo,tiresias,contention-greedy", show_default=True,
              callback=_parse_policies, metavar="P1,P2,...", help="Policies to compare.")
@click.option("--no-contention", is_flag=True, help="Every job runs at its isolated speed wherever it is placed.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed for model assignment and random policies.")
@click.option("--json", "json_out", type=OutPath(), default=None,
              help="Write the metrics as JSON here.")
@click.option("--plot", "plot_out", type=OutPath(), default=None,
              help="Write a JCT CDF per policy as PNG here.")
@click.option("--teams", "teams_path", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Teams YAML (name, quota_gpus, borrow_limit_gpus; half_life_s): every policy runs inside the "
                   "tenancy frame, and the report shows each team's share.")
def simulate(
    trace_path: str, trace_format: str, limit: int | None, cluster: Cluster, policies: list[str],
    no_contention: bool, seed: int, json_out: Path | None, plot_out: Path | None, teams_path: Path | None,
) -> None:
    """Replay a trace on a simulated cluster under each policy and compare them."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from scheduler.core.simulator import SimulationError, Simulator
    from scheduler.core.traces import load_trace

    # Piped output (CI logs, files) has no terminal width; use a wide one rather than fold the table.
    console = Console(width=None if sys.stdout.isatty() else 160)
    built = _build_policies(policies, seed)
    try:
        trace = load_trace(trace_path, format=trace_format, limit=limit, seed=seed)
    except SpecError as exc:
        raise click.ClickException(str(exc)) from None
    if not trace.jobs:
        raise click.ClickException(f"{trace_path}: no jobs to replay (skipped: {trace.skipped or 'none'})")
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
    )
    results: list[SimResult] = []
    with Progress(TextColumn("{task.description:>20}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        for name in policies:
            task = progress.add_task(name, total=len(trace.jobs))
            sim = Simulator(cluster, trace.jobs, built[name], contention=not no_contention, teams=teams,
                            progress=partial(progress.advance, task))
            try:
                results.append(sim.run())
            except SimulationError as exc:
                raise click.ClickException(f"policy {name}: {exc}") from None
    console.print(metrics_table(results, {name: p.oracle for name, p in built.items()}))
    if teams is not None:
        console.print(teams_table(results))
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


@main.command()
@click.option("--algo", type=click.Choice(["maskable-ppo", "ppo"]), default=None,
              help="maskable-ppo for Corral's formulation (default), ppo for DeepShare's.")
@click.option("--formulation", type=click.Choice(["corral", "deepshare"]), default="corral", show_default=True,
              help="corral: LAS order, candidate placements or wait (masked); deepshare: per-GPU grid, node pairs.")
@click.option("--timesteps", type=COUNT, default=300_000, show_default=True, help="Agent decisions to train on.")
@click.option("--cluster", default="dgx-a100,pcie-v100", show_default=True, metavar="PRESET[:LO-HI],...",
              help="Presets to draw clusters from, with the node range of synthetic clusters (default 2-8); "
                   "trace windows get the node count that matches the drawn load.")
@click.option("--workload", "workloads", multiple=True, default=["synthetic"], show_default=True,
              metavar="synthetic[:MIX]|PATH", help="Repeatable. Trace windows are drawn from the part before the hold-out; "
              "MIX is one of default, short, long, fractional, multinode.")
@click.option("--window", type=COUNT, default=300, show_default=True, help="Jobs per training episode.")
@click.option("--load", default="0.6-2.5", show_default=True, metavar="LO-HI",
              help="Offered load range to draw (clusters are resized, or arrivals rescaled where they cannot be).")
@click.option("--n-envs", type=COUNT, default=2, show_default=True, help="Parallel environments (processes).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--out", type=OutPath(make_parents=True), default=None,
              help="Where the best agent goes; its report lands next to it. Default: a new file under "
                   "$CORRAL_HOME/agents (loadable by name as rl:NAME), never the shipped agents/zoo.")
@click.option("--force", is_flag=True, help="Overwrite an existing agent at --out (and its report).")
@click.option("--tensorboard", type=OutPath(folder=True), default=None,
              help="Write TensorBoard logs here.")
@click.option("--eval-freq", type=NATURAL, default=0, help="Timesteps between validation evaluations (0: a tenth).")
@click.option("--eval-scenarios", type=COUNT, default=3, show_default=True,
              help="Validation windows per workload (the training part, model seeds and synthetic seeds training "
                   "never draws; the best checkpoint is chosen on them).")
@click.option("--eval-window", type=COUNT, default=500, show_default=True, help="Jobs per validation window.")
@click.option("--warm-start", default="best", show_default=True, metavar="best|HEURISTIC|none",
              help="Clone this teacher (in the agent's frame) before PPO fine-tunes it: best = the best heuristic "
                   "for each training window's workload and load (agents/imitation.py), or one heuristic's name.")
@click.option("--warm-start-samples", type=NATURAL, default=40_000, show_default=True)
@click.option("--dagger-rounds", type=NATURAL, default=2, show_default=True,
              help="After cloning, roll the clone out, label what it reaches with the teacher's actions and clone "
                   "again (DAgger), this many times.")
@click.option("--team-share", type=FRACTION, default=0.3, show_default=True,
              help="Probability that a training window is shared by 2 to 4 teams, the agent acting inside the "
                   "tenancy frame (0: never).")
@click.option("--no-progress", is_flag=True, help="No progress bar (logs only).")
@click.option("--from-history", is_flag=True,
              help="Fine-tune the store's active policy on the jobs the live service recorded, replayed on the live "
                   "cluster's shape.")
@click.option("--db", "db_url", default=None, metavar="URL",
              help="With --from-history: the store (default: DATABASE_URL, or the SQLite file under CORRAL_HOME).")
@click.pass_context
def train(ctx: click.Context, algo: str | None, formulation: str, timesteps: int, cluster: str,
          workloads: tuple[str, ...], window: int, load: str, n_envs: int, seed: int,
          tensorboard: Path | None, eval_freq: int, eval_scenarios: int, eval_window: int, warm_start: str,
          warm_start_samples: int, dagger_rounds: int, team_share: float, no_progress: bool, from_history: bool,
          db_url: str | None, out: Path | None, force: bool) -> None:
    """Train a placement agent and evaluate it against tiresias and contention-greedy on held-out windows."""
    from agents.train import check_out, default_out, make_config, parse_cluster_range, parse_range
    from agents.train import train as run_training

    defaulted = out is None
    out = out or default_out("history" if from_history else formulation)
    try:
        check_out(out, force)
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    if defaulted:  # say where before a run of minutes, not only at its end
        click.echo(f"no --out: the agent will be saved as {out}", err=True)
    if from_history:
        _train_from_history(ctx, db_url, out, no_progress, algo=algo or "maskable-ppo", timesteps=timesteps,
                            window=window, load=load, n_envs=n_envs, seed=seed, tensorboard=tensorboard,
                            eval_freq=eval_freq, eval_scenarios=eval_scenarios, eval_window=eval_window,
                            warm_start=warm_start, warm_start_samples=warm_start_samples, dagger_rounds=dagger_rounds)
        return
    if db_url is not None:
        raise click.UsageError("--db: only with --from-history")
    try:
        presets, nodes = parse_cluster_range(cluster)
        cfg = make_config(
            algo=algo or ("ppo" if formulation == "deepshare" else "maskable-ppo"), formulation=formulation,
            timesteps=timesteps, presets=presets, nodes=nodes, workloads=list(workloads), window=window,
            load=parse_range("--load", load), n_envs=n_envs, seed=seed, out=out, tensorboard=tensorboard,
            eval_freq=eval_freq, eval_scenarios=eval_scenarios, eval_window=eval_window, warm_start=warm_start,
            warm_start_samples=warm_start_samples, dagger_rounds=dagger_rounds, team_share=team_share,
        )
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    run_training(cfg, progress=not no_progress, log=lambda msg: click.echo(msg, err=True))


def _train_from_history(ctx: click.Context, db_url: str | None, out: Path, no_progress: bool, load: str,
                        **kwargs: Any) -> None:
    from click.core import ParameterSource

    from agents.finetune import train_from_history
    from agents.train import parse_range

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)

    for name, flag in (("cluster", "--cluster"), ("workloads", "--workload"), ("formulation", "--formulation")):
        if given(name):
            raise click.UsageError(f"{flag}: not with --from-history (the history is the workload, the live cluster "
                                   "recorded in the store its cluster, and the formulation the active agent's)")
    try:
        train_from_history(db_url, out, progress=not no_progress,
                           log=lambda msg: click.echo(msg, err=True), load=parse_range("--load", load), **kwargs)
    except SpecError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.option("--db", "db_url", default=None, metavar="URL",
              help="The store (default: DATABASE_URL, or the SQLite file under CORRAL_HOME).")
@click.option("--kind", type=click.Choice(["all", "command", "emulated"]), default="all", show_default=True,
              help="Jobs to report and fit on.")
@click.option("--json", "json_out", type=OutPath(), default=None,
              help="Write every job's figures, the summaries and the fit as JSON here.")
@click.option("--plot", "plot_out", type=OutPath(), default=None,
              help="Predicted vs observed slowdown scatter (before and after the refit), as PNG.")
@click.option("--write", "write_out", type=OutPath(), default=None,
              help="Save the refitted ContentionParams as JSON here.")
@click.option("--max-rows", type=NATURAL, default=40, show_default=True,
              help="Jobs listed in the per-job table (all of them go to --json).")
def calibrate(db_url: str | None, kind: str, json_out: Path | None, plot_out: Path | None, write_out: Path | None,
              max_rows: int) -> None:
    """Predicted vs observed slowdown of the jobs the live service ran, and a refit of the contention parameters."""
    from rich.console import Console
    from rich.table import Table

    from scheduler.live.history import MIN_JOBS_CALIBRATE, fit_params, params_dict, read_history, summary
    from scheduler.live.store import Store

    console = Console(width=None if sys.stdout.isatty() else 160)
    try:
        store = Store.open(db_url)
        try:
            history = read_history(store)
        finally:
            store.close()
        records = [r for r in history.records if kind == "all" or r.kind == kind]
        history.records = records
        history.require(MIN_JOBS_CALIBRATE, "calibrate")
        fit = fit_params(history)
    except SpecError as exc:
        raise click.ClickException(str(exc)) from None
    console.print(f"[bold]{history.url}[/]: {len(records)} succeeded jobs with an observed slowdown "
                  f"({history.finished} succeeded in all) over {format_duration(history.span_s)}, live cluster "
                  f"{history.cluster_text}")

    def num(v: float | None, fmt: str = "{:.3f}") -> str:
        return "-" if v is None or not math.isfinite(v) else fmt.format(v)

    jobs = Table(title="Per job: recorded prediction (time-averaged), recomputed (old -> refitted params), observed")
    for col in ("job", "kind", "model", "GPUs", "share", "co-tenants", "run", "predicted", "recomputed", "refitted",
                "observed"):
        jobs.add_column(col, justify="left" if col in ("job", "kind", "model") else "right")
    for i, r in enumerate(records[:max_rows]):
        jobs.add_row(f"{r.job_id} {r.name}", r.kind, r.model, ",".join(map(str, r.gpus)), f"{r.share:g}",
                     ",".join(map(str, r.co_tenants)) or "-", format_duration(r.run_s), num(r.predicted_slowdown_avg),
                     num(fit.predicted_before[i]), num(fit.predicted_after[i]), num(r.observed_slowdown))
    if len(records) > max_rows:
        jobs.caption = f"{len(records) - max_rows} more jobs not listed (--max-rows; all in --json)"
    console.print(jobs)
    summ = summary(records)
    agg = Table(title="Recorded predicted vs observed slowdown")
    for col in ("group", "jobs", "mean predicted", "mean observed", "mean abs error", "correlation"):
        agg.add_column(col, justify="left" if col == "group" else "right")
    groups = [("all jobs", summ["all"])] + [(f"kind {k}", v) for k, v in summ["by_kind"].items()] + \
        [(m, v) for m, v in summ["by_model"].items()]
    for label, st in groups:
        agg.add_row(label, str(st["count"]), num(st["mean_predicted"]), num(st["mean_observed"]), num(st["mae"]),
                    num(st["correlation"], "{:.2f}"))
    console.print(agg)
    params = Table(title="ContentionParams refit (least squares on log predicted / observed slowdown)")
    for col in ("parameter", "old", "new", "status"):
        params.add_column(col, justify="left" if col in ("parameter", "status") else "right")
    old, new = params_dict(fit.old), params_dict(fit.new)
    for name in old:
        status = "fitted" if name in fit.fitted else "no signal in this history: kept"
        params.add_row(name, f"{old[name]:.4g}", f"{new[name]:.4g}", status)
    params.caption = (f"RMS log error {fit.rmse_log_before:.4f} -> {fit.rmse_log_after:.4f}; mean abs error "
                      f"{fit.mae_before:.4f} -> {fit.mae_after:.4f} ({fit.evaluations} model evaluations)")
    console.print(params)
    counts = {k: sum(r.kind == k for r in records) for k in ("emulated", "command")}
    console.print(
        f"[yellow]Note[/]: emulated jobs ({counts['emulated']} here) run at the rate the contention model predicts, "
        "so their observed slowdowns only measure scheduling and polling overhead around the model's own numbers; "
        f"command jobs ({counts['command']} here) carry the real signal (their observed slowdown is run time / the "
        "submitted duration, so it is only as good as that estimate of the isolated run time). Fit on real jobs "
        "with --kind command before trusting new parameters.")
    result = {"history": history.describe(), "summary": summ, "fit": fit.as_dict(),
              "jobs": [r.as_dict() | {"recomputed": fit.predicted_before[i], "refitted": fit.predicted_after[i]}
                       for i, r in enumerate(records)]}
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=1) + "\n")
        console.print(f"report written to {json_out}")
    if write_out is not None:
        write_out.write_text(json.dumps(new | {"source": f"corral calibrate on {len(records)} jobs of {history.url}"},
                                        indent=2) + "\n")
        console.print(f"fitted parameters written to {write_out}")
    if plot_out is not None:
        plot_calibration(records, fit, plot_out)
        console.print(f"scatter written to {plot_out}")


def plot_calibration(records: list[Any], fit: Any, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    obs = [r.observed_slowdown for r in records]
    fig, ax = plt.subplots(figsize=(6, 5))
    recorded = [(r.predicted_slowdown_avg, r.observed_slowdown) for r in records if r.predicted_slowdown_avg]
    if recorded:
        predicted, observed = zip(*recorded)
        ax.scatter(predicted, observed, s=18, marker="x", color="grey", label="recorded prediction")
    ax.scatter(fit.predicted_before, obs, s=18, label="recomputed, old params")
    ax.scatter(fit.predicted_after, obs, s=18, label="recomputed, refitted params")
    values = [v for v in obs + fit.predicted_before + fit.predicted_after if math.isfinite(v)]
    lo, hi = min(values + [1.0]), max(values + [1.0])
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
    ax.set_xlabel("predicted slowdown")
    ax.set_ylabel("observed slowdown (run time / duration)")
    ax.set_title(f"Contention model vs the live service ({len(records)} jobs)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


@main.command()
@click.option("--policy", "policies", required=True, callback=_parse_policies, metavar="P1,P2,...",
              help="Policies to compare, e.g. rl:default,tiresias,contention-greedy.")
@click.option("--trace", "traces", multiple=True, required=True, metavar="PATH",
              help="Repeatable: trace files or synthetic:N specs.")
@click.option("--cluster", required=True, metavar="SPEC", help="PRESET:NODES[,...] or a cluster YAML file.")
@click.option("--seeds", type=Number("int", 1, 1000), default=5, show_default=True,
              help="Cases per trace: each seed draws the model assignment and the window.")
@click.option("--window", type=Number("int", 2), default=None,
              help="Jobs per case (a window of the trace); default the whole trace.")
@click.option("--part", type=click.Choice(["test", "train", "all"]), default="test", show_default=True,
              help="Where windows start: test is the hold-out part no training run draws from.")
@click.option("--load", type=Number("float", 0.05, 3.0), default=None,
              help="Resize the cluster (PRESET:NODES) so each case's offered load is nearest this.")
@click.option("--no-contention", is_flag=True, help="Every job runs at its isolated speed.")
@click.option("--baseline", default="tiresias", show_default=True, metavar="POLICY",
              help="Every policy is compared with this one case by case (it runs too if not in --policy).")
@click.option("--json", "json_out", type=OutPath(), default=None)
@click.option("--plot", "plot_out", type=OutPath(), default=None,
              help="Bar charts of average and p99 JCT as ratios to the baseline with 95% intervals, as PNG.")
def evaluate(policies: list[str], traces: tuple[str, ...], cluster: str, seeds: int, window: int | None, part: str,
             load: float | None, no_contention: bool, baseline: str, json_out: Path | None,
             plot_out: Path | None) -> None:
    """Every policy on the same cases over several seeds, each compared with --baseline on the same case and seed:
    geometric mean ratio (times, utilisation) or mean difference (counts) with a 95% Student's t interval."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from agents.evaluate import MIN_SEEDS, build_cases
    from agents.evaluate import evaluate as run_evaluation
    from agents.evaluate import plot as plot_evaluation
    from scheduler.core.simulator import SimulationError

    console = Console(width=None if sys.stdout.isatty() else 160)
    baseline = baseline.strip()
    _build_policies(policies, 0)  # refuse bad names and unloadable agents before any work
    try:
        _build_policies([baseline], 0)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint="--baseline") from None
    try:
        cases = build_cases(traces, cluster, seeds, window, part, load)
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    if seeds < MIN_SEEDS:
        why = ("one case per trace gives no interval at all" if seeds == 1 else
               f"{seeds} cases per trace give very wide 95% intervals (Student's t with {seeds - 1} degree(s) of "
               f"freedom: t = {_t975(seeds - 1):.1f})")
        console.print(f"[yellow]warning: only {seeds} seed(s): {why}; use --seeds {MIN_SEEDS} or more to compare "
                      "policies[/]")
    runs = len(cases) * (len(policies) + (baseline not in policies))
    with Progress(TextColumn("evaluating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("runs", total=runs)
        try:
            result = run_evaluation(cases, policies, not no_contention, lambda: progress.advance(task),
                                    baseline=baseline)
        except SimulationError as exc:
            raise click.ClickException(str(exc)) from None
    for trace, res in result.items():
        console.print(evaluation_table(trace, res))
        for note in evaluation_notes(res):
            console.print(f"[yellow]note:[/] {note}")
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=1) + "\n")
        console.print(f"results written to {json_out}")
    if plot_out is not None:
        plot_evaluation(result, plot_out)
        console.print(f"plot written to {plot_out}")


EVAL_ROWS = [(k, h, f) for k, h, f in METRIC_COLUMNS if k != "wall_s"] + [("slo_violation_frac", "SLO miss", "{:.1%}")]


def evaluation_table(trace: str, res: dict[str, Any]) -> Any:
    """One row per metric: the baseline's mean and range over the cases; every other policy's mean and, below it,
    its paired comparison with the baseline (x ratio or ± difference, with the 95% interval or why there is none)."""
    from rich.table import Table

    cases, base = res["cases"], res["baseline"]
    loads = [c["offered_load"] for c in cases]
    table = Table(title=f"{Path(trace).stem}: {len(cases)} case(s), each policy against {base} on the same case and "
                        f"seed (clusters {', '.join(sorted({c['cluster'] for c in cases}))}; offered load "
                        f"{min(loads):.2f}-{max(loads):.2f})",
                  caption="value: mean over the cases \\[min-max]; x: geometric mean ratio to the baseline, +/-: mean "
                          "difference, each with its 95% Student's t interval" + _load_fits(cases))
    table.add_column("metric", style="bold", no_wrap=True)
    pols = res["policies"]
    for name in pols:
        table.add_column(f"{name} (baseline)" if name == base else name, justify="right")
    for key, header, fmt in EVAL_ROWS:
        fmt = "{:.1f}" if fmt == "{:d}" else fmt  # counts average to fractions
        cells = []
        for name, p in pols.items():
            m = p[key]
            cell = f"{_cell(m['mean'], fmt)} [{_cell(m['min'], fmt)}-{_cell(m['max'], fmt)}]" if name == base \
                else _cell(m["mean"], fmt)
            if m["vs_baseline"] is not None:
                cell += "\n" + _comparison_cell(m["vs_baseline"], key, fmt)
            cells.append(cell)
        table.add_row(header, *cells)
    return table


def _load_fits(cases: list[dict[str, Any]]) -> str:
    """How the cases were brought to --load (resized, or arrivals rescaled where resizing could not), for the caption."""
    fits = sorted({c["load_fit"] for c in cases if "load_fit" in c})
    return ("\nload: " + "; ".join(fits)) if fits else ""


def _t975(df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


def _comparison_cell(cmp: dict[str, Any], key: str, fmt: str) -> str:
    """"0.87x [0.80-0.95]" (green when the interval lies below 1 for a time, red above), "+1.5 [-0.3, 3.3]"."""
    if cmp["kind"] == "ratio":
        text = f"{cmp['estimate']:.3g}x"
        if cmp["low"] is None:
            return f"{text} (no interval)"
        text += f" [{cmp['low']:.3g}-{cmp['high']:.3g}]"
        lower_is_better = key != "gpu_util"
        if cmp["high"] < 1 or cmp["low"] > 1:
            good = (cmp["high"] < 1) == lower_is_better
            return f"[{'green' if good else 'red'}]{text}[/]"
        return text
    diff_fmt = "dur" if fmt == "dur" else fmt
    sign = "+" if cmp["estimate"] >= 0 else "-"
    text = f"{sign}{_cell(abs(cmp['estimate']), diff_fmt)}"
    if cmp["low"] is None:
        return f"{text} (no interval)"
    return f"{text} [{_signed(cmp['low'], diff_fmt)}, {_signed(cmp['high'], diff_fmt)}]"


def _signed(value: float, fmt: str) -> str:
    return f"{'-' if value < 0 else '+'}{_cell(abs(value), fmt)}"


def evaluation_notes(res: dict[str, Any]) -> list[str]:
    """What the table cannot say in a cell: undefined ratios and intervals wider than the metric allows."""
    return [f"{name} {key}: {m['vs_baseline']['note']}" for name, p in res["policies"].items()
            for key, m in p.items() if m["vs_baseline"] is not None and m["vs_baseline"]["note"]]


@main.command()
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
def serve(host: str, port: int, nodes: int, gpus_per_node: int, preset: str, ray_address: str | None,
          policy: str | None, tick: float, job_user_pattern: str | None, job_user_map: Path | None,
          job_user: str | None, command_jobs: str, log_limit_mb: float, allow_unauthenticated_ray: bool,
          half_life_h: float, on_gpu_fault: str, drain_timeout: float) -> None:
    """Run the live service: controller on Ray, job store, REST API (SQLite under CORRAL_HOME unless DATABASE_URL).

    Two or more replicas (high availability) need PostgreSQL: start each with the same DATABASE_URL and the same
    --ray-address. One controller leads through a lease in the database (10 s, renewed every 2 s); the others serve
    the API and stand by, and one takes over within about 12 s if the leader dies. With SQLite the store belongs to
    one process, which always leads: a second `corral serve` on the same store refuses to start, naming the first.

    Stopping (SIGTERM, Ctrl-C) costs the jobs nothing: with a local Ray cluster, each running job is checkpointed and
    requeued without spending a restart, and resumes at the next start; with --ray-address the workers keep running
    and the next controller adopts them.
    """
    from scheduler.cli.serve import ServeConfig, ServeError
    from scheduler.cli.serve import serve as run_service

    try:
        run_service(ServeConfig(host=host, port=port, nodes=nodes, gpus_per_node=gpus_per_node, preset=preset,
                                ray_address=ray_address, policy=policy, tick_s=tick, job_user=job_user,
                                job_user_pattern=job_user_pattern, job_user_map=job_user_map,
                                command_jobs=command_jobs, log_limit_mb=log_limit_mb,
                                allow_unauthenticated_ray=allow_unauthenticated_ray, half_life_s=half_life_h * 3600.0,
                                on_gpu_fault=on_gpu_fault, drain_timeout_s=drain_timeout))
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    except ServeError as exc:
        raise click.ClickException(str(exc)) from None


@main.command("ray-token")
@click.option("--print", "show", is_flag=True,
              help="Print the token itself, to copy to another machine's CORRAL_HOME/ray-token over a secure channel.")
def ray_token_cmd(show: bool) -> None:
    """Make the Ray cluster's token in CORRAL_HOME/ray-token (mode 0600) if there is none yet, and print its path.

    `corral serve` makes it on its own; a cluster of several machines needs the same token on every Ray node
    (`corral node start` and `ray start` read it there, or where RAY_AUTH_TOKEN_PATH says)."""
    from scheduler.live import ray_auth

    path = ray_auth.ensure_token()
    click.echo(path.read_text().strip() if show else str(path))


@main.command("node-resources")
@click.option("--name", required=True, help="The Corral node name this Ray node will be (unique in the cluster).")
@click.option("--gpus", required=True, type=Number("int", 1, 64), help="GPUs on this node.")
@click.option("--preset", default=None, help="The server model this node is (dgx-a100, pcie-v100, pcie-t4): the "
              "controller models it so. Default: none, and the controller models it as `corral serve --preset`.")
def node_resources_cmd(name: str, gpus: int, preset: str | None) -> None:
    """Print the JSON for `ray start --resources` that makes a Ray node a Corral node."""
    from scheduler.live.cluster import node_type
    from scheduler.live.runs import node_resources

    if preset is not None:
        try:
            node_type(preset, gpus)
        except SpecError as exc:
            raise click.BadParameter(str(exc), param_hint="'--preset'") from None
    click.echo(json.dumps(node_resources(name, gpus, preset)))



@main.group("node")
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
    from scheduler.cli.client import ClientError, check_url

    if value is None:
        return None
    try:
        return check_url(value)
    except ClientError as exc:
        raise click.BadParameter(str(exc).replace("(CORRAL_URL or --url) ", ""), ctx, param) from None


@node_group.command("start", context_settings={"ignore_unknown_options": True})
@click.option("--address", required=True, metavar="HOST:PORT", help="The Ray head's address (its GCS port).")
@click.option("--name", default=None, help="Corral node name, unique in the cluster [default: the short hostname].")
@click.option("--gpus", "gpus", default="auto", show_default=True, callback=_parse_gpus, metavar="auto|N",
              help="auto: discover the GPUs through NVML; N: offer N virtual GPUs (no driver needed; give --preset).")
@click.option("--preset", default=None, help="Server model (dgx-a100, pcie-v100, pcie-t4): with --gpus N, what the "
              "virtual GPUs are; with auto, overrides the model NVML's names match.")
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
def node_start_cmd(address: str, name: str | None, gpus: int | None, preset: str | None, mps_control: str | None,
                   state_dir: Path | None, health_interval: float, api: str | None, dry_run: bool,
                   allow_unauthenticated_ray: bool, ray_args: tuple[str, ...]) -> None:
    """Join the Ray cluster at ADDRESS as a Corral node, in the foreground until stopped (like `ray start --block`):
    discover the GPUs (NVML), run `ray start` with Corral's resources for them, start CUDA MPS while fractional jobs
    run here, and write GPU health (and push it to the API with --api). SIGTERM or SIGINT stops Ray; the command
    exits with Ray's status."""
    from scheduler.live.node.daemon import TOKEN_ENV, AgentError, AgentOptions, NodeAgent, default_name

    opts = AgentOptions(address=address, name=name or default_name(), gpus=gpus, preset=preset, node_dir=state_dir,
                        mps_control=mps_control, ray_args=ray_args, health_interval_s=health_interval,
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


# The API client commands (submit, jobs, show, cancel, logs, cluster, token): they import no upper layer.
from scheduler.cli.client_commands import api_errors, client, connection, register_client_commands


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
        node = client(url, token).drain_node(name, reason, now)
    what = "its jobs are being checkpointed and requeued" if node["drain"]["now"] else "its running jobs may finish"
    click.echo(f"node {name} drained: nothing new starts there; {what}")


@node_group.command("resume")
@click.argument("name")
@connection
def node_resume_cmd(name: str, url: str, token: str | None) -> None:
    """Put drained node NAME back in service (admins): it takes new jobs again."""
    with api_errors():
        client(url, token).resume_node(name)
    click.echo(f"node {name} resumed: it takes new jobs again")


register_client_commands(main)


# ---- corral tune: Tiresias' queue thresholds picked on training windows (agents.tune) ------------------------------


@main.command("tune")
@click.option("--workload", "workloads", multiple=True, metavar="synthetic|PATH",
              help="Repeatable: synthetic or a trace file. Default: synthetic and the dev traces in ../shared/traces.")
@click.option("--scenarios", type=Number("int", 1, 1000), default=24, show_default=True,
              help="Training windows in all, drawn from the workloads in turn (loads 0.8-2.2).")
@click.option("--window", type=Number("int", 10), default=500, show_default=True, help="Jobs per window.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the scenario draw.")
@click.option("--json", "json_out", type=OutPath(), default=None,
              help="Write every candidate's comparison and the choice as JSON.")
def tune_cmd(workloads: tuple[str, ...], scenarios: int, window: int, seed: int, json_out: Path | None) -> None:
    """Pick Tiresias' queue thresholds on training windows (first three quarters of each trace): every candidate of a
    small grid against default tiresias, case by case (geometric-mean avg JCT ratio, 95% interval); prints the chosen
    policy name, e.g. tiresias:thresholds=60,600,6000."""
    from dataclasses import asdict

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from agents.scenarios import check_workloads
    from agents.tune import DEFAULT_GRID, LOAD, default_workloads, policy_name, training_scenarios
    from agents.tune import tune as run_tune
    from scheduler.core.simulator import SimulationError

    console = Console(width=None if sys.stdout.isatty() else 160)
    chosen_workloads = list(workloads) or default_workloads()
    try:
        check_workloads(chosen_workloads)
        cases = training_scenarios(chosen_workloads, scenarios, seed, window)
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    names = list(dict.fromkeys(["tiresias", *(policy_name(t) for t in DEFAULT_GRID)]))
    console.print(f"tuning tiresias on {len(cases)} training window(s) of {window} jobs from "
                  f"{', '.join(Path(w).name for w in chosen_workloads)}, loads {LOAD[0]:g}-{LOAD[1]:g}, "
                  f"{len(names)} candidates")
    with Progress(TextColumn("tuning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("runs", total=len(cases) * len(names))
        try:
            result = run_tune(cases, progress=lambda: progress.advance(task))
        except SimulationError as exc:
            raise click.ClickException(str(exc)) from None
    table = Table(title=f"avg JCT against default tiresias on the same {len(cases)} training window(s)",
                  caption="x: geometric mean of the per-window ratios, with its 95% Student's t interval")
    table.add_column("candidate", style="bold", no_wrap=True)
    table.add_column("thresholds (GPU-s)", justify="right")
    table.add_column("avg JCT ratio", justify="right")
    table.add_column("95% interval", justify="right")
    for row in sorted(result.candidates, key=lambda r: r["estimate"]):
        interval = "-" if row["low"] is None else f"{row['low']:.3f}-{row['high']:.3f}"
        mark = " (chosen)" if row["name"] == result.chosen else ""
        table.add_row(row["name"] + mark, ",".join(f"{t:g}" for t in row["thresholds"]),
                      f"{row['estimate']:.3f}x", interval)
    console.print(table)
    console.print(f"chosen: {result.chosen}")
    if json_out is not None:
        json_out.write_text(json.dumps({"chosen": result.chosen, "candidates": result.candidates,
                                        "scenarios": [asdict(sc) for sc in result.scenarios]}, indent=1) + "\n")
        console.print(f"results written to {json_out}")


if __name__ == "__main__":
    main()
