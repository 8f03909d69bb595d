"""The dashboard's endpoints on a hand-made store: `GET /stats` (JCT, queueing, queue length, share allocated per
bucket), `GET /stats/network` (NIC and uplink load from the contention model), `GET /stats/teams` (each team's quota,
holdings and fair-share usage) and a zoo agent's report and learning curve."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.core.tenancy import DEFAULT_HALF_LIFE_S
from scheduler.live.store import Store, queries
from scheduler.live.store.models import Allocation, Gpu, Job, Node, Team, User


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[Any, dict[str, str], Store]]:
    from web import create_app

    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    with store.session() as s:
        token = queries.create_token(s, "admin", admin=True)
    app = create_app(store)
    yield app.test_client(), {"Authorization": f"Bearer {token}"}, store
    store.close()


def seed(store: Store, now: float, preset: str = "dgx-a100", racks: tuple[str | None, str | None] = (None, None)) -> None:
    """Two nodes of 2 GPUs. Job 1 ran [now-500, now-100) on one GPU (queued 100 s, JCT 500 s); job 2 runs since
    now-250 on 4 GPUs across both nodes (queued 50 s); job 3 waits since now-200."""
    with store.session() as s:
        user = s.query(User).one()
        for n in range(2):
            node = Node(name=f"node{n}", index=n, preset=preset, rack=racks[n], updated_at=now)
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


def test_utilisation_is_averaged_over_the_time_the_service_existed(env: tuple[Any, dict[str, str], Store]) -> None:
    """An hour's window of a service 630 s old (its first job's submission; the store is newer): the buckets before
    it have no utilisation, and the average is over 630 s, not the hour (issue 51: the Metrics page's was 1/6 of it)."""
    client, auth, store = env
    now = time.time() - 30
    seed(store, now)
    body = client.get("/api/v1/stats?window_s=3600&bucket_s=600", headers=auth).json
    b = body["buckets"]
    assert [x["utilisation"] for x in b[:4]] == [None] * 4  # wholly before its first job
    assert b[4]["utilisation"] == 0.0  # its last 30 s: the service existed, nothing held a GPU yet
    assert body["summary"]["since"] == pytest.approx(now - 600)
    assert body["summary"]["avg_utilisation"] == pytest.approx(1520 / (body["now"] - (now - 600)) / 4, rel=0.01)


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
    assert body["uplinks"] == [{"rack": 0, "name": None, "load": 0.0, "jobs": []}]


def test_network_load_sums_a_servers_nics_and_names_its_racks(env: tuple[Any, dict[str, str], Store]) -> None:
    """An HGX server has a NIC per GPU: its row is all of them (2 GPUs here: 2 x 400 Gb/s), and each rack's uplink
    row carries the rack's name."""
    from scheduler.core.contention import ContentionModel
    from scheduler.core.model import JobSpec, Placement
    from scheduler.live.cluster import build_live_cluster

    client, auth, store = env
    seed(store, time.time(), preset="hgx-h100", racks=("r1", "r2"))
    body = client.get("/api/v1/stats/network", headers=auth).json
    cluster = build_live_cluster([("hgx-h100", 2), ("hgx-h100", 2)], racks=["r1", "r2"])
    model = ContentionModel(cluster)
    model.add(2, JobSpec("gang", 0.0, 4, 100.0, "ResNet-50-bs64"), Placement((0, 1, 2, 3)))
    for i, row in enumerate(body["nodes"]):
        nics = cluster.nic_link[cluster.nic_node == i].tolist()
        assert len(nics) == 2 and row["nic_gbps"] == pytest.approx(800.0)
        demand = sum(float(model.link_load[nic]) * 400.0 for nic in nics)
        assert demand > 0 and row["demand_gbps"] == pytest.approx(demand, abs=1e-3) and row["jobs"] == [2]
    assert [(u["rack"], u["name"]) for u in body["uplinks"]] == [(0, "r1"), (1, "r2")]
    assert all(u["load"] > 0 and u["jobs"] == [2] for u in body["uplinks"])  # the gang crosses both racks


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


# ---- teams --------------------------------------------------------------------------------------------------------


def seed_teams(store: Store, now: float) -> dict[str, str]:
    """Two nodes of 4 GPUs; vision (quota 4, may borrow 2 more) and nlp (quota 2, no borrowing limit); ann in vision,
    ben in nlp. Returns their tokens.

    vision: job 1 held 2 GPUs over [now-1000, now-600] (finished); job 2 runs on 2 GPUs since now-300; job 5 waits.
    nlp: job 3 runs on 4 GPUs since now-300, job 4 on a 0.5 share since now-200; job 6 waits.
    So nlp holds 4.5 GPUs, 2.5 beyond its quota: 2 of them are in no team's quota (8 GPUs, quotas 6), the other 0.5
    is vision's idle quota (vision holds 2 of its 4): vision lends 0.5."""
    with store.session() as s:
        s.add_all([Team(name="vision", quota_gpus=4.0, borrow_limit_gpus=2.0, created_at=now, updated_at=now),
                   Team(name="nlp", quota_gpus=2.0, borrow_limit_gpus=None, created_at=now, updated_at=now)])
        s.flush()
        tokens = {"ann": queries.create_token(s, "ann", team="vision"),
                  "ben": queries.create_token(s, "ben", team="nlp")}
        users = {u.name: u for u in s.query(User).all()}
        for n in range(2):
            node = Node(name=f"node{n}", index=n, preset="dgx-a100", updated_at=now)
            s.add(node)
            s.flush()
            for g in range(4):
                s.add(Gpu(node_id=node.id, index=4 * n + g, local_index=g, gpu_type="A100-80GB", mem_gb=80))
        common = {"kind": "emulated", "model": "ResNet-50-bs64", "duration_s": 3600.0}

        def job(id_: int, user: str, name: str, gpus: float, state: str, since: float, **more: object) -> Job:
            return Job(id=id_, user_id=users[user].id, team=users[user].team, name=name, num_gpus=gpus, state=state,
                       submitted_at=since - 10, queued_since=since - 10, attempt=1 if state != "pending" else 0,
                       **common, **more)  # type: ignore[arg-type]

        s.add_all([
            job(1, "ann", "v-done", 2, "succeeded", now - 1000, started_at=now - 1000, finished_at=now - 600),
            job(2, "ann", "v-run", 2, "running", now - 300, started_at=now - 300),
            job(3, "ben", "n-run", 4, "running", now - 300, started_at=now - 300),
            job(4, "ben", "n-share", 0.5, "running", now - 200, started_at=now - 200),
            job(5, "ann", "v-wait", 4, "pending", now - 100),
            job(6, "ben", "n-wait", 1, "pending", now - 100),
        ])
        s.flush()
        held = [(1, g, 1.0, now - 1000, now - 600) for g in (0, 1)] + [(2, g, 1.0, now - 300, None) for g in (0, 1)]
        held += [(3, g, 1.0, now - 300, None) for g in (4, 5, 6, 7)] + [(4, 2, 0.5, now - 200, None)]
        for job_id, gpu, share, start, end in held:
            s.add(Allocation(job_id=job_id, attempt=1, rank=gpu // 4, node=f"node{gpu // 4}", gpu=gpu,
                             local_gpu=gpu % 4, share=share, allocated_at=start, released_at=end))
    return tokens


def test_team_stats_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from scheduler.live import figures
    from web import create_app

    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    try:
        now = time.time()
        tokens = seed_teams(store, now)
        monkeypatch.setattr(figures, "time", SimpleNamespace(time=lambda: now))  # the figures' clock: the seed's
        client = create_app(store, config={"FAIR_SHARE_HALF_LIFE_S": 600.0}).test_client()
        r = client.get("/api/v1/stats/teams?window_s=1200&points=4", headers={"Authorization": f"Bearer {tokens['ben']}"})
        assert r.status_code == 200, r.json
        body = r.json
        assert body["half_life_s"] == 600 and body["gpus"] == 8 and body["step_s"] == 300
        assert body["times"] == pytest.approx([now - 900, now - 600, now - 300, now]) and body["now"] == now
        teams = {t["name"]: t for t in body["teams"]}
        assert list(teams) == ["default", "nlp", "vision"]  # every team, by name
        vision, nlp, default = teams["vision"], teams["nlp"], teams["default"]
        assert {k: vision[k] for k in ("quota_gpus", "borrow_limit_gpus", "in_use_gpus", "borrowed_gpus", "lent_gpus",
                                       "pending_jobs", "running_jobs")} == {
            "quota_gpus": 4, "borrow_limit_gpus": 2, "in_use_gpus": 2, "borrowed_gpus": 0, "lent_gpus": 0.5,
            "pending_jobs": 1, "running_jobs": 1}
        assert {k: nlp[k] for k in ("quota_gpus", "borrow_limit_gpus", "in_use_gpus", "borrowed_gpus", "lent_gpus",
                                    "pending_jobs", "running_jobs")} == {
            "quota_gpus": 2, "borrow_limit_gpus": None, "in_use_gpus": 4.5, "borrowed_gpus": 2.5, "lent_gpus": 0,
            "pending_jobs": 1, "running_jobs": 2}
        # Fair share at a 600 s half-life, H = 600 / ln 2 = 865.62 GPU-s per GPU held for ever:
        # vision: 2 GPUs over [-1000, -600]: 2 H (2^-1 - 2^-5/3) = 320.31; 2 GPUs over the last 300 s:
        #         2 H (1 - 2^-1/2) = 507.07. 827.38 GPU-s over a quota of 4: 206.85.
        # nlp: 4 GPUs for 300 s: 4 H (1 - 2^-1/2) = 1014.14; a 0.5 share for 200 s: 0.5 H (1 - 2^-1/3) = 89.29.
        #      1103.43 over 2: 551.71.
        assert vision["usage_gpu_s"] == pytest.approx(827.38, abs=0.01)
        assert vision["usage_ratio"] == pytest.approx(206.85, abs=0.01)
        assert nlp["usage_gpu_s"] == pytest.approx(1103.43, abs=0.01)
        assert nlp["usage_ratio"] == pytest.approx(551.71, abs=0.01)
        assert default["usage_gpu_s"] == 0 and default["usage_ratio"] is None  # no quota: no ratio
        # Steps (-1200, -900], (-900, -600], (-600, -300], (-300, 0]: vision held 2 GPUs for 100 s of the first,
        # all of the second, none of the third, all of the last; nlp 4 GPUs and a 0.5 share for 200 of 300 s.
        assert vision["series"]["gpus_in_use"] == pytest.approx([2 / 3, 2, 0, 2], abs=1e-6)
        assert nlp["series"]["gpus_in_use"] == pytest.approx([0, 0, 0, 4 + 0.5 * 200 / 300], abs=1e-6)
        # Usage over quota at -900 (100 s of 2 GPUs, ended just now): 2 H (1 - 2^-1/6) / 4 = 47.22; at -600, after 400
        # s of them: 2 H (1 - 2^-2/3) / 4 = 160.16; at -300, decayed by 2^-1/2: 113.25; and now, as above.
        assert vision["series"]["usage_ratio"] == pytest.approx([47.22, 160.16, 113.25, 206.85], abs=0.01)
        assert nlp["series"]["usage_ratio"][:3] == [0, 0, 0] and nlp["series"]["usage_ratio"][3] == nlp["usage_ratio"]
        assert default["series"]["usage_ratio"] == [None] * 4 and default["series"]["gpus_in_use"] == [0] * 4

        # The cluster map names each tenant's team.
        cluster = client.get("/api/v1/cluster", headers={"Authorization": f"Bearer {tokens['ann']}"}).json
        on = {g["index"]: {(t["job_id"], t["team"]) for t in g["tenants"]} for n in cluster["nodes"] for g in n["gpus"]}
        assert on[0] == on[1] == {(2, "vision")} and on[2] == {(4, "nlp")} and on[3] == set()
        assert on[4] == on[5] == on[6] == on[7] == {(3, "nlp")}
    finally:
        store.close()


def test_team_stats_defaults_and_refusals(env: tuple[Any, dict[str, str], Store]) -> None:
    client, auth, _ = env
    body = client.get("/api/v1/stats/teams", headers=auth).json
    assert body["half_life_s"] == DEFAULT_HALF_LIFE_S and body["window_s"] == 3600 and len(body["times"]) == 60
    assert [t["name"] for t in body["teams"]] == ["default"]  # the migration's team, before any is created
    assert client.get("/api/v1/stats/teams").status_code == 401
    for bad in ("points=0", "points=2001", "window_s=1", "window_s=abc"):
        r = client.get(f"/api/v1/stats/teams?{bad}", headers=auth)
        assert r.status_code == 422 and bad.split("=")[0] in r.json["message"], bad
