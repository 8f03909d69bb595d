"""The warm start of `corral train`: the agent cloned from a heuristic teacher before PPO, then DAgger rounds in which
the clone acts and the teacher labels the states it reaches (`agents.imitation`), under a progress bar."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class WarmStartConfig(Protocol):
    """What the warm start reads of `corral train`'s configuration (`agents.train.TrainConfig`)."""

    warm_start: str  # the teacher: a heuristic's name, or "best" (the best one per regime)
    warm_start_samples: int
    dagger_rounds: int
    seed: int


def warm_start(cfg: WarmStartConfig, model: Any, log: Callable[[str], None], env_kwargs: dict[str, Any],
               progress: bool = False, console: Any = None) -> dict[str, Any]:
    """Clone the teacher into `model` (on environments made with `env_kwargs`), then the DAgger rounds; what it
    did, for the agent's metadata."""
    with warm_start_bar(cfg, progress, console) as advance:
        return _warm_start(cfg, model, log, env_kwargs, advance)


@contextmanager
def warm_start_bar(cfg: WarmStartConfig, enabled: bool, console: Any = None) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar over the warm start's teacher decisions (the first collection and each DAgger round's):
    the phase before PPO can take minutes, and without it `corral train` printed nothing meanwhile. Yields what
    `collect` calls with each episode's decisions (None when disabled)."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = cfg.warm_start_samples + cfg.dagger_rounds * (cfg.warm_start_samples // 2)
    with Progress(TextColumn("warm start (teacher decisions, then cloning)"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console or Console(stderr=True), transient=False) as bar:
        task = bar.add_task("decisions", total=total)
        # A collection stops at the end of an episode, past its target: the bar counts up to its total at most.
        yield lambda k: bar.update(task, completed=min(total, bar.tasks[0].completed + k))


def _warm_start(cfg: WarmStartConfig, model: Any, log: Callable[[str], None], env_kw: dict[str, Any],
                advance: Callable[[int], None] | None) -> dict[str, Any]:
    from agents.env import PlacementEnv
    from agents.imitation import BEST, Teachers, agreement, clone, collect

    t0 = time.perf_counter()
    teachers = BEST if cfg.warm_start == "best" else Teachers(cfg.warm_start)
    log(f"warm start: cloning {teacher_words(teachers)} on {cfg.warm_start_samples:,} decisions")
    env = PlacementEnv(**env_kw)
    demos = collect(env, cfg.warm_start_samples, seed=cfg.seed + 1_000_000, teachers=teachers, progress=advance)
    stats: dict[str, Any] = clone(model, demos, seed=cfg.seed)
    log(f"warm start: cloned on {len(demos):,} decisions in {time.perf_counter() - t0:.0f} s (agrees with the "
        f"teacher on {stats['agreement']:.1%}; the frame represented {stats['teacher_exact']:.1%} of its choices "
        "exactly)")
    rounds = []

    def actor(obs: Any, mask: Any) -> int:
        return int(model.predict(obs, action_masks=mask, deterministic=True)[0])

    for r in range(1, cfg.dagger_rounds + 1):
        beta = 0.5**r
        more = collect(env, cfg.warm_start_samples // 2, seed=cfg.seed + 1_000_000 + 10_000 * r, teachers=teachers,
                       actor=actor, beta=beta, progress=advance)
        before = agreement(model, more)
        demos = demos + more
        stats = clone(model, demos, epochs=10, seed=cfg.seed + r)
        rounds.append({"round": r, "beta": beta, "samples": len(more), "agreement_before": round(before, 4),
                       "agreement_after": round(agreement(model, more), 4)})
        log(f"DAgger round {r}: {len(more):,} decisions with the clone acting {1 - beta:.0%} of the time; it agreed "
            f"with the teacher on {before:.1%} of them, {rounds[-1]['agreement_after']:.1%} after cloning again on "
            f"all {len(demos):,}")
    stats = {"samples": len(demos), **{k: round(v, 4) for k, v in stats.items()}, "wall_s": round(
        time.perf_counter() - t0, 1), "teachers": teacher_words(teachers), "dagger": rounds}
    log(f"warm start: done in {stats['wall_s']:.0f} s")
    return stats


def teacher_words(teachers: Any) -> str:
    bands = "; ".join(f"{kind}: " + ", ".join(f"{name} up to load {upto:g}" for upto, name in rows)
                      for kind, rows in teachers.bands.items())
    sized = f"; on elastic windows each wrapped in {teachers.sizing}:" if getattr(teachers, "sizing", None) else ""
    return f"{teachers.default}" + (f" (by regime: {bands}; else {teachers.default}{sized})" if bands else sized)
