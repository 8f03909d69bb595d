"""What the live start estimates cost (issue 50, item 1: `scheduler.live.estimates`): one replay of a store's present
under a policy, and a job list page of every pending job, which shares that one replay.

    python benchmarks/live_estimates.py [--nodes 4] [--pending 300] [--policy fifo-backfill,tiresias,rl:default]

It builds a SQLite store in a temporary folder: `--nodes` dgx-a100 nodes of 8 GPUs, every GPU held by a running 1-GPU
job (a random share of its 1 h done), and `--pending` jobs of 1 to 8 GPUs (10 min to 4 h) queued behind them. Per
policy it prints the wall seconds of a fresh replay (the first, which pays for loading an agent, apart), how many of
the pending jobs it estimated to start, never, or beyond its bounds, and the wall seconds of `GET /jobs?state=pending`
with the replay made and then served from the cache (the replays counted: one per state).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project before this folder: benchmarks/policies.py is not the package

from policies import make_policy
from scheduler.core.estimates import Outlook
from scheduler.live.estimates import LiveEstimator
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Allocation, Gpu, Node
from scheduler.live.store.models import Job as JobRow
from web import create_app
from web.api.estimates import estimator

MODEL = "ResNet-50-bs64"


def build(store: Store, nodes: int, pending: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    now = time.time()
    with store.session() as s:
        token = q.create_token(s, "alice", admin=True)
    with store.session() as s:
        user = q.user_by_name(s, "alice")
        assert user is not None
        for n in range(nodes):
            node = Node(name=f"node{n}", index=n, preset="dgx-a100", updated_at=now)
            s.add(node)
            s.flush()
            for g in range(8):
                s.add(Gpu(node_id=node.id, index=n * 8 + g, local_index=g, gpu_type="A100-80GB", mem_gb=80.0))
        for g in range(nodes * 8):
            row = JobRow(user_id=user.id, name=f"run-{g}", kind="emulated", model=MODEL, num_gpus=1, duration_s=3600.0,
                         submitted_at=now - 4000, queued_since=now - 4000, state="running", started_at=now - 600,
                         first_started_at=now - 600, attempt=1, progress=float(rng.uniform(0, 0.9)), env={},
                         predicted_slowdown=1.0)
            s.add(row)
            s.flush()
            s.add(Allocation(job_id=row.id, attempt=1, rank=0, node=f"node{g // 8}", gpu=g, local_gpu=g % 8, share=1.0,
                             allocated_at=now - 600))
        for i in range(pending):
            s.add(JobRow(user_id=user.id, name=f"wait-{i}", kind="emulated", model=MODEL,
                         num_gpus=int(rng.choice([1, 1, 2, 4, 8])), duration_s=float(rng.uniform(600, 4 * 3600)),
                         submitted_at=now - pending + i, queued_since=now - pending + i, state="pending", env={}))
    return token


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--pending", type=int, default=300)
    ap.add_argument("--policy", default="fifo-backfill,tiresias,rl:default")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'corral.db'}")
        token = build(store, args.nodes, args.pending)
        print(f"{args.nodes * 8} GPUs, all busy; {args.pending} pending")
        print("policy | replay s (first) | replay s | starts/never/beyond | page s (replay) | page s (cached) | replays")
        for name in args.policy.split(","):
            with store.session() as s:
                q.activate_policy(s, name, by="benchmark")
            est = LiveEstimator(store, make_policy, refresh_s=0.0)
            first = est.current().wall_s
            again = est.current()
            counts = [sum(e.outlook is o for e in again.by_job.values()) for o in Outlook]
            app = create_app(store, config={"CORRAL_ESTIMATE_REFRESH_S": 60.0})
            client = app.test_client()
            headers = {"Authorization": f"Bearer {token}"}
            t0 = time.perf_counter()
            r = client.get("/api/v1/jobs?state=pending&limit=1000", headers=headers)
            page_replay = time.perf_counter() - t0
            assert r.status_code == 200 and len(r.json["jobs"]) == args.pending, r.json
            t0 = time.perf_counter()
            for _ in range(5):
                client.get("/api/v1/jobs?state=pending&limit=1000", headers=headers)
            page_cached = (time.perf_counter() - t0) / 5
            with app.app_context():
                replays = estimator().replays
            print(f"{name} | {first:.3f} | {again.wall_s:.3f} | {'/'.join(map(str, counts))} | {page_replay:.3f} | "
                  f"{page_cached:.3f} | {replays} for 6 pages")
        store.close()


if __name__ == "__main__":
    main()
