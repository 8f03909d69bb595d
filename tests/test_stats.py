"""The dashboard's endpoints on a hand-made store: `GET /stats` (JCT, queueing, queue length, share allocated per
bucket), `GET /stats/network` (NIC and uplink load from the contention model) and a zoo agent's report and learning curve."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.live.store import Store, queries
from scheduler.live.store.models import Allocation, Gpu, Job, Node, User


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[Any, dict[str, str], Store]]:
    from web import create_app

    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    with store.session() as s:
        token = queries.create_token(s, "admin", admin=True)
    app = create_app(store)
    yield app.test_client(), {"Authorization": f"Bearer {token}"}, store
    store.close()


def seed(store: Store, now: float) -> None:
    """Two nodes of 2 GPUs. Job 1 ran [now-500, now-100) on one GPU (queued 100 s, JCT 500 s); job 2 runs since
    now-250 on 4 GPUs across both nodes (queued 50 s); job 3 waits since now-200."""
    with store.session() as s:
        user = s.query(User).one()
        for n in range(2):
            node = Node(name=f"node{n}", index=n, preset="dgx-a100", updated_at=now)
            s.add(node)
            s.flush()
            for g in range(2):
                s.add(Gpu(node_id=node.id, index=2 * n + g, local_index=g, gpu_type="A100-80GB", mem_gb=80))
        common = {"user_id": user.id, "kind": "emulated", "model": "ResNet-50-bs64", "duration_s": 100.0}
        s.add_all([
            Job(id=1, name="done", num_gpus=1, state="succeeded", submitted_at=now - 600, queued_since=now - 600,
                first_started_at=now - 500, started_at=now - 500, finished_at=now - 100, attempt=1, **common),
            Job(id=2, name="gang", num_gpus=4, state="running", submitted_at=now - 300, queued_since=now - 300,
                first_started_at=now - 250, started_at=now - 250, attempt=1, predicted_slowdown=1.1, **common),
            Job(id=3, name="waits", num_gpus=4, state="pending", submitted_at=now - 200, queued_since=now - 200,
                pending_reason="needs 4 GPUs", **common),
        ])
        s.flush()
        s.add(Allocation(job_id=1, attempt=1, rank=0, node="node0", gpu=0, local_gpu=0, share=1.0,
                         allocated_at=now - 500, released_at=now - 100))
        for g in range(4):
            s.add(Allocation(job_id=2, attempt=1, rank=g // 2, node=f"node{g // 2}", gpu=g, local_gpu=g % 2,
                             share=1.0, allocated_at=now - 250, released_at=None))


def test_stats_buckets(env: tuple[Any, dict[str, str], Store]) -> None:
    client, auth, store = env
    seed(store, time.time() - 30)  # 30 s back: no event falls on a bucket's edge
    r = client.get("/api/v1/stats?window_s=600&bucket_s=100", headers=auth)
    assert r.status_code == 200, r.json
    body = r.json
    assert body["gpus"] == 4 and len(body["buckets"]) == 6
    b = body["buckets"]
    assert [x["finished"] for x in b] == [0, 0, 0, 0, 1, 0]
    assert b[4]["avg_jct_s"] == pytest.approx(500, abs=1)
    assert sum(x["started"] for x in b) == 2 and body["summary"]["avg_queue_s"] == pytest.approx(75, abs=1)
    assert b[-1]["running"] == 1 and b[-1]["pending"] == 1  # at the end: the gang runs, the 4-GPU job waits
    assert b[1]["running"] == 1 and b[1]["pending"] == 0  # 400 s ago only job 1 existed, and it ran
    # Share allocated, time-weighted: job 1's one GPU for 400 s, job 2's four for the last 280 s.
    total_gpu_s = sum(x["share_allocated"] * 100 for x in b)
    assert total_gpu_s == pytest.approx(400 + 4 * 280, rel=0.01)
    assert body["summary"]["avg_utilisation"] == pytest.approx(1520 / 600 / 4, rel=0.01)


def test_stats_refuses_bad_windows(env: tuple[Any, dict[str, str], Store]) -> None:
    client, auth, _ = env
    assert client.get("/api/v1/stats", headers={}).status_code == 401
    r = client.get("/api/v1/stats?window_s=60&bucket_s=600", headers=auth)
    assert r.status_code == 422 and "bucket_s" in r.json["message"]
    assert client.get("/api/v1/stats?window_s=86400&bucket_s=1", headers=auth).status_code == 422


def test_network_load_is_the_contention_models(env: tuple[Any, dict[str, str], Store]) -> None:
    """NIC and uplink load come from the contention model itself, rebuilt from the running placements: the same
    numbers the controller placed by."""
    from scheduler.core.contention import ContentionModel
    from scheduler.core.model import JobSpec, Placement
    from scheduler.live.cluster import build_live_cluster

    client, auth, store = env
    seed(store, time.time())
    body = client.get("/api/v1/stats/network", headers=auth).json
    assert body["approximate"] is False and "contention model" in body["method"]
    by_node = {n["node"]: n for n in body["nodes"]}
    assert set(by_node) == {"node0", "node1"}
    cluster = build_live_cluster("dgx-a100", [2, 2])
    model = ContentionModel(cluster)
    model.add(2, JobSpec("gang", 0.0, 4, 100.0, "ResNet-50-bs64"), Placement((0, 1, 2, 3)))
    for i, n in enumerate(("node0", "node1")):
        expected = float(model.link_load[int(cluster.node_nic[i])])
        assert expected > 0 and by_node[n]["load"] == pytest.approx(expected, abs=1e-6)
        assert by_node[n]["jobs"] == [2] and by_node[n]["nic_gbps"] == pytest.approx(200.0)
    # Both nodes sit in one rack: nothing crosses its uplink.
    assert body["uplinks"] == [{"rack": 0, "load": 0.0, "jobs": []}]


def test_agent_reports_and_curves(env: tuple[Any, dict[str, str], Store]) -> None:
    client, auth, _ = env
    r = client.get("/api/v1/policies/rl:default/report", headers=auth)
    assert r.status_code == 200, r.json
    body = r.json
    assert body["metadata"]["formulation"] == "corral" and body["evaluation"]["baselines"]
    assert body["summary"]["columns"][1:] == ["tiresias", "contention-greedy", "gittins"]
    assert any(row["metric"] == "avg_jct_s" for row in body["summary"]["rows"])
    png = client.get(body["curve"], headers=auth)
    assert png.status_code == 200 and png.mimetype == "image/png" and png.data[:4] == b"\x89PNG"
    assert client.get("/api/v1/policies/deepshare:deepshare/report", headers=auth).status_code == 200
    for name in ("tiresias", "rl:deepshare", "rl:nope", "rl:..", "deepshare:default"):
        r = client.get(f"/api/v1/policies/{name}/report", headers=auth)
        assert r.status_code == 404 and r.json["message"], name
    assert client.get("/api/v1/policies/tiresias/curve.png", headers=auth).status_code == 404
    assert client.get("/api/v1/policies/rl:default/report").status_code == 401
