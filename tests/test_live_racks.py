"""Issue 30's live acceptance: a gang is placed in one rack when one rack can hold it, by a real `corral serve
--policy topology --fabric fat-tree-3:1` on a real Ray cluster whose nodes declare their racks, on SQLite and on
PostgreSQL.

Five virtual nodes of 2 GPUs: n0 and n2 in rack r1, n1 and n3 in rack `row-2.rack_b` (a name with every kind of
character a rack name may have, through Ray's node table), n4 in none. Nodes are numbered by name, so the racks
interleave: without racks the emptiest nodes first (n1, n2) would take a 4-GPU gang across both racks. The cluster
map (`GET /cluster`, and the dashboard in a browser) groups the nodes by rack."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from conftest import (
    HTTP_TIMEOUT_S,
    ServeProcess,
    drop_postgres_schema,
    postgres_schema_url,
    signed_in_page,
    virtual_ray_cluster,
    wait_until,
)
from sqlalchemy import update
from tiers import tiered

from scheduler.live.cluster import build_live_cluster
from scheduler.live.nodes import register_nodes
from scheduler.live.runs import NodeInfo
from scheduler.live.store import Store, queries
from scheduler.live.store.models import Node

ray = pytest.importorskip("ray")

R1, R2 = "r1", "row-2.rack_b"
NODES = {f"n{i}": 2 for i in range(5)}  # virtual GPUs
RACKS = {"n0": R1, "n1": R2, "n2": R1, "n3": R2}  # n4 names none
TERMINAL = {"succeeded", "failed", "cancelled", "timed_out"}
EMULATED = {"kind": "emulated", "model": "ResNet-50-bs64"}


@pytest.fixture(scope="module")
@tiered("ray")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with virtual_ray_cluster(tmp_path_factory.mktemp("ray"), NODES, RACKS) as c:
        yield c


class Service:
    def __init__(self, server: ServeProcess, token: str, db_url: str) -> None:
        self.server, self.headers = server, {"Authorization": f"Bearer {token}"}
        self.token = token
        self.db_url = db_url

    def resume_all(self) -> None:
        """Every drained node resumed in one transaction: a controller pass sees all of them or none. (One API call a
        node let a loaded machine's pass see some: the gang then went to the nodes resumed first.)"""
        store = Store.open(self.db_url)
        try:
            with store.session() as s:
                s.execute(update(Node).where(Node.drained_at.is_not(None)).values(
                    drained_at=None, drained_by=None, drain_reason=None, drain_evict=False))
        finally:
            store.close()

    def get(self, path: str) -> Any:
        r = requests.get(f"{self.server.api}{path}", headers=self.headers, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, r.text
        return r.json()

    def submit(self, **fields: Any) -> int:
        r = requests.post(f"{self.server.api}/jobs", json=fields, headers=self.headers, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def post(self, path: str, body: Any = None) -> Any:
        r = requests.post(f"{self.server.api}{path}", json=body, headers=self.headers, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, r.text
        return r.json()

    def running_on(self, job_id: int) -> set[str] | None:
        """The nodes the job runs on, once it runs (None before)."""
        job = self.get(f"/jobs/{job_id}")
        return {a["node"] for a in job["allocation"]} if job["state"] == "running" else None

    def cancel(self, ids: list[int]) -> None:
        """Cancel the jobs and wait until they stopped: the next test (or the other store's service, on this Ray
        cluster) gets every GPU."""
        for job_id in ids:
            self.post(f"/jobs/{job_id}/cancel")
        wait_until(f"jobs {ids} to stop", lambda: all(self.get(f"/jobs/{i}")["state"] in TERMINAL for i in ids),
                   timeout=60, every=0.3)
        wait_until("every GPU to be free", lambda: self.get("/cluster")["totals"]["gpus_allocated"] == 0,
                   timeout=60, every=0.3)


def drain_all_but_n0(store: Store) -> None:
    """The nodes as a service before this one registered them, in no named rack, with every node but n0 drained by
    an admin: the controller starts knowing the drains, so the first job goes to n0 whatever the policy's choice among
    equally free nodes, with no race between a drain and a submission."""
    names = list(NODES)
    with store.session() as s:
        register_nodes(s, [NodeInfo(n, 2, True, n, "") for n in names], build_live_cluster("dgx-a100", [2] * 5), names,
                       ["dgx-a100"] * 5, time.time())
        s.execute(update(Node).where(Node.name != "n0").values(drained_at=time.time(), drained_by="alice",
                                                                drain_reason="keep the first job on n0"))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
@tiered("postgres", param="postgresql")
def service(request: pytest.FixtureRequest, ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Service]:
    home = tmp_path_factory.mktemp(f"racks-{request.param}")
    schema = f"corral_racks_{os.getpid()}"
    db_url = f"sqlite:///{home / 'corral.db'}" if request.param == "sqlite" else postgres_schema_url(schema)
    store = Store.open(db_url)
    with store.session() as s:
        token = queries.create_token(s, "alice", admin=True)
    drain_all_but_n0(store)
    store.close()
    env = {**os.environ, "DATABASE_URL": db_url, "CORRAL_HOME": str(home)}
    server = ServeProcess(home, ["--ray-address", ray_cluster.address, "--tick", "0.2", "--policy", "topology",
                                 "--fabric", "fat-tree-3:1"], env)
    yield Service(server, token, db_url)
    server.stop()
    if request.param == "postgresql":
        drop_postgres_schema(schema)


def test_each_node_is_in_the_rack_it_declared(service: Service) -> None:
    """The marker went through Ray's node table to the controller, and replaced the store's record (none) in the
    store and `GET /cluster`."""
    cluster = service.get("/cluster")
    assert {n["name"]: n["rack"] for n in cluster["nodes"]} == {**RACKS, "n4": None}
    assert cluster["fabric"] == "fat-tree-3:1"  # `--fabric`, recorded in the store


def test_a_gang_is_placed_in_the_one_rack_that_holds_it(service: Service) -> None:
    """A 1-GPU job runs on n0 (the others are drained), leaving r1 3 free GPUs once they are resumed, row-2.rack_b 4
    and n4's rack 2: the 4-GPU gang goes to row-2.rack_b's two nodes, n1 and n3 (without racks: n1 and n2, the
    emptiest nodes first). The gang cannot start before the resumes are seen: n0 has 1 GPU left."""
    busy = service.submit(name="busy", num_gpus=1, duration_s=600, **EMULATED)
    gang = None
    try:
        assert wait_until("the busy job to run", lambda: service.running_on(busy), timeout=60) == {"n0"}
        service.resume_all()
        gang = service.submit(name="gang", num_gpus=4, duration_s=600, **EMULATED)
        placed = wait_until("the gang to run", lambda: service.running_on(gang), timeout=60)
        assert placed == {"n1", "n3"}, service.server.log_tail()
        assert {RACKS[n] for n in placed} == {R2}
    finally:
        service.cancel([busy] + ([gang] if gang is not None else []))


def test_the_cluster_map_groups_the_nodes_by_rack(service: Service, browser: Any) -> None:
    """A heading per rack, in the order of its first node, with its nodes under it and their free GPUs as
    `GET /cluster` counts them; the node naming none under "No rack named"; the summary names the fabric."""
    with signed_in_page(browser, service.token) as page:
        page.goto(f"{service.server.api.removesuffix('/api/v1')}/#/map")
        page.wait_for_selector("section.rack .node")
        racks = page.eval_on_selector_all("section.rack", """els => els.map(el => [
            el.dataset.rack, el.querySelector('.rack-head').innerText.replace(/\\s+/g, ' ').trim(),
            [...el.querySelectorAll('.node')].map(n => n.dataset.node)])""")
        fabric = page.inner_text("#map-fabric")
        nodes = {n["name"]: n for n in service.get("/cluster")["nodes"]}

    def free(names: list[str]) -> int:
        return sum(not g["tenants"] and not g["closed"] for n in names for g in nodes[n]["gpus"])

    assert racks == [
        [R1, f"Rack r1 2 nodes · {free(['n0', 'n2'])} of 4 GPUs free", ["n0", "n2"]],
        [R2, f"Rack row-2.rack_b 2 nodes · {free(['n1', 'n3'])} of 4 GPUs free", ["n1", "n3"]],
        ["", f"No rack named 1 node · {free(['n4'])} of 2 GPUs free", ["n4"]],
    ]
    assert fabric == "fabric fat-tree-3:1"  # the summary names the network the contention model sees
