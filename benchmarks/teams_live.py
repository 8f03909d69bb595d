"""Teams in the live service (issue 13's live targets), measured against the real controller on a local Ray cluster.

`python benchmarks/teams_live.py` prints:

1. reclaim latency: an in-process controller with its own loop thread (tick 0.5 s) on local Ray, 2 virtual nodes x 4
   GPUs, teams A and B with quota 4 each. A's 8 one-GPU jobs run (4 on borrowed GPUs); B submits 4; timed from B's
   submissions until all 4 of B's workers have started. Repeated `--repeats` times (everything cancelled in
   between). Target: within tick + stop grace + 2 s.
2. controller pass time with 20 teams and 1,000 queued: 4 x 8 GPUs, 20 teams whose quotas add up to the cluster
   (12 x 2 GPUs, 8 x 1), each running jobs that fill its quota, then 1,000 pending jobs of mixed sizes spread over the
   teams; the time of one whole pass (store reads and writes included) and of its policy calls, over `--passes`
   passes, twice: settled (nothing changes, so the policy is not asked) and with a change before every pass (one
   queued job cancelled and one submitted, so the policy is asked at every pass). Target: pass p99 <= 10 ms.

   With `--workers ray --pin`, the controller's process (its Ray driver threads too) runs on core 0 alone and every
   process of the local Ray cluster (GCS, raylets, the 32 workers) on the other cores, as on a cluster, where workers
   run on the GPU servers: the pass then pays Ray's real calls but does not share its core with the workers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' in-memory backend

from conftest import InMemoryBackend

from scheduler.cli.serve import ServeConfig, build_controller
from scheduler.core.heap import freeze_heap
from scheduler.live.ray_backend import RayBackend
from scheduler.live.runs import JobStatus
from scheduler.live.store import Store, queries
from scheduler.live.store.models import Job, JobState, Team
from scheduler.live.worker import STOP_GRACE_S

EMULATED = {"kind": "emulated", "model": "ResNet-50-bs64"}


def add_teams(store: Store, quotas: dict[str, float]) -> dict[str, object]:
    """The teams, and one user in each (by team name)."""
    users = {}
    with store.session(write=True) as s:
        now = time.time()
        s.add_all([Team(name=n, quota_gpus=q, borrow_limit_gpus=None, created_at=now, updated_at=now)
                   for n, q in quotas.items()])
        s.flush()
        for n in quotas:
            users[n] = queries.ensure_user(s, f"user-{n}", team=n)
    return users


def submit(store: Store, team: str, count: int, gpus: float | list[float], duration_s: float) -> list[int]:
    sizes = gpus if isinstance(gpus, list) else [gpus] * count
    with store.session(write=True) as s:
        user = queries.ensure_user(s, f"user-{team}")
        return [queries.submit(s, user, {**EMULATED, "name": f"{team}-{i}", "num_gpus": float(g),
                                         "duration_s": duration_s})[0].id for i, g in enumerate(sizes)]


def wait(pred, what: str, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def started(store: Store, ids: list[int]) -> bool:
    with store.session() as s:
        rows = s.query(Job.state, Job.started_at).filter(Job.id.in_(ids)).all()
    return all(st == JobState.RUNNING and at is not None for st, at in rows)


def reclaim_latency(repeats: int, tick_s: float) -> None:
    backend = RayBackend.local(2, 4)
    times: list[float] = []
    try:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # stopped workers may still log
            os.environ["CORRAL_HOME"] = tmp
            store = Store.open(f"sqlite:///{tmp}/bench.db")
            add_teams(store, {"A": 4.0, "B": 4.0})
            ctl = build_controller(store, backend, ServeConfig(nodes=2, gpus_per_node=4, policy="tiresias",
                                                               tick_s=tick_s))
            ctl.start()
            try:
                for _ in range(repeats):
                    a = submit(store, "A", 8, 1.0, 600.0)
                    wait(lambda: started(store, a), "A's 8 jobs to start")  # noqa: B023
                    t0 = time.time()
                    b = submit(store, "B", 4, 1.0, 600.0)
                    ctl.wake()  # what the API's submission does
                    wait(lambda: started(store, b), "B's 4 jobs to start")  # noqa: B023
                    with store.session() as s:
                        times.append(max(s.get(Job, i).started_at for i in b) - t0)  # type: ignore[union-attr]
                    with store.session(write=True) as s:
                        for job_id in a + b:
                            row = s.get(Job, job_id)
                            if row is not None:
                                queries.cancel(s, row)
                    ctl.wake()
                    wait(lambda: not ctl.running, "every job to stop", timeout=60)
                    time.sleep(STOP_GRACE_S + 1.0)  # Ray frees the GPUs once the stopped workers exit
            finally:
                ctl.stop()
                store.close()
    finally:
        backend.shutdown()
    bound = tick_s + STOP_GRACE_S + 2.0
    t = np.array(times)
    print(f"reclaim, B's 4 jobs submitted -> all 4 started: p50 {np.median(t):5.2f} s  max {t.max():5.2f} s  "
          f"(n={len(t)}; bound tick {tick_s:g} + grace {STOP_GRACE_S:g} + 2 = {bound:g} s)")


class SettledWorkers(InMemoryBackend):
    """The tests' in-memory backend with workers that start at once and run on, each reporting one unchanging status,
    as the Ray backend repeats a run's last status between its progress answers: the controller's own pass time,
    without the 32 worker processes and 4 raylets of a local Ray cluster sharing this machine's cores with it (on a
    real cluster they run on the GPU servers)."""

    def __init__(self, names: list[str], gpus: int) -> None:
        super().__init__(names, gpus)
        self.status: dict[int, JobStatus] = {}

    def poll(self) -> list[JobStatus]:
        for job_id, run in self.launches.items():
            st = self.status.get(job_id)
            if st is None or st.attempt != run.attempt:
                n = len(run.ranks)
                self.status[job_id] = JobStatus(job_id, run.attempt, "running", [time.time()] * n, [None] * n,
                                                [None] * n, 0.0)
        return [self.status[j] for j in self.launches]

    def shutdown(self) -> None:
        pass


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc: Ray's processes are children of this one and of its raylets)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # it ended
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _pin(pid: int, cores: set[int]) -> None:
    """Every thread of `pid` on `cores` (sched_setaffinity takes one thread id at a time)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tasks:
        with contextlib.suppress(OSError):  # the thread ended
            os.sched_setaffinity(int(tid), cores)


CORES = sorted(os.sched_getaffinity(0))  # before any pinning: a second policy's pass pins again from these


def pin_controller() -> str:
    """The controller on core 0, Ray's processes on the others; how it was done, for the printout."""
    cores = CORES
    if len(cores) < 2:
        raise SystemExit("--pin needs at least 2 cores")
    mine, rest = {cores[0]}, set(cores[1:])
    ray_pids = _descendants(os.getpid())
    for pid in ray_pids:
        _pin(pid, rest)
    _pin(os.getpid(), mine)
    return f"controller on core {cores[0]}, {len(ray_pids)} Ray processes on core(s) {sorted(rest)}"


def pass_time(queued: int, policies: list[str], passes: int, workers: str, pin: bool = False) -> None:
    rng = np.random.default_rng(0)
    quotas = {f"team{k:02d}": (2.0 if k < 12 else 1.0) for k in range(20)}
    backend: RayBackend | SettledWorkers = (RayBackend.local(4, 8) if workers == "ray"
                                            else SettledWorkers([f"node{i}" for i in range(4)], 8))
    try:
        for name in policies:
            with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # stopped workers may still log
                os.environ["CORRAL_HOME"] = tmp
                store = Store.open(f"sqlite:///{tmp}/bench.db")
                add_teams(store, quotas)
                ctl = build_controller(store, backend, ServeConfig(nodes=4, gpus_per_node=8, policy=name))  # type: ignore[arg-type]
                ctl.recover()
                for team, quota in quotas.items():
                    submit(store, team, int(quota), 1.0, 3600.0)
                ctl.step()
                assert len(ctl.running) == 32, f"{len(ctl.running)} running"
                deadline = time.time() + 180
                while not all(ctl.m.started.get(j) for j in ctl.running) and time.time() < deadline:
                    ctl.step()  # until every worker is up: a pass then polls running jobs, not starting ones
                    time.sleep(0.1)
                teams = list(quotas)
                sizes = rng.choice([0.25, 0.5, 1, 1, 2, 4, 8], size=queued)
                owners = rng.choice(len(teams), size=queued)
                for k, team in enumerate(teams):
                    submit(store, team, 0, [float(g) for g, o in zip(sizes, owners, strict=True) if o == k], 600.0)
                ctl.step()  # takes the queue in
                freeze_heap()  # as `corral serve` does once its controller has started
                pinned = f", {pin_controller()}" if pin else ""
                print(f"{name:>18}, 20 teams, {queued} queued, 32 running, {workers} workers{pinned} (ms, p50 / p99; "
                      "target whole pass p99 <= 10):")
                # Settled: nothing the policy sees changes, so a pass polls the workers, reads the store and does not
                # ask the policy (the controller asks when something changed or at a WakeAt, as the simulator does).
                # Churn: before every pass one queued job is cancelled and one submitted, so every pass asks.
                for label, churn in (("settled", False), ("a change every pass", True)):
                    policy_ms, pass_ms, own_ms, asked = [], [], [], 0
                    for _ in range(passes):
                        time.sleep(ctl.tick_s * 0.5)  # as the loop runs: every pass polls the 32 running workers
                        if churn:
                            with store.session(write=True) as s:
                                queries.cancel(s, s.get(Job, next(iter(ctl.pending))))  # type: ignore[arg-type]
                            submit(store, teams[int(rng.integers(len(teams)))], 0, [float(rng.choice(sizes))], 600.0)
                        t0 = time.perf_counter()
                        stats = ctl.step()
                        pass_ms.append((time.perf_counter() - t0) * 1000)
                        policy_ms.append(stats.policy_s * 1000)
                        own_ms.append(pass_ms[-1] - stats.ray_s * 1000)
                        asked += stats.policy_calls > 0
                    assert len(ctl.pending) == queued, f"{len(ctl.pending)} pending"
                    print(f"{'':>4}{label}: the policy asked in {asked} of {passes} passes\n"
                          f"{'':>8}whole pass {np.median(pass_ms):6.2f} / {np.percentile(pass_ms, 99):6.2f}\n"
                          f"{'':>8}pass without waiting on Ray {np.median(own_ms):6.2f} / "
                          f"{np.percentile(own_ms, 99):6.2f}\n"
                          f"{'':>8}policy in the frame {np.median(policy_ms):6.2f} / {np.percentile(policy_ms, 99):6.2f}")
                for job_id in list(ctl.running):
                    backend.stop(job_id)
                backend.poll()
                store.close()
    finally:
        backend.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tick", type=float, default=0.5)
    ap.add_argument("--queued", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=50)
    ap.add_argument("--policies", default="tiresias,rl:default,contention-greedy")
    ap.add_argument("--skip-reclaim", action="store_true")
    ap.add_argument("--workers", choices=["settled", "ray", "both"], default="both",
                    help="pass time against settled in-process workers (the controller's own time), a local Ray "
                         "cluster's (its 36 processes share the machine's cores with the controller), or both")
    ap.add_argument("--pin", action="store_true",
                    help="with --workers ray: the controller alone on core 0, Ray's processes on the other cores")
    args = ap.parse_args()
    if args.pin and args.workers != "ray":
        ap.error("--pin: only with --workers ray (the settled workers run inside the controller's process)")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not args.skip_reclaim:
        reclaim_latency(args.repeats, args.tick)
    for workers in (["settled", "ray"] if args.workers == "both" else [args.workers]):
        pass_time(args.queued, args.policies.split(","), args.passes, workers, args.pin)


if __name__ == "__main__":
    main()
