"""The live service at datacentre scale: 4,096 dgx-a100 nodes x 8 GPUs (32,768 GPUs), 10,000 jobs queued.

    python benchmarks/datacentre.py --decisions 20 --passes 6   # every policy: the heuristics ~8 min of CPU
    python benchmarks/datacentre.py --nodes 64 --queued 200 --policies fifo,rl:default   # a quick look

What it measures, per policy (`policies.make_policy` names: every heuristic and `rl:default`), in process: the live
`Controller` (`scheduler.live.controller`) on a store on SQLite, over a backend without Ray whose workers start at
the next poll and run until the benchmark ends them (as `benchmarks/live.py`'s "decisions" part does, at scale):

- **a decision**: one call of the policy the controller asks (the active policy inside the scheduling rules' frame,
  `Placing.policy`) on its view and its ready queue, p50, p99 and max over `--decisions` calls, with the cluster
  **partly full** (about half its GPUs busy: the call places what fits) and **full** (every GPU busy: nothing
  fits, the call says why each job waits). The target is p99 <= 50 ms for every heuristic and `rl:default`.
- **a whole pass** (`Controller.step()`, the store's reads and writes included, the workers polled every pass) on
  the full cluster: when nothing changed (the policy is not asked), and when one running job ended and the policy
  placed queued jobs on its GPUs (the end recorded, the placements written, the workers launched), p50 and max over
  `--passes` passes of each.

Every figure is the process's CPU time (`--clock wall` for the wall clock): on a machine shared with other work the
wall clock measures the machine's load; on a dedicated controller host the two agree. The heap is frozen while a
controller is measured, as `corral serve` freezes its own once its controller has started (`scheduler.core.heap`);
each policy's line counts the full collections that still ran during its decisions.

The two states are built once (by `fifo-backfill`: whole-GPU jobs of 1 to 64 GPUs, the last GPUs by 1-GPU jobs),
each with the same 10,000 queued jobs (0.25 to 64 GPUs, a seeded draw). One controller, restarted on the partly full
store, is asked for each policy's decisions in turn (none applied: the state stays as it is). For the full cluster
each policy gets its own copy of the store and a controller restarted on it (adopting the runs, as after a restart);
its first passes, untimed, let it act on the queue as it would (a preempting policy may reshuffle the runs, and
`gittins` restarts thousands of them) before anything is timed.

Every policy is asked at the same moment of the states' lives: `--age-s` (default an hour) after they were built, so
the running jobs have run about that long, whichever policy the run measures first. Tiresias and Gittins rank jobs
by the service they attained, so what a call of theirs preempts, and costs, depends on it: measured at the wall
clock's time instead, each met the states as old as the policies before it had made them (a few minutes to half an
hour), and a figure moved with its place in the list.
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.core.heap import heap_frozen
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.runs import JobStatus, Launch, NodeInfo
from scheduler.live.store import Store, queries

PRESET = "dgx-a100"
GPUS_PER_NODE = 8
FILL_POLICY = "fifo-backfill"
FILL_SIZES = [1, 2, 4, 8, 8, 16, 32, 64]  # the running jobs' GPUs (whole GPUs: the full cluster is wholly full)
QUEUED_SIZES = [0.25, 0.5, 1, 1, 2, 4, 8, 16, 32, 64]
DURATIONS_S = [600.0, 3600.0, 4 * 3600.0, 24 * 3600.0]
TARGET_MS = 50.0
AGE_S = 3600.0  # how long the running jobs have run when the policies are asked (module docstring)
# What the figures time: the process's CPU time by default, so a machine shared with other work (this project's
# 2-core one often runs at a load of 10 or more) does not inflate them; `--clock wall` times the wall clock (what a
# user waits, the same on a dedicated controller host).
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
clock = CLOCKS["cpu"]


class InProcessBackend:
    """The `Backend` protocol without Ray: a launched (or adopted) run's workers are up at the next poll and run until
    `end` says they succeeded."""

    def __init__(self, names: list[str], gpus: int) -> None:
        self.names, self.gpus = names, gpus
        self.launches: dict[int, Launch] = {}
        self.started: dict[int, float] = {}
        self.ended: set[int] = set()

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(name=n, gpus=self.gpus, alive=True, ray_node_id=n, address="127.0.0.1") for n in self.names]

    def launch(self, launch: Launch) -> None:
        self.launches[launch.job_id] = launch

    def adopt(self, launch: Launch) -> bool:
        self.launches[launch.job_id] = launch
        self.started.setdefault(launch.job_id, time.time())
        return True

    def reap_orphans(self, keep: set[str]) -> list[str]:
        return []

    def set_rate(self, job_id: int, rate: float) -> None:
        pass

    def stop(self, job_id: int) -> None:
        self.forget(job_id)

    def forget(self, job_id: int) -> None:
        self.launches.pop(job_id, None)
        self.started.pop(job_id, None)
        self.ended.discard(job_id)

    def disown(self) -> None:
        self.launches.clear()

    def end(self, job_id: int) -> None:
        """The run's workers exit 0 (reported at the next poll)."""
        self.ended.add(job_id)

    def poll(self) -> list[JobStatus]:
        now = time.time()
        out = []
        for job_id, run in self.launches.items():
            t0 = self.started.setdefault(job_id, now)
            n = len(run.ranks)
            done = job_id in self.ended
            out.append(JobStatus(job_id=job_id, attempt=run.attempt, phase="succeeded" if done else "running",
                                 started_at=[t0] * n, ended_at=[now if done else None] * n,
                                 exit_codes=[0 if done else None] * n, done_s=0.0, error=""))
        return out


@dataclass
class Figures:
    """One policy's figures, in milliseconds."""

    policy: str
    partly: list[float] = field(default_factory=list)  # decisions on the partly full cluster
    full: list[float] = field(default_factory=list)  # decisions on the full cluster
    idle: list[float] = field(default_factory=list)  # passes where nothing changed
    placing: list[float] = field(default_factory=list)  # passes where a job ended and others were placed
    placed: int = 0  # jobs the placing passes placed
    queued: int = 0  # pending when the full-cluster decisions were timed
    busy: float = 0.0  # share of GPUs busy then
    full_gcs: int = 0  # the collector's full collections during the timed decisions (`gc.get_stats`)


def node_names(nodes: int) -> list[str]:
    return [f"n{i}" for i in range(nodes)]


def controller(store: Store, backend: InProcessBackend, nodes: int, policy: str) -> Controller:
    from policies import make_policy

    with store.session(write=True) as s:
        queries.activate_policy(s, policy, by="benchmark")
    return Controller(store, backend, build_live_cluster(PRESET, [GPUS_PER_NODE] * nodes), node_names(nodes),
                      make_policy, default_policy=policy, tick_s=0.5, preset=PRESET)


def submit(store: Store, sizes: Sequence[float], durations: Sequence[float], prefix: str) -> None:
    with store.session(write=True) as s:
        user = queries.ensure_user(s, "bench")
        for i, (g, d) in enumerate(zip(sizes, durations, strict=True)):
            queries.submit(s, user, {"name": f"{prefix}{i}", "kind": "emulated", "model": "ResNet-50-bs64",
                                     "num_gpus": float(g), "duration_s": float(d)})


def step(ctl: Controller) -> None:
    ctl._last_poll = 0.0  # poll the workers at every pass, as a loop woken by an event does
    ctl.step()


def settle(ctl: Controller, passes: int = 3) -> None:
    """Passes until the workers of what was placed report started (and the policy has seen it)."""
    for _ in range(passes):
        step(ctl)


def fill_to(ctl: Controller, store: Store, gpus: int, rng: np.random.Generator, tag: str) -> None:
    """Run whole-GPU jobs until about `gpus` GPUs are busy, then 1-GPU jobs up to exactly `gpus`."""
    busy = ctl.state.cluster.num_gpus - ctl.state.free_whole
    sizes: list[int] = []
    while busy + sum(sizes) < gpus * 0.97:
        g = int(rng.choice(FILL_SIZES))
        if busy + sum(sizes) + g <= gpus:
            sizes.append(g)
    submit(store, sizes, rng.choice(DURATIONS_S, size=len(sizes)), f"{tag}-")
    settle(ctl)
    ctl.placer.asked = ()
    while (busy := ctl.state.cluster.num_gpus - ctl.state.free_whole) < gpus:
        submit(store, [1] * (gpus - busy), [DURATIONS_S[-1]] * (gpus - busy), f"{tag}-top-")
        settle(ctl)
    assert not ctl.pending, f"{len(ctl.pending)} fill jobs did not fit"


def build_states(work: Path, nodes: int, queued: int, seed: int) -> tuple[Path, Path]:
    """The partly full and the full cluster's stores, built once by `FILL_POLICY`, each with the same `queued` jobs
    submitted after (no pass has seen them)."""
    rng = np.random.default_rng(seed)
    db = work / "fill.db"
    store = Store.open(f"sqlite:///{db}")
    backend = InProcessBackend(node_names(nodes), GPUS_PER_NODE)
    ctl = controller(store, backend, nodes, FILL_POLICY)
    ctl.recover()
    total = nodes * GPUS_PER_NODE
    fill_to(ctl, store, total // 2, rng, "half")
    half, full = work / "half.db", work / "full.db"
    copy_db(db, half)
    fill_to(ctl, store, total, rng, "full")
    copy_db(db, full)
    store.close()
    sizes, durations = queue_of(queued, seed)
    for state in (half, full):
        store = Store.open(f"sqlite:///{state}")
        submit(store, sizes, durations, "q")
        store.close()
    return half, full


def copy_db(src: Path, dst: Path) -> None:
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    with b:
        a.backup(b)
    a.close()
    b.close()


def queue_of(count: int, seed: int) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed + 1)
    return list(rng.choice(QUEUED_SIZES, size=count)), list(rng.choice(DURATIONS_S, size=count))


def start(state: Path, nodes: int, policy: str) -> tuple[Controller, Store, InProcessBackend]:
    """A controller restarted on the store `state` (adopting its runs), its active policy `policy`."""
    store = Store.open(f"sqlite:///{state}")
    backend = InProcessBackend(node_names(nodes), GPUS_PER_NODE)
    ctl = controller(store, backend, nodes, policy)
    ctl.recover()
    return ctl, store, backend


def full_collections() -> int:
    return int(gc.get_stats()[2]["collections"])


def decisions(ctl: Controller, count: int, now: float) -> list[float]:
    """`count` calls of the controller's policy on its view and ready queue at the time `now`, in ms (none
    applied)."""
    ctl.m.view.now = now
    policy = ctl.placer.policy
    assert policy is not None
    ready = ctl.placer.ready(ctl.m, now, False)
    out = []
    for _ in range(count):
        t0 = clock()
        policy.schedule(ctl.m.view, ready, now)
        out.append((clock() - t0) * 1000)
    return out


def timed(run: Callable[[], object]) -> float:
    t0 = clock()
    run()
    return (clock() - t0) * 1000


def measure_partly(fig: Figures, ctl: Controller, n_decisions: int, now: float) -> None:
    """Decisions on the partly full cluster: the controller never passes here (nothing is applied)."""
    with ctl.store.session(write=True) as s:
        ctl.placer.load_policy(s, ctl.m)
    decisions(ctl, 1, now)  # a first call builds what a policy caches for the cluster
    before = full_collections()
    fig.partly = decisions(ctl, max(3, n_decisions // 3), now)
    fig.full_gcs += full_collections() - before


def measure_full(fig: Figures, ctl: Controller, backend: InProcessBackend, n_decisions: int, n_passes: int,
                 rng: np.random.Generator, now: float) -> None:
    settle(ctl)  # the policy's first answers on this queue (a preempting policy may reshuffle runs): untimed
    fig.queued = len(ctl.pending)
    fig.busy = 1.0 - ctl.view.free_capacity / ctl.cluster.num_gpus
    decisions(ctl, 1, now)
    before = full_collections()
    fig.full = decisions(ctl, n_decisions, now)
    fig.full_gcs += full_collections() - before
    for _ in range(n_passes):
        fig.idle.append(timed(lambda: step(ctl)))
    for _ in range(n_passes):
        backend.end(int(rng.choice(sorted(backend.launches))))
        ctl._last_poll = 0.0
        t0 = clock()
        stats = ctl.step()
        fig.placing.append((clock() - t0) * 1000)
        fig.placed += stats.placed
        settle(ctl, 2)  # the placed runs' workers report started (untimed)


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def table(figs: list[Figures]) -> str:
    head = ("| policy | decision, partly full: p50 / p99 / max | decision, full: p50 / p99 / max | "
            "pass, nothing changed: p50 / max | pass, an end and placements: p50 / max | placed |")
    rows = [head, "|---|---:|---:|---:|---:|---:|"]
    for f in figs:
        worst = max(pct(f.partly, 99), pct(f.full, 99))
        mark = "" if worst <= TARGET_MS else " **(misses)**"
        rows.append(f"| {f.policy}{mark} | {pct(f.partly, 50):.1f} / {pct(f.partly, 99):.1f} / {max(f.partly):.1f} | "
                    f"{pct(f.full, 50):.1f} / {pct(f.full, 99):.1f} / {max(f.full):.1f} | "
                    f"{pct(f.idle, 50):.1f} / {max(f.idle):.1f} | "
                    f"{pct(f.placing, 50):.1f} / {max(f.placing):.1f} | {f.placed} |")
    return "\n".join(rows)


def default_policies() -> list[str]:
    from policies import available

    return [name for name in available() if ":" not in name] + ["rl:default"]


def run(nodes: int, queued: int, policies: list[str], n_decisions: int, n_passes: int, seed: int = 0,
        echo: Callable[[str], None] = print, age_s: float = AGE_S) -> list[Figures]:
    """Build the two states, then measure every policy on them, asked `age_s` after the states were built; returns
    the figures (ms)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["CORRAL_HOME"] = tmp
        t0 = time.perf_counter()
        half, full = build_states(work, nodes, queued, seed)
        at = time.time() + age_s  # (the passes that settle the full cluster start runs at the wall clock's time)
        echo(f"states built in {time.perf_counter() - t0:.0f} s: {nodes} nodes x {GPUS_PER_NODE} GPUs, {queued} "
             f"queued; every policy asked {age_s:g} s after")
        partly, partly_store, _ = start(half, nodes, policies[0])
        rng = np.random.default_rng(seed + 2)
        figs = []
        try:
            for name in policies:
                if time.time() >= at:  # the runs a full cluster's passes start would begin after the moment asked
                    echo(f"warning: {name} is measured past the moment asked ({age_s:g} s after the build): its "
                         "full cluster's figures are not at that age; run fewer policies or a larger --age-s")
                t0, c0 = time.perf_counter(), time.process_time()
                fig = Figures(name)
                with partly.store.session(write=True) as s:
                    queries.activate_policy(s, name, by="benchmark")
                # The heap frozen while a controller is measured, as `corral serve` freezes its own once its controller
                # has started (`scheduler.core.heap`): a full collection walking the recovered state (hundreds of
                # milliseconds at this size) inside a decision is not what the service pays.
                with heap_frozen():
                    measure_partly(fig, partly, n_decisions, at)
                copy_db(full, work / "run.db")  # each policy meets the same full cluster
                ctl, store, backend = start(work / "run.db", nodes, name)
                restart = time.perf_counter() - t0
                try:
                    with heap_frozen():
                        measure_full(fig, ctl, backend, n_decisions, n_passes, rng, at)
                finally:
                    store.close()
                figs.append(fig)
                echo(f"{name}: {time.perf_counter() - t0:.0f} s ({time.process_time() - c0:.0f} s CPU; restart "
                     f"{restart:.0f} s); decision p99 partly full {pct(fig.partly, 99):.1f} ms, full "
                     f"{pct(fig.full, 99):.1f} ms ({fig.queued} queued, {fig.busy:.1%} busy); pass nothing changed "
                     f"{pct(fig.idle, 50):.1f} ms, placing {pct(fig.placing, 50):.1f} ms ({fig.placed} placed); "
                     f"{fig.full_gcs} full collections during the decisions")
        finally:
            partly_store.close()
        return figs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--policies", default=None, help="comma-separated (default: every heuristic and rl:default)")
    parser.add_argument("--decisions", type=int, default=30, help="timed decisions on the full cluster per policy "
                        "(a third as many on the partly full one)")
    parser.add_argument("--passes", type=int, default=10, help="timed passes of each kind per policy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--age-s", type=float, default=AGE_S,
                        help="how long after the states were built every policy is asked (module docstring)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="time the process's CPU time (default: a shared machine does not inflate it) or the wall")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    policies = args.policies.split(",") if args.policies else default_policies()
    figs = run(args.nodes, args.queued, policies, args.decisions, args.passes, args.seed, age_s=args.age_s)
    print()
    print(f"{args.nodes} x {PRESET} ({args.nodes * GPUS_PER_NODE} GPUs), {args.queued} queued; ms of {args.clock} "
          f"time; {args.decisions} decisions ({max(3, args.decisions // 3)} partly full) and {args.passes} passes of "
          f"each kind per policy, asked {args.age_s:g} s after the states were built; target: decision p99 <= "
          f"{TARGET_MS:g} ms")
    print(table(figs))


if __name__ == "__main__":
    main()
