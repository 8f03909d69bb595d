"""`corral train`: fit a placement agent with stable-baselines3, evaluate it against heuristics on validation windows.

What a run leaves next to `--out NAME.zip`:

* `NAME.zip` the best agent by validation evaluation (`MaskableEvalCallback` saves it), loadable as `rl:NAME.zip`;
* `NAME.json` its metadata: encoding version (the loader checks it), the command and configuration, wall time;
* `NAME.eval.json` the evaluation table: every validation scenario, the baselines' metrics on it (`tiresias`,
  `contention-greedy`), and the agent's metrics at every evaluation;
* `NAME.curve.png` the learning curve: validation average JCT relative to `tiresias`, and the training return.

Validation scenarios come from `agents.scenarios.held_out(part="train")`: windows of the part of each trace training
may see, with model assignments and synthetic seeds training never draws. The best checkpoint is chosen on them, so
they are never the hold-out (the last quarter), which only reports measure (`benchmarks/decision_quality.py`,
`corral evaluate`). The agent is evaluated in its environment; `tests/test_train.py` checks that this gives the very
metrics the `rl:` policy gets in the simulator.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agents.scenarios import SYNTHETIC, Scenario, check_workloads, held_out
from agents.warm_start import warm_start
from policies.trained import sha256_of
from scheduler.core.model import PRESETS, SpecError
from scheduler.core.simulator import Simulator

BASELINES = ("tiresias", "contention-greedy", "gittins")
# Policy and value networks. 64 x 64 cloned the teachers' rarer choices poorly (declining or taking a preemption by
# the finer queues: 85% agreement, against 92% with 128 x 128 and 20 epochs, on 30,000 training decisions).
NET_ARCH = (128, 128)


class TrainConfig(BaseModel):
    """Every knob of a training run, validated before any work starts (errors name the command-line flag)."""

    model_config = ConfigDict(extra="forbid")

    formulation: Literal["corral", "deepshare"] = "corral"
    algo: Literal["maskable-ppo", "ppo"] = "maskable-ppo"
    timesteps: int = Field(300_000, ge=512, le=100_000_000)
    presets: list[str] = Field(default_factory=lambda: ["dgx-a100", "pcie-v100"], min_length=1)
    nodes: tuple[int, int] = (2, 8)
    workloads: list[str] = Field(default_factory=lambda: [SYNTHETIC], min_length=1)
    window: int = Field(300, ge=10, le=20_000)
    load: tuple[float, float] = (0.6, 2.5)
    n_envs: int = Field(2, ge=1, le=64)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    out: Path = Field(default_factory=lambda: default_out("corral"))
    tensorboard: Path | None = None
    eval_freq: int = Field(0, ge=0)  # timesteps between evaluations; 0 = a tenth of the run
    eval_scenarios: int = Field(3, ge=1, le=100)  # validation scenarios per workload
    eval_window: int = Field(500, ge=10, le=20_000)
    eval_load: tuple[float, float] = (0.8, 2.2)
    # Behaviour cloning before PPO: "best" (the best heuristic per workload and load, `agents.imitation.BEST`), a
    # heuristic's name, or "none".
    warm_start: str = "best"
    warm_start_samples: int = Field(40_000, ge=100, le=10_000_000)
    # DAgger rounds after the first clone: each rolls the clone out (following the teacher with probability 1/2, 1/4,
    # ...), labels the decisions it reaches with the teacher's action (half as many as the first clone's) and clones
    # again on everything collected so far.
    dagger_rounds: int = Field(2, ge=0, le=10)
    # Probability that a training window is shared by teams (the agent acts inside the tenancy frame there, and
    # learns from states where its team's standing matters). Validation windows have no teams.
    team_share: float = Field(0.3, ge=0.0, le=1.0)
    # Probability that a training window's jobs carry priorities (10% at a high priority, 5% not preemptible): the
    # agent learns from states where the priority rules matter. Validation windows have none.
    priority_share: float = Field(0.3, ge=0.0, le=1.0)
    # Probability that a training window is an elastic mix (`agents.scenarios.ELASTIC_DRAW`): the agent learns to size
    # elastic jobs (start sizes, grows and shrinks) from the sizing teacher. Validation windows have none.
    elastic_share: float = Field(0.3, ge=0.0, le=1.0)
    learning_rate: float = Field(1e-4, gt=0, le=1)
    n_steps: int = Field(1024, ge=16, le=65_536)  # per environment, per rollout
    batch_size: int = Field(256, ge=8)
    # Undiscounted: rewards sum to minus the total JCT exactly, and a per-decision discount would let the agent
    # push costs away by waiting (many decisions at one instant cost no time but would shrink the future's weight).
    gamma: float = Field(1.0, gt=0, le=1)
    ent_coef: float = Field(0.001, ge=0, le=1)
    clip_range: float = Field(0.1, gt=0, le=1)  # small steps: PPO fine-tunes a cloned policy, it should not forget it

    @field_validator("presets")
    @classmethod
    def _known_presets(cls, v: list[str]) -> list[str]:
        for p in v:
            if p not in PRESETS:
                raise ValueError(f"unknown preset {p!r}; choose from {', '.join(PRESETS)}")
        return v

    @field_validator("nodes")
    @classmethod
    def _node_range(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= v[0] <= v[1] <= 4096:
            raise ValueError(f"node range {v[0]}-{v[1]} must satisfy 1 <= low <= high <= 4096")
        return v

    @field_validator("load", "eval_load")
    @classmethod
    def _load_range(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0.05 <= v[0] <= v[1] <= 3.0:
            raise ValueError(f"load range {v[0]}-{v[1]} must satisfy 0.05 <= low <= high <= 3")
        return v

    @field_validator("warm_start")
    @classmethod
    def _teacher(cls, v: str) -> str:
        if v in ("best", "none"):
            return v
        from policies import make_policy

        if v.startswith(("rl:", "deepshare:")):
            raise ValueError(f"{v!r}: the teacher is a heuristic (or best, or none)")
        policy = make_policy(v)  # UnknownPolicyError lists the names
        if policy.oracle:
            raise ValueError(f"{v!r} reads job durations no scheduler knows: it cannot teach a deployable agent")
        return v

    @field_validator("out")
    @classmethod
    def _zip(cls, v: Path) -> Path:
        if v.suffix != ".zip":
            raise ValueError(f"{v} must end in .zip (the agent is a stable-baselines3 archive)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.formulation == "corral" and self.algo != "maskable-ppo":
            raise ValueError("algo: Corral's formulation trains with maskable-ppo (its actions are masked)")
        if self.formulation == "deepshare" and self.algo != "ppo":
            self.algo = "ppo"  # DeepShare trains plain PPO: its actions are not masked
        if self.formulation == "deepshare":
            self.warm_start = "none"  # DeepShare trains from scratch; its actions have no teacher in our frame
            self.team_share = 0.0  # its grid encodes no teams
            self.priority_share = 0.0  # nor priorities
            self.elastic_share = 0.0  # nor sizes
        if self.batch_size > self.n_steps * self.n_envs:
            raise ValueError(f"batch_size {self.batch_size} exceeds a rollout of n_steps x n_envs = "
                             f"{self.n_steps * self.n_envs}")
        return self

    @property
    def eval_every(self) -> int:
        return self.eval_freq or max(self.timesteps // 10, self.n_steps * self.n_envs)


FLAGS = {  # config field -> the flag users typed, so an error names what they can fix
    "timesteps": "--timesteps", "presets": "--cluster", "nodes": "--cluster", "workloads": "--workload",
    "window": "--window", "load": "--load", "n_envs": "--n-envs", "seed": "--seed", "out": "--out",
    "tensorboard": "--tensorboard", "eval_freq": "--eval-freq", "eval_scenarios": "--eval-scenarios",
    "eval_window": "--eval-window", "eval_load": "--eval-load", "algo": "--algo", "formulation": "--formulation",
    "learning_rate": "--learning-rate", "warm_start": "--warm-start", "warm_start_samples": "--warm-start-samples",
    "dagger_rounds": "--dagger-rounds", "n_steps": "--n-steps", "batch_size": "--batch-size",
    "team_share": "--team-share", "priority_share": "--priority-share", "elastic_share": "--elastic-share",
}


def make_config(**kwargs: Any) -> TrainConfig:
    """Validate a configuration; raise SpecError naming each bad flag and its problem."""
    try:
        cfg = TrainConfig(**kwargs)
    except ValidationError as exc:
        parts = []
        for e in exc.errors():
            field = str(e["loc"][0]) if e["loc"] else ""
            msg = e["msg"].removeprefix("Value error, ")
            parts.append(f"{FLAGS.get(field, field or 'configuration')}: {msg}")
        raise SpecError("; ".join(parts)) from None
    check_workloads(cfg.workloads)
    return cfg


# ---- environments ---------------------------------------------------------------------------------------------------


def env_class(cfg: TrainConfig) -> type:
    if cfg.formulation == "deepshare":
        from agents.deepshare_env import DeepShareEnv

        return DeepShareEnv
    from agents.env import PlacementEnv

    return PlacementEnv


def env_kwargs(cfg: TrainConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"workloads": cfg.workloads, "presets": cfg.presets, "nodes": cfg.nodes,
                              "window": cfg.window, "load": cfg.load, "part": "train"}
    if cfg.formulation == "corral":
        kwargs["team_share"] = cfg.team_share
        kwargs["priority_share"] = cfg.priority_share
        kwargs["elastic_share"] = cfg.elastic_share
    return kwargs


def eval_scenarios(cfg: TrainConfig) -> list[Scenario]:
    # Validation windows, not the hold-out: the best checkpoint is chosen on them, and choosing is tuning.
    scenarios = held_out(cfg.workloads, cfg.presets, cfg.eval_window, cfg.eval_load, cfg.eval_scenarios, cfg.seed,
                         nodes=cfg.nodes, part="train")
    if cfg.formulation == "deepshare":
        # DeepShare's grid is fixed: a scenario whose cluster it cannot describe would be run on a capped cluster,
        # and comparing that with baselines on the full one would be meaningless.
        from policies.deepshare import grid_problem

        scenarios = [sc for sc in scenarios if grid_problem(sc.build()[0]) is None]
        if not scenarios:
            raise SpecError("--workload: no validation scenario fits DeepShare's 16-node grid; add synthetic or "
                            "smaller traces")
    return scenarios


def baseline_metrics(scenarios: Sequence[Scenario], names: Sequence[str] = BASELINES) -> dict[str, list[dict]]:
    """Each baseline's metrics on each scenario (deterministic policies: one run each)."""
    from policies import make_policy

    out: dict[str, list[dict]] = {name: [] for name in names}
    for sc in scenarios:
        cluster, jobs = sc.build()
        for name in names:
            out[name].append(Simulator(cluster, jobs, make_policy(name, 0)).run().metrics)
    return out


# ---- evaluation callback --------------------------------------------------------------------------------------------


def make_eval_callback(cfg: TrainConfig, scenarios: list[Scenario], baselines: dict[str, list[dict]],
                       best_dir: Path, on_eval: Callable[[dict], None]) -> Any:
    from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    # An agent that keeps passing jobs over would make a validation episode run to 50,000 decisions; 20 per job is
    # far beyond what any sensible agent needs, and such an episode is reported as truncated.
    eval_env = DummyVecEnv([lambda: Monitor(env_class(cfg)(**env_kwargs(cfg), scenarios=scenarios,
                                                           max_decisions=20 * cfg.eval_window))])

    class HeldOutEval(MaskableEvalCallback):
        """MaskableEvalCallback that also keeps each validation episode's simulator metrics, in scenario order."""

        def __init__(self) -> None:
            super().__init__(eval_env, n_eval_episodes=len(scenarios), eval_freq=max(cfg.eval_every // cfg.n_envs, 1),
                             best_model_save_path=str(best_dir), deterministic=True, verbose=0,
                             use_masking=cfg.formulation == "corral")
            self.episode_metrics: list[dict] = []

        def _log_success_callback(self, locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
            super()._log_success_callback(locals_, globals_)
            if locals_["done"] and "metrics" in locals_["info"]:
                self.episode_metrics.append(locals_["info"]["metrics"])

        def _on_training_start(self) -> None:
            super()._on_training_start()
            saved, self.n_calls = self.n_calls, 0  # evaluate the starting point too (e.g. the cloned teacher)
            self._on_step()
            self.n_calls = saved

        def _on_step(self) -> bool:
            due = self.eval_freq > 0 and self.n_calls % self.eval_freq == 0
            if due:
                self.eval_env.env_method("rewind")  # evaluate_policy resets first: scenario 0 comes first
                self.episode_metrics = []
            keep_going = super()._on_step()
            if due:
                row = evaluation_row(self.num_timesteps, self.episode_metrics[: len(scenarios)], baselines)
                row["mean_reward"] = self.last_mean_reward
                episodes = [ep["r"] for ep in self.model.ep_info_buffer or []]
                row["train_return"] = float(np.mean(episodes)) if episodes else None
                on_eval(row)
            return keep_going

    return HeldOutEval()


def evaluation_row(timesteps: int, metrics: list[dict], baselines: dict[str, list[dict]]) -> dict[str, Any]:
    """The agent's validation figures at one evaluation, with its ratios to each baseline (mean over scenarios)."""
    # Truncated episodes (the agent hit max_decisions) only measured the jobs that finished: they are counted, and
    # left out of the means and ratios rather than flatter them.
    complete = [i for i, m in enumerate(metrics) if not m.get("truncated")]
    row: dict[str, Any] = {"timesteps": int(timesteps), "scenarios": metrics,
                           "truncated_episodes": len(metrics) - len(complete)}
    for key in ("avg_jct_s", "p99_jct_s"):
        row[f"mean_{key}"] = float(np.mean([metrics[i][key] for i in complete])) if complete else float("nan")
        for name, base in baselines.items():
            ratios = [metrics[i][key] / base[i][key] for i in complete if base[i][key] > 0]
            row[f"{key}_vs_{name}"] = float(np.mean(ratios)) if ratios else float("nan")
    return row


# ---- the run --------------------------------------------------------------------------------------------------------


def report_paths(out: Path) -> dict[str, Path]:
    stem = out.with_suffix("")
    return {"meta": out.with_suffix(".json"), "eval": Path(f"{stem}.eval.json"), "curve": Path(f"{stem}.curve.png")}


def training_logger(cfg: TrainConfig) -> Any:
    """The model's logger: TensorBoard files under `--tensorboard` when asked for, else none at all. (Left to itself,
    stable-baselines3 makes a `SB3-<date>` folder in the system's temporary directory on every `learn()`.)"""
    from stable_baselines3.common.logger import Logger, configure

    if cfg.tensorboard is not None:
        return configure(str(cfg.tensorboard / cfg.out.stem), ["tensorboard"])
    return Logger(folder=None, output_formats=[])


def default_out(kind: str) -> Path:
    """A new agent's path when `--out` is not given: `$CORRAL_HOME/agents/KIND-YYYYmmdd-HHMMSS.zip`, never the shipped
    agents/zoo (a training run must not replace the agent the service runs unless someone asks for exactly that)."""
    from scheduler.core.paths import agents_dir

    return agents_dir() / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.zip"


def activation_hint(out: Path, prefix: str = "rl") -> str:
    """How to make the saved agent the live service's policy: the API takes agents by name, from the agent
    directories only."""
    from policies.trained import agent_dirs

    name = f"{prefix}:{out.stem}"
    if out.resolve().parent in [d.resolve() for d in agent_dirs()]:
        return f"; make it active with `corral policy {name}` (or PUT /api/v1/policies/active {{\"name\": \"{name}\"}})"
    return (f"; to serve it, an admin copies {out} and its .json into {agent_dirs()[-1]} and runs "
            f"`corral policy {name}`")


def check_out(out: Path, force: bool) -> None:
    """Refuse to overwrite an existing agent (its archive or any file of its report) unless `force`."""
    taken = [p for p in (out, *report_paths(out).values()) if p.exists()]
    if taken and not force:
        raise SpecError(f"--out {out}: {', '.join(str(p) for p in taken)} already exist(s); pass --force to "
                        "overwrite, or choose another --out")


# ---- progress and what was kept ---------------------------------------------------------------------------------------


def planned_timesteps(cfg: TrainConfig) -> int:
    """The timesteps PPO really runs. A timestep is one environment step, i.e. one placement decision, summed over the
    `n_envs` environments; PPO only stops between whole rollouts of `n_steps x n_envs` of them, so `--timesteps`
    rounds up to a multiple of that (3,000 with 2 x 1,024 is 4,096: stable-baselines3's own bar read "4,082/3,000")."""
    rollout = cfg.n_steps * cfg.n_envs
    return -(-cfg.timesteps // rollout) * rollout


def make_progress_callback(total: int, console: Any = None) -> Any:
    """A rich progress bar whose count is the model's own `num_timesteps`, the unit `total` is in (SB3's bar adds
    n_envs per step towards `--timesteps`, which the last rollout overshoots)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from stable_baselines3.common.callbacks import BaseCallback

    class TimestepProgress(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.total = total
            self.bar = Progress(TextColumn("training (timesteps = decisions, all envs)"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                                console=console or Console(stderr=True))
            self.task = self.bar.add_task("timesteps", total=total)

        @property
        def completed(self) -> int:
            return int(self.bar.tasks[0].completed)

        def _on_training_start(self) -> None:
            self.bar.start()

        def _on_step(self) -> bool:
            self.bar.update(self.task, completed=self.num_timesteps)
            return True

        def _on_training_end(self) -> None:
            self.bar.update(self.task, completed=self.num_timesteps)
            self.bar.stop()

    return TimestepProgress()


def kept_checkpoint(best_saved: bool, best_row: dict[str, Any] | None, start: str | None,
                    final_timesteps: int) -> dict[str, Any]:
    """Which weights were saved: the best validation evaluation, or the last weights when no evaluation ran. `start`
    describes the warm start (the policy before any PPO update, e.g. one cloned from a heuristic), None without one;
    the evaluation at timestep 0 is that policy, so a best row at 0 means PPO never beat it."""
    if best_saved and best_row is not None:
        at = int(best_row["timesteps"])
        is_warm = start is not None and at == 0
        what = (f"the warm start ({start}, before PPO: no PPO update beat it on the validation scenarios)" if is_warm
                else f"the best validation evaluation, at {at:,} timesteps")
        return {"checkpoint": "best", "timesteps": at, "warm_start": is_warm, "description": what}
    return {"checkpoint": "last", "timesteps": final_timesteps, "warm_start": False,
            "description": f"the last weights, at {final_timesteps:,} timesteps (no validation evaluation ran)"}


def run_ppo(cfg: TrainConfig, model: Any, eval_callback: Any, progress: bool, log: Callable[[str], None],
            console: Any = None) -> None:
    """`model.learn` for `--timesteps`, saying first how many timesteps really run, with a bar in that unit."""
    from stable_baselines3.common.callbacks import CallbackList

    planned = planned_timesteps(cfg)
    if planned != cfg.timesteps:
        log(f"PPO runs whole rollouts of n_steps x n_envs = {cfg.n_steps * cfg.n_envs:,} timesteps (decisions, "
            f"summed over the environments): --timesteps {cfg.timesteps:,} runs {planned:,}")
    callbacks = [eval_callback] + ([make_progress_callback(planned, console)] if progress else [])
    model.learn(total_timesteps=cfg.timesteps, callback=CallbackList(callbacks), tb_log_name=cfg.out.stem)


def keep_best(cfg: TrainConfig, model: Any, best_dir: Path, rows: list[dict], start: str | None,
              log: Callable[[str], None]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Save the best evaluated weights (or the last ones) as `cfg.out`; returns the best row and what was kept."""
    best = best_dir / "best_model.zip"
    best_saved = best.is_file()
    if best_saved:
        shutil.move(str(best), cfg.out)
    else:  # no evaluation ran (a very short run): keep the final weights
        model.save(cfg.out)
    shutil.rmtree(best_dir, ignore_errors=True)
    best_row = max(rows, key=lambda r: r["mean_reward"]) if rows else None  # the first best: the one the callback saved
    kept = kept_checkpoint(best_saved, best_row, start, int(model.num_timesteps))
    log(f"kept {kept['description']}")
    return best_row, kept


def train(cfg: TrainConfig, progress: bool = True, log: Callable[[str], None] = print,
          console: Any = None) -> dict[str, Any]:
    """Train, evaluate, save the best agent and its report. Returns the metadata written next to the model."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv


    wall0 = time.perf_counter()
    # The validation evaluation runs in-process while training environments may be subprocesses: intended.
    warnings.filterwarnings("ignore", message="Training and eval env are not of the same type")
    torch.set_num_threads(1)  # small networks: threads cost more than they save, and env workers want the cores
    set_random_seed(cfg.seed)
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    paths = report_paths(cfg.out)

    scenarios = eval_scenarios(cfg)
    log(f"validation evaluation: {len(scenarios)} scenarios; running baselines {', '.join(BASELINES)} on them")
    baselines = baseline_metrics(scenarios)
    rows: list[dict] = []

    def on_eval(row: dict) -> None:
        rows.append(row)
        log(f"eval @ {row['timesteps']:,} steps: avg JCT {row['mean_avg_jct_s'] / 3600:.2f} h, "
            + ", ".join(f"{row[f'avg_jct_s_vs_{b}']:.3f}x {b}" for b in BASELINES)
            + (f" ({row['truncated_episodes']} episodes truncated, left out)" if row["truncated_episodes"] else ""))
        write_eval(paths["eval"], cfg, scenarios, baselines, rows)

    vec_cls = SubprocVecEnv if cfg.n_envs > 1 else DummyVecEnv
    env = make_vec_env(env_class(cfg), n_envs=cfg.n_envs, seed=cfg.seed, env_kwargs=env_kwargs(cfg),
                       vec_env_cls=vec_cls)
    algo_cls = MaskablePPO if cfg.algo == "maskable-ppo" else PPO
    model = algo_cls(
        "MlpPolicy", env, learning_rate=cfg.learning_rate, n_steps=cfg.n_steps, batch_size=cfg.batch_size,
        gamma=cfg.gamma, ent_coef=cfg.ent_coef, clip_range=cfg.clip_range, seed=cfg.seed, device="cpu",
        policy_kwargs={"net_arch": list(NET_ARCH)},
    )
    model.set_logger(training_logger(cfg))
    warm: dict[str, float] | None = None
    if cfg.warm_start != "none":
        warm = warm_start(cfg, model, log, env_kwargs(cfg), progress=progress, console=console)
    best_dir = cfg.out.parent / f".{cfg.out.stem}.best"
    try:
        run_ppo(cfg, model, make_eval_callback(cfg, scenarios, baselines, best_dir, on_eval), progress, log, console)
    finally:
        env.close()
    start = f"the policy cloned from {cfg.warm_start}" if warm else None
    best_row, kept = keep_best(cfg, model, best_dir, rows, start, log)
    wall = time.perf_counter() - wall0

    meta = run_metadata(cfg, model, wall, kept, best_row, paths,
                        warm_start={"teacher": cfg.warm_start, **warm} if warm else None)
    save_reports(cfg, paths, meta, scenarios, baselines, rows, wall, log,
                 activation_hint(cfg.out, "rl" if cfg.formulation == "corral" else "deepshare"))
    return meta


def run_metadata(cfg: TrainConfig, model: Any, wall: float, kept: Any, best_row: dict[str, Any] | None,
                 paths: dict[str, Path], **more: Any) -> dict[str, Any]:
    """The sidecar of a trained agent: what was trained how, what ran, what was kept and where its reports are.
    `more` adds what a kind of run knows besides (its warm start; a fine-tune's history), before the evaluation."""
    from policies.rl_encoding import ENCODING_VERSION

    return {
        "formulation": cfg.formulation,
        "encoding_version": ENCODING_VERSION if cfg.formulation == "corral" else deepshare_version(),
        "algo": cfg.algo,
        "command": command_line(cfg),
        "config": json.loads(cfg.model_dump_json()),
        "train_wall_s": round(wall, 1),
        "timesteps": int(model.num_timesteps),  # what ran: --timesteps rounded up to whole rollouts
        "timesteps_asked": cfg.timesteps,
        "kept": kept,
        **more,
        "best_eval": {k: v for k, v in best_row.items() if k != "scenarios"} if best_row else None,
        "eval_report": paths["eval"].name,
        "learning_curve": paths["curve"].name,
    }


def save_reports(cfg: TrainConfig, paths: dict[str, Path], meta: dict[str, Any], scenarios: Any, baselines: Any,
                 rows: list[dict[str, Any]], wall: float, log: Callable[[str], None], hint: str = "") -> None:
    """What every training run leaves beside its agent: the sidecar, the validation report and the learning curve."""
    meta["sha256"] = sha256_of(cfg.out)  # what the server checks before it loads the agent by name
    paths["meta"].write_text(json.dumps(meta, indent=2) + "\n")
    write_eval(paths["eval"], cfg, scenarios, baselines, rows)
    if rows:
        plot_curve(paths["curve"], rows)
    log(f"saved {cfg.out} ({cfg.out.stat().st_size / 1024:.0f} KiB) in {wall / 60:.1f} min; "
        f"report {paths['eval']}, curve {paths['curve']}{hint}")


def deepshare_version() -> int:
    from policies.deepshare import DEEPSHARE_VERSION

    return DEEPSHARE_VERSION


def command_line(cfg: TrainConfig) -> str:
    args = sys.argv[1:] if sys.argv and Path(sys.argv[0]).name == "corral" else []
    return "corral " + shlex.join(args) if args else f"corral train (config: {cfg.model_dump_json()})"


def write_eval(path: Path, cfg: TrainConfig, scenarios: list[Scenario], baselines: dict[str, list[dict]],
               rows: list[dict]) -> None:
    report = {
        "scenarios": [asdict(sc) | {"label": sc.label} for sc in scenarios],
        "baselines": baselines,
        "evaluations": rows,
    }
    path.write_text(json.dumps(report, indent=1) + "\n")


def plot_curve(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["timesteps"] for r in rows]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, style in zip(BASELINES, ("-", "--", ":"), strict=False):
        ax.plot(steps, [r[f"avg_jct_s_vs_{name}"] for r in rows], style, marker="o", label=f"agent / {name}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("training timesteps")
    ax.set_ylabel("average JCT ratio (lower is better)")
    ax.set_title("Validation windows: agent vs baselines")
    ax.legend()
    ax.grid(alpha=0.3)
    train = [(s, r["train_return"]) for s, r in zip(steps, rows, strict=False) if r.get("train_return") is not None]
    if train:
        ax2.plot(*zip(*train, strict=False), marker="o", color="tab:green")
    ax2.set_xlabel("training timesteps")
    ax2.set_ylabel("mean episode return (training windows)")
    ax2.set_title("Training return")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
