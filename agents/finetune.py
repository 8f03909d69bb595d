"""`corral train --from-history`: fine-tune the deployed policy on what the live service recorded.

DeepShare trains its deployed policy online on the jobs it schedules; Corral does it in batches. The store's succeeded
jobs become a Corral CSV trace (`scheduler.live.history`: arrivals relative to the first, sizes, models, isolated run
times) written next to the agent as `NAME.history.csv`. Episodes are windows of it replayed on the live cluster's shape
(preset and GPUs per node from the store's `nodes`/`gpus` rows, as `corral serve` built it):

* training: windows from the first three quarters of the history, half with arrivals as recorded and half with
  arrivals stretched or compressed to an offered load drawn from `--load` (a quiet history still teaches queueing);
* held-out evaluation: windows of the last quarter, arrivals as recorded, compared with `tiresias`,
  `contention-greedy` and the active policy itself on the same windows.

The starting point is the active policy (`PolicyVersion.active`): an `rl:NAME` agent's weights are loaded (no
imitation warm start: the deployed agent is already a better starting point than its teacher); any other active
policy is replaced by the usual warm start (behaviour cloning of `contention-greedy`, the teacher
`agents.imitation` implements), then MaskablePPO fine-tunes with `agents.train`'s settings. The artifacts are
`agents.train`'s (`NAME.zip`, `NAME.json`, `NAME.eval.json`, `NAME.curve.png`); the sidecar's `trained_from_history`
records the database (password removed), the job count and the time span.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.scenarios import Scenario, scale_to_load, trace_jobs
from agents.train import (
    BASELINES,
    NET_ARCH,
    TrainConfig,
    activation_hint,
    baseline_metrics,
    env_kwargs,
    keep_best,
    make_config,
    make_eval_callback,
    report_paths,
    run_metadata,
    run_ppo,
    save_reports,
    training_logger,
    write_eval,
)
from scheduler.core.model import Cluster, JobSpec, SpecError
from scheduler.core.traces import window, window_starts
from scheduler.live.cluster import build_live_cluster
from scheduler.live.history import MIN_JOBS_TRAIN, History, HistoryError, read_history, write_trace_csv
from scheduler.live.store import Store

TRAIN_SCENARIOS = 64


@dataclass(frozen=True)
class HistoryScenario(Scenario):
    """A window of the recorded history on the live cluster. `load` 0 keeps the recorded arrivals; a positive load
    rescales them (not the durations) to that offered load on the live cluster."""

    gpus_by_node: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        how = "arrivals as recorded" if self.load <= 0 else f"arrivals scaled to load {self.load:.2f}"
        return f"history (jobs {self.start}+{self.window}, {how}) on live {self.preset} x {len(self.gpus_by_node)}"

    def build(self) -> tuple[Cluster, list[JobSpec]]:
        cluster = build_live_cluster(self.preset, list(self.gpus_by_node))
        jobs = window(trace_jobs(self.workload, 0), self.start, self.window)
        if self.load > 0 and len(jobs) > 1:
            jobs = scale_to_load(jobs, cluster.num_gpus, self.load)
        return cluster, jobs


def history_scenarios(cfg: TrainConfig, history: History, trace_path: str) -> tuple[list[Scenario], list[Scenario]]:
    """(training scenarios, held-out scenarios): windows before and after `HOLDOUT_FROM` of the history."""
    n = len(history.trace.jobs)
    gpn = tuple(history.gpus_by_node)
    rng = np.random.default_rng(cfg.seed)
    w = min(cfg.window, n)
    lo, hi = window_starts(n, w, "train")
    train: list[Scenario] = [
        HistoryScenario(trace_path, history.preset, 0.0 if k % 2 == 0 else float(rng.uniform(*cfg.load)), w, 0,
                        start=int(rng.integers(lo, hi)), gpus_by_node=gpn) for k in range(TRAIN_SCENARIOS)]
    we = min(cfg.eval_window, n)
    lo, hi = window_starts(n, we, "test")
    starts = sorted({int(s) for s in np.linspace(lo, hi - 1, cfg.eval_scenarios)})
    held: list[Scenario] = [HistoryScenario(trace_path, history.preset, 0.0, min(we, n - s), 0, start=s,
                                            gpus_by_node=gpn) for s in starts]
    return train, held


def prepare(db_url: str | None, out: Path, log: Callable[[str], None], **train_kwargs: Any) -> tuple[
        TrainConfig, History, Path]:
    """Read the store, check there is enough history, write the trace, validate the configuration."""
    store = Store.open(db_url)
    try:
        history = read_history(store)
    finally:
        store.close()
    history.require(MIN_JOBS_TRAIN, "train")
    if history.cluster is None:
        raise HistoryError(f"{history.url} records no cluster (nodes with GPUs): run `corral serve` on it first"
                           + (f" ({'; '.join(history.notes)})" if history.notes else ""))
    stem = out.with_suffix("")
    trace_path = write_trace_csv(history.trace, Path(f"{stem}.history.csv"))
    nodes = len(history.gpus_by_node)
    cfg = make_config(formulation="corral", presets=[history.preset], nodes=(nodes, nodes),
                      workloads=[str(trace_path)], out=out, **train_kwargs)
    log(f"history: {len(history.trace.jobs)} finished jobs over {history.span_s / 3600:.2f} h from {history.url} "
        f"on live {history.preset} ({nodes} nodes, {sum(history.gpus_by_node)} GPUs); trace {trace_path}; "
        f"active policy {history.active_policy or '(none recorded)'}")
    for note in history.notes:
        log(f"note: {note}")
    return cfg, history, trace_path


def _vec_env(cfg: TrainConfig, scenarios: list[Scenario]) -> Any:
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from agents.env import PlacementEnv

    def make(i: int) -> Callable[[], Any]:
        rotated = scenarios[i::cfg.n_envs] + [sc for k, sc in enumerate(scenarios) if k % cfg.n_envs != i]

        def thunk() -> Any:
            return Monitor(PlacementEnv(**(env_kwargs(cfg) | {"scenarios": rotated})))

        return thunk

    vec_cls = SubprocVecEnv if cfg.n_envs > 1 else DummyVecEnv
    env = vec_cls([make(i) for i in range(cfg.n_envs)])
    env.seed(cfg.seed)
    return env


def _start_from(cfg: TrainConfig, model: Any, base: str | None, train_scenarios: list[Scenario],
                log: Callable[[str], None]) -> dict[str, Any]:
    """Load the active agent's weights, or clone the teacher: what the fine-tuning starts from."""
    if base and base.startswith("rl:"):
        from policies.rl import load_agent
        from policies.trained import resolve

        arg = base.removeprefix("rl:")
        load_agent(arg)  # refuses a missing, corrupt or incompatible agent, saying how to fix it
        path = resolve(arg)
        try:
            model.set_parameters(str(path), exact_match=True, device="cpu")
        except Exception as exc:  # noqa: BLE001 - another network shape: say so, do not train from garbage
            raise SpecError(f"active policy {base}: {path} does not fit the network train.py builds "
                            f"({type(exc).__name__}: {exc}); retrain it with `corral train`") from None
        log(f"warm start: the active agent {base} ({path})")
        return {"from": base, "path": str(path), "method": "weights of the active agent"}
    if cfg.warm_start == "none":
        log("warm start: none (--warm-start none): PPO from scratch")
        return {"from": None, "method": "none"}
    from agents.env import PlacementEnv
    from agents.imitation import Teachers, clone, collect
    from policies import make_policy

    # The active heuristic teaches itself (the frame represents every choice it makes); otherwise --warm-start's
    # teacher ("best" has no regime table for a history: tiresias).
    heuristic = bool(base and not base.startswith(("rl:", "deepshare:")) and not make_policy(base).oracle)
    teacher = base if heuristic and base else ("tiresias" if cfg.warm_start == "best" else cfg.warm_start)
    t0 = time.perf_counter()
    env = PlacementEnv(**(env_kwargs(cfg) | {"scenarios": train_scenarios}))
    demos = collect(env, cfg.warm_start_samples, seed=cfg.seed + 1_000_000,
                    teachers=Teachers(teacher))
    stats = clone(model, demos, seed=cfg.seed)
    note = "" if base == teacher else (
        f" (the active policy {base or '(none)'} has no imitation teacher; cloned {teacher} instead)")
    log(f"warm start: cloned {teacher} on {len(demos):,} decisions of the history in "
        f"{time.perf_counter() - t0:.0f} s (agrees with it on {stats['agreement']:.1%}){note}")
    return {"from": base, "method": f"behaviour cloning of {teacher}", "teacher": teacher,
            "samples": len(demos), **{k: round(v, 4) for k, v in stats.items()},
            "wall_s": round(time.perf_counter() - t0, 1)}


def train_from_history(db_url: str | None, out: Path, progress: bool = True,
                       log: Callable[[str], None] = print, **train_kwargs: Any) -> dict[str, Any]:
    """Fine-tune the active policy on the store's history; returns the sidecar metadata written next to the agent."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.utils import set_random_seed


    cfg, history, trace_path = prepare(db_url, out, log, **train_kwargs)
    wall0 = time.perf_counter()
    warnings.filterwarnings("ignore", message="Training and eval env are not of the same type")
    torch.set_num_threads(1)
    set_random_seed(cfg.seed)
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    paths = report_paths(cfg.out)

    train_scenarios, scenarios = history_scenarios(cfg, history, str(trace_path))
    base = history.active_policy
    names = list(BASELINES) + ([base] if base and base not in BASELINES else [])
    log(f"held-out evaluation: {len(scenarios)} window(s) of the history's last quarter; running "
        f"{', '.join(names)} on them")
    try:
        baselines = baseline_metrics(scenarios, names)
    except SpecError as exc:  # the active policy cannot be built (a broken agent): compare with the heuristics only
        log(f"note: active policy {base} left out of the comparison ({exc})")
        names = list(BASELINES)
        baselines = baseline_metrics(scenarios, names)
    rows: list[dict] = []

    def on_eval(row: dict) -> None:
        rows.append(row)
        log(f"eval @ {row['timesteps']:,} steps: avg JCT {row['mean_avg_jct_s'] / 60:.1f} min, "
            + ", ".join(f"{row[f'avg_jct_s_vs_{b}']:.3f}x {b}" for b in names))
        write_eval(paths["eval"], cfg, scenarios, baselines, rows)

    env = _vec_env(cfg, train_scenarios)
    model = MaskablePPO(
        "MlpPolicy", env, learning_rate=cfg.learning_rate, n_steps=cfg.n_steps, batch_size=cfg.batch_size,
        gamma=cfg.gamma, ent_coef=cfg.ent_coef, clip_range=cfg.clip_range, seed=cfg.seed, device="cpu",
        policy_kwargs={"net_arch": list(NET_ARCH)},
    )
    model.set_logger(training_logger(cfg))
    try:
        start = _start_from(cfg, model, base, train_scenarios, log)
        best_dir = cfg.out.parent / f".{cfg.out.stem}.best"
        run_ppo(cfg, model, make_eval_callback(cfg, scenarios, baselines, best_dir, on_eval), progress, log)
    finally:
        env.close()
    started = None if start["method"] == "none" else f"{start['method']}" + (f" ({start['from']})" if start["from"]
                                                                              else "")
    best_row, kept = keep_best(cfg, model, best_dir, rows, started, log)
    wall = time.perf_counter() - wall0
    meta = run_metadata(cfg, model, wall, kept, best_row, paths, warm_start=start, trained_from_history={
        **history.describe(),
        "trace": trace_path.name,
        "train_windows": len(train_scenarios),
        "held_out_windows": [dataclasses.asdict(sc) | {"label": sc.label} for sc in scenarios],
    })
    save_reports(cfg, paths, meta, scenarios, baselines, rows, wall, log, activation_hint(cfg.out))
    return meta
