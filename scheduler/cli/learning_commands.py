"""The learned policies' commands: `corral train`, `corral calibrate`, `corral evaluate` and `corral tune`."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click

from scheduler.cli.params import COUNT, FRACTION, NATURAL, SEED, Number, OutPath
from scheduler.cli.policy_options import build_policies, parse_policies
from scheduler.cli.tables import METRIC_COLUMNS, duration_unit, format_duration, table_cell
from scheduler.core.errors import SpecError


@click.command()
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
@click.option("--priority-share", type=FRACTION, default=0.3, show_default=True,
              help="Probability that a training window's jobs carry priorities (10% high, 5% not preemptible; 0: "
                   "never).")
@click.option("--elastic-share", type=FRACTION, default=0.3, show_default=True,
              help="Probability that a training window is an elastic mix (half its whole-GPU training jobs elastic "
                   "from half to twice their size), where the agent learns to size jobs (0: never).")
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
          warm_start_samples: int, dagger_rounds: int, team_share: float, priority_share: float,
          elastic_share: float, no_progress: bool,
          from_history: bool, db_url: str | None, out: Path | None, force: bool) -> None:
    """Train a placement agent and evaluate it against tiresias and contention-greedy on held-out windows."""
    from agents.train import check_out, default_out, make_config
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
            priority_share=priority_share, elastic_share=elastic_share,
        )
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    run_training(cfg, progress=not no_progress, log=lambda msg: click.echo(msg, err=True))


def _train_from_history(ctx: click.Context, db_url: str | None, out: Path, no_progress: bool, load: str,
                        **kwargs: Any) -> None:
    from click.core import ParameterSource

    from agents.finetune import train_from_history

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


@click.command()
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
        predicted, observed = zip(*recorded, strict=False)
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


@click.command()
@click.option("--policy", "policies", required=True, callback=parse_policies, metavar="P1,P2,...",
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
@click.option("--ray-address", default=None, metavar="ADDR",
              help="Run the simulations as Ray tasks over this cluster's CPUs ('auto' on one of its nodes, or "
                   "HOST:PORT of its head), with the cluster's token as `corral serve` takes it; the nodes get this "
                   "checkout's code from Ray (docs/learned-policies.md). Same results as a local run.")
def evaluate(policies: list[str], traces: tuple[str, ...], cluster: str, seeds: int, window: int | None, part: str,
             load: float | None, no_contention: bool, baseline: str, json_out: Path | None,
             plot_out: Path | None, ray_address: str | None) -> None:
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
    build_policies(policies, 0)  # refuse bad names and unloadable agents before any work
    try:
        build_policies([baseline], 0)
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
            if ray_address:
                use_ray_token()
            result = run_evaluation(cases, policies, not no_contention, lambda: progress.advance(task),
                                    baseline=baseline, ray_address=ray_address)
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


def use_ray_token() -> None:
    """Join a Ray cluster with the token `corral serve --ray-address` would use (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
    CORRAL_HOME/ray-token), if there is one: Ray reads it from this process's environment."""
    from scheduler.live import ray_auth

    source = ray_auth.existing_token()
    if source is not None:
        ray_auth.use_token(source)


EVAL_ROWS = [(k, h, f) for k, h, f in METRIC_COLUMNS if k not in ("wall_s", "jobs_timed_out", "resizes")] + [("slo_violation_frac", "SLO miss", "{:.1%}")]


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
        fmt = "count" if fmt == "{:d}" else fmt  # counts average to fractions
        unit = duration_unit(v for p in pols.values() for v in _durations(p[key])) if fmt == "dur" else None
        cells = []
        for name, p in pols.items():
            m = p[key]
            cell = (f"{table_cell(m['mean'], fmt, unit)} [{table_cell(m['min'], fmt, unit)}-"
                    f"{table_cell(m['max'], fmt, unit)}]") if name == base else table_cell(m["mean"], fmt, unit)
            if m["vs_baseline"] is not None:
                cell += "\n" + _comparisoncell(m["vs_baseline"], key, fmt, unit)
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


def _durations(m: dict[str, Any]) -> list[float]:
    """The durations a row's cell shows for one policy: its mean, range and difference to the baseline."""
    shown = [m["mean"], m["min"], m["max"]]
    cmp = m["vs_baseline"]
    if cmp is not None and cmp["kind"] != "ratio":
        shown += [v for v in (cmp["estimate"], cmp["low"], cmp["high"]) if v is not None]
    return [float(v) for v in shown if v is not None]


def _comparisoncell(cmp: dict[str, Any], key: str, fmt: str, unit: str | None = None) -> str:
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
    diff_fmt = "{:.1f}" if fmt == "count" else fmt  # a difference of counts has a fraction, whole or not
    sign = "+" if cmp["estimate"] >= 0 else "-"
    text = f"{sign}{table_cell(abs(cmp['estimate']), diff_fmt, unit)}"
    if cmp["low"] is None:
        return f"{text} (no interval)"
    return f"{text} [{_signed(cmp['low'], diff_fmt, unit)}, {_signed(cmp['high'], diff_fmt, unit)}]"


def _signed(value: float, fmt: str, unit: str | None = None) -> str:
    return f"{'-' if value < 0 else '+'}{table_cell(abs(value), fmt, unit)}"


def evaluation_notes(res: dict[str, Any]) -> list[str]:
    """What the table cannot say in a cell: undefined ratios and intervals wider than the metric allows."""
    return [f"{name} {key}: {m['vs_baseline']['note']}" for name, p in res["policies"].items()
            for key, m in p.items() if m["vs_baseline"] is not None and m["vs_baseline"]["note"]]


# ---- corral tune: Tiresias' queue thresholds picked on training windows (agents.tune) ------------------------------


@click.command("tune")
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


LEARNING_COMMANDS = [train, calibrate, evaluate, tune_cmd]


# ---- flags -----------------------------------------------------------------------------------------------------------


def parse_cluster_range(text: str) -> tuple[list[str], tuple[int, int]]:
    """`PRESET[:N|:LO-HI][,...]` -> presets and the node range they span (for training's drawn clusters)."""
    presets, lows, highs = [], [], []
    for part in text.split(","):
        preset, _, rng = part.strip().partition(":")
        presets.append(preset)
        if rng:
            lo, _, hi = rng.partition("-")
            try:
                lows.append(int(lo))
                highs.append(int(hi or lo))
            except ValueError:
                raise SpecError(f"--cluster: {part!r}: expected PRESET, PRESET:N or PRESET:LO-HI") from None
    return presets, ((min(lows), max(highs)) if lows else (2, 8))


def parse_range(flag: str, text: str) -> tuple[float, float]:
    lo, _, hi = text.partition("-")
    try:
        return float(lo), float(hi or lo)
    except ValueError:
        raise SpecError(f"{flag}: {text!r}: expected a number or LOW-HIGH") from None
