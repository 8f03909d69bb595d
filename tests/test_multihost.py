"""Issue 14 item 3: Corral across real network hosts. Linux network namespaces make a head host (Ray's head and
`corral serve`, SQLite) and worker hosts, each with its own address on a private bridge (tests/netns.py); every
worker host runs `corral node start` (the node agent) joined to the head. A gang job runs across two hosts; a worker host is partitioned
mid-run (its link taken down): its job is requeued and finishes on the other host, and when the link comes back the
stale workers count for nothing (each job succeeds exactly once); a third host brought in mid-run is used.

Root only (CI runs as root); skipped with the reason elsewhere. Every wait is bounded; everything is removed after.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import wait_until
from corral_hosts import GPUS, Cluster, corral_on_hosts, nodes_of
from netns import hosts_or_skip
from tiers import tiered

pytest.importorskip("ray")


@pytest.fixture(scope="module")
@tiered("netns")
@tiered("ray")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    hosts_or_skip()
    with corral_on_hosts(tmp_path_factory.mktemp("hosts")) as c:
        yield c


def succeeded_once(c: Cluster, job_id: int) -> None:
    kinds = [e["kind"] for e in c.events(job_id)]
    assert kinds.count("succeeded") == 1, kinds


def test_a_gang_job_runs_across_two_hosts(cluster: Cluster) -> None:
    c = cluster
    gang = c.submit(name="gang", num_gpus=2 * GPUS, duration_s=3.0)
    where = wait_until("the gang to be placed", lambda: nodes_of(c, gang), timeout=60)
    assert where == {"w1", "w2"}
    wait_until("the gang to succeed", lambda: c.job(gang)["state"] == "succeeded", timeout=90)
    succeeded_once(c, gang)
    # Its ranks ran on both hosts and found each other at rank 0's own address (not loopback).
    logs = sorted((c.files / "logs" / f"job-{gang}" / "attempt-1").glob("rank-*.log"))
    assert len(logs) == 2
    addresses = {line.split("=", 1)[1].strip() for p in logs for line in p.read_text().splitlines()
                 if line.startswith("[corral] MASTER_ADDR=")}
    assert len(addresses) == 1 and addresses <= {c.hosts.hosts["w1"].address, c.hosts.hosts["w2"].address}


def test_a_partitioned_host_s_job_finishes_elsewhere_exactly_once(cluster: Cluster) -> None:
    c = cluster
    long = c.submit(name="long", num_gpus=GPUS, duration_s=12.0)
    short = c.submit(name="short", num_gpus=GPUS, duration_s=4.0)
    wait_until("both to run", lambda: all(c.job(j)["started_at"] for j in (long, short)), timeout=90)
    (victim,) = nodes_of(c, long)
    (other,) = nodes_of(c, short)
    assert victim != other
    host = c.hosts.hosts[victim]
    time.sleep(2.0)  # some progress for its checkpoint
    cut = time.time()
    c.hosts.link(host, up=False)
    try:
        wait_until(f"{victim} to be down and `long` requeued", lambda: not c.nodes()[victim]["alive"]
                   and any(e["kind"] == "requeued" for e in c.events(long)), timeout=60)
        lost_at = next(e["at"] for e in c.events(long) if e["kind"] == "lost")
        print(f"partitioned {victim}: its job requeued {lost_at - cut:.1f} s after the link went down")
        wait_until("`long` to finish on the other host", lambda: c.job(long)["state"] == "succeeded", timeout=120)
        assert nodes_of(c, long) == set()
    finally:
        c.hosts.link(host, up=True)
    # Back on the network, the partitioned Ray node learns it was declared dead and stops; its stale workers never
    # report (their attempt is over) and their checkpoint writes are refused (a later attempt wrote one).
    time.sleep(5.0)
    j = c.job(long)
    assert j["attempt"] == 2 and j["state"] == "succeeded", c.events(long)  # (what happened, if not)
    for job_id in (long, short):
        succeeded_once(c, job_id)
    second = (c.files / "logs" / f"job-{long}" / "attempt-2" / "rank-0.log").read_text()
    assert "s of isolated work left" in second and "done at 100.0%" in second
    # The host comes back as a node again: taken back into the cluster.
    c.hosts.kill_all(host)
    c.join(host)
    wait_until(f"{victim} to be taken back", lambda: c.nodes()[victim]["alive"], timeout=90, every=1.0)
    both = [c.submit(name=f"after{i}", num_gpus=GPUS, duration_s=2.0) for i in range(2)]
    wait_until("both to succeed", lambda: all(c.job(i)["state"] == "succeeded" for i in both), timeout=120)


def test_a_third_host_brought_in_mid_run_is_used(cluster: Cluster) -> None:
    c = cluster
    busy = [c.submit(name=f"busy{i}", num_gpus=GPUS, duration_s=20.0) for i in range(2)]
    wait_until("w1 and w2 to be busy", lambda: all(c.job(i)["state"] == "running" for i in busy), timeout=90)
    extra = c.submit(name="extra", num_gpus=GPUS, duration_s=2.0)
    joined = time.time()
    c.worker("w3")
    wait_until("the new host to take the waiting job", lambda: nodes_of(c, extra) == {"w3"}
               or c.job(extra)["state"] == "succeeded", timeout=90, every=0.5)
    print(f"w3: `ray start` to the waiting job placed there: {time.time() - joined:.1f} s")
    wait_until("`extra` to succeed", lambda: c.job(extra)["state"] == "succeeded", timeout=90)
    assert all(c.job(i)["state"] == "running" and c.job(i)["attempt"] == 1 for i in busy)  # not disturbed
    assert c.nodes()["w3"]["alive"]
