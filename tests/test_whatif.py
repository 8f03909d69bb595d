"""What-if: the Simulator's initial placements (unit tests), and `POST /api/v1/whatif` on SQLite and PostgreSQL (the
`store` fixture) against a store holding two dgx-a100 nodes, running jobs with their allocations and pending jobs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import job, small_cluster
from sqlalchemy import select, update

from policies import make_policy
from scheduler.core.model import JobPhase, Placement
from scheduler.core.simulator import Placed, Simulator
from scheduler.core.state import PlacementError
from scheduler.core.traces import synthetic
from scheduler.live import whatif
from scheduler.live.cluster import build_live_cluster
from scheduler.live.store import Store
from scheduler.live.store.models import Allocation, Gpu, Node, PolicyVersion, User
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.queries import create_token
from web import create_app, limits
from web.api import whatif as whatif_api

API = "/api/v1"
MODEL = "ResNet-50-bs64"


# ---- the Simulator's initial placements ------------------------------------------------------------------------------


def test_an_initially_placed_job_finishes_at_its_work_left_over_its_rate(tiny_cluster) -> None:
    spec = job("r", 0, 2, 500)
    sim = Simulator(tiny_cluster, [], make_policy("fifo"), contention=False, initial=[(spec, Placement((0, 1)), 120.0)])
    r = sim.jobs[0]
    assert r.state is JobPhase.RUNNING and r.placement == Placement((0, 1)) and r.start_s == 0.0
    assert list(sim.state.placements) == [0] and sim.state.free_whole == 2  # it holds its GPUs before any event
    result = sim.run()
    assert r.end_s == pytest.approx(120.0)  # work_left, not the spec's 500 s
    assert result.metrics["jobs_completed"] == 1
    assert result.metrics["makespan_s"] == pytest.approx(120.0)
    assert result.metrics["gpu_util"] == pytest.approx(2 * 120 / (4 * 120))


def test_initial_jobs_finish_at_work_left_over_their_contended_rate() -> None:
    one_gpu = small_cluster(nodes=1, gpus=1)
    a, b = job("a", 0, 0.5, 1000), job("b", 0, 0.5, 1000)
    sim = Simulator(one_gpu, [], make_policy("gandiva"),
                    initial=[Placed(a, Placement((0,), 0.5), 300.0), Placed(b, Placement((0,), 0.5), 300.0)])
    ja, jb = sim.jobs
    rate = ja.rate
    assert rate < 1.0 and rate == pytest.approx(jb.rate)  # MPS neighbours slow each other from t=0
    sim.run()
    assert ja.end_s == pytest.approx(300.0 / rate) and jb.end_s == pytest.approx(300.0 / rate)


def test_arrivals_wait_for_the_gpus_initial_jobs_hold(tiny_cluster) -> None:
    trace = [job("x", 0, 4, 10), job("y", 5, 1, 10)]
    sim = Simulator(tiny_cluster, trace, make_policy("fifo"), contention=False,
                    initial=[(job("r", 0, 2, 100), Placement((2, 3)), 100.0)])
    result = sim.run()
    ends = {j.spec.name: j.end_s for j in result.jobs}
    assert [j.spec.name for j in result.jobs] == ["x", "y", "r"]  # initial jobs take the ids after the trace's
    assert ends == {"r": 100.0, "x": 110.0, "y": 120.0}  # x waits for r's GPUs; strict FIFO keeps y behind x
    # Invariants: every job done once, never two tenants over a GPU's capacity, all GPUs free at the end.
    assert all(j.state is JobPhase.DONE for j in result.jobs)
    assert np.all(sim.state.free_share == 1.0) and sim.state.free_whole == 4 and not sim.running
    assert result.metrics["gpu_util"] == pytest.approx((2 * 100 + 4 * 10 + 1 * 10) / (4 * 120))


def test_bad_initial_placements_are_refused(tiny_cluster) -> None:
    with pytest.raises(PlacementError, match="GPU 1 has 0.000 free"):
        Simulator(tiny_cluster, [], make_policy("fifo"),
                  initial=[(job("a", 0, 2, 10), Placement((0, 1)), 5.0), (job("b", 0, 2, 10), Placement((1, 2)), 5.0)])
    with pytest.raises(PlacementError, match="gang of 2"):
        Simulator(tiny_cluster, [], make_policy("fifo"), initial=[(job("a", 0, 2, 10), Placement((0,)), 5.0)])
    with pytest.raises(ValueError, match="submit_s must be <= 0"):
        Simulator(tiny_cluster, [], make_policy("fifo"), initial=[(job("a", 5, 1, 10), Placement((0,)), 5.0)])
    with pytest.raises(ValueError, match="work_left must be positive"):
        Simulator(tiny_cluster, [], make_policy("fifo"), initial=[(job("a", 0, 1, 10), Placement((0,)), 0.0)])


def test_attained_service_of_initial_jobs_reaches_tiresias(tiny_cluster) -> None:
    # A job that has already had 100,000 GPU-seconds sits in Tiresias' lowest queue: a new job preempts it at once.
    # Fresh (no attained service), it shares the new job's queue and is not preempted until it has attained one
    # GPU-hour (900 s on its 4 GPUs from t=0) and drops a queue: then the waiting job preempts it.
    def short_jct(attained: float) -> float:
        initial = [Placed(job("long", 0, 4, 10_000), Placement((0, 1, 2, 3)), 5_000.0, attained)]
        result = Simulator(tiny_cluster, [job("short", 10, 4, 100)], make_policy("tiresias"), contention=False,
                           initial=initial).run()
        short = result.jobs[0]
        return float(short.end_s) - short.spec.submit_s

    assert short_jct(100_000.0) == pytest.approx(100.0)
    assert short_jct(0.0) == pytest.approx(900.0 - 10.0 + 100.0, abs=1.0)  # waits 890 s, runs 100 s


def test_without_initial_jobs_nothing_changes() -> None:
    cluster = small_cluster(nodes=2, gpus=8)
    trace = synthetic(150, seed=4, mean_interarrival_s=120).jobs
    a = Simulator(cluster, trace, make_policy("tiresias")).run()
    b = Simulator(cluster, trace, make_policy("tiresias"), initial=()).run()
    assert a.metrics == b.metrics and len(b.jobs) == len(trace)


def test_run_metrics_equal_the_simulators_for_a_full_run() -> None:
    cluster = small_cluster(nodes=2, gpus=8)
    sim = Simulator(cluster, synthetic(120, seed=2, mean_interarrival_s=60).jobs, make_policy("tiresias"),
                    initial=[(job("r", 0, 8, 900), Placement(tuple(range(8))), 700.0)])
    full = sim.run().metrics
    mine = whatif.run_metrics(sim)
    for k in ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "gpu_util", "makespan_s",
              "jobs_completed", "jobs_rejected"):
        assert mine[k] == pytest.approx(full[k]), k
    assert mine["jobs_unfinished"] == 0


def test_duration_draws_are_mean_one_lognormal_and_paired() -> None:
    base, hypo = whatif.draw_factors(7, 20_000, 3)
    assert hypo.shape == (3,) and np.all(hypo > 0)
    assert base.mean() == pytest.approx(1.0, abs=0.01)
    assert np.log(base).std() == pytest.approx(whatif.SIGMA, rel=0.03)
    assert np.array_equal(whatif.draw_factors(7, 20_000, 0)[0], base)  # hypothetical jobs do not move base draws
    assert not np.array_equal(whatif.draw_factors(8, 5, 0)[0], base[:5])


# ---- the API: fixtures ---------------------------------------------------------------------------------------------


class Env:
    def __init__(self, store: Store, config: dict[str, Any] | None = None) -> None:
        self.store = store
        with store.session() as s:
            self.tokens = {"alice": create_token(s, "alice"), "root": create_token(s, "root", admin=True)}
        self.app = create_app(store, config=config)
        self.client = self.app.test_client()
        self.cluster = build_live_cluster("dgx-a100", [8, 8])
        with store.session() as s:
            self.alice = s.scalars(select(User.id).where(User.name == "alice")).one()

    def post(self, body: Any, who: str = "alice") -> Any:
        return self.client.post(f"{API}/whatif", json=body, headers={"Authorization": f"Bearer {self.tokens[who]}"})

    def ok(self, body: Any, who: str = "alice") -> dict[str, Any]:
        resp = self.post(body, who)
        assert resp.status_code == 200, resp.json
        return resp.json  # type: ignore[no-any-return]

    def register_nodes(self, alive: tuple[bool, ...] = (True, True)) -> None:
        """What the controller's `_register_nodes` writes for `corral serve --nodes 2 --preset dgx-a100`."""
        c, now = self.cluster, time.time()
        with self.store.session() as s:
            for i in range(c.num_nodes):
                node = Node(name=f"node-{i}", index=i, preset="dgx-a100", alive=alive[i], updated_at=now)
                s.add(node)
                s.flush()
                for g in c.node_gpus(i):
                    s.add(Gpu(node_id=node.id, index=g, local_index=g - int(c.node_first_gpu[i]),
                              gpu_type=c.gpu_types[int(c.gpu_type[g])].name, mem_gb=float(c.gpu_mem[g])))

    def activate(self, name: str) -> None:
        with self.store.session() as s:
            s.add(PolicyVersion(name=name, active=True, created_at=time.time()))

    def running(self, name: str, gpus: list[int], duration: float, progress: float, share: float = 1.0) -> int:
        now = time.time()
        with self.store.session() as s:
            row = JobRow(user_id=self.alice, name=name, kind="emulated", model=MODEL,
                         num_gpus=share if share < 1 else len(gpus), duration_s=duration, submitted_at=now - 100,
                         queued_since=now - 100, state="running", started_at=now - 50, first_started_at=now - 50,
                         attempt=1, progress=progress, env={})
            s.add(row)
            s.flush()
            by_node: dict[int, list[int]] = {}
            for g in gpus:
                by_node.setdefault(int(self.cluster.gpu_node[g]), []).append(g)
            for rank, (node, held) in enumerate(sorted(by_node.items())):
                for g in held:
                    s.add(Allocation(job_id=row.id, attempt=1, rank=rank, node=f"node-{node}", gpu=g,
                                     local_gpu=g - int(self.cluster.node_first_gpu[node]), share=share,
                                     allocated_at=now - 50, released_at=None))
            return row.id

    def pending(self, name: str, num_gpus: float, duration: float, ago: float = 10.0) -> int:
        now = time.time()
        with self.store.session() as s:
            row = JobRow(user_id=self.alice, name=name, kind="emulated", model=MODEL, num_gpus=num_gpus,
                         duration_s=duration, submitted_at=now - ago, queued_since=now - ago, state="pending", env={})
            s.add(row)
            s.flush()
            return row.id


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    e = Env(store)
    e.register_nodes()
    return e


def per_seed(resp: dict[str, Any], metric: str, block: str = "metrics") -> list[float]:
    return resp[block]["metrics"][metric]["per_seed"] if block == "baseline" else resp[block][metric]["per_seed"]


# ---- the API: answers ----------------------------------------------------------------------------------------------


def test_empty_body_simulates_the_present_under_the_active_policy(env: Env) -> None:
    env.activate("tiresias")
    env.running("r", [0, 1, 2, 3, 4, 5, 6, 7], duration=2000, progress=0.5)
    env.running("half", [8], duration=400, progress=0.25, share=0.5)
    for i, n in enumerate([8, 4, 1, 0.5]):
        env.pending(f"p{i}", n, 300 + 100 * i, ago=50 - i)
    out = env.ok({})
    assert out["policy"] == out["active_policy"] == "tiresias"
    assert out["seeds"] == [0, 1, 2, 3, 4] and out["sigma"] == whatif.SIGMA and out["time_origin"] == "now"
    assert out["jobs"] == {"running": 2, "pending": 4, "trace": 0, "hypothetical": 0}
    assert out["cluster"] == {"nodes": 2, "gpus": 16, "down_nodes": 0, "extra_nodes": 0, "name": "live-dgx-a100"}
    assert out["baseline"] is None and out["delta"] is None and out["hypothetical"] == []
    m = out["metrics"]
    assert set(m) == set(whatif.METRICS)
    assert m["jobs_completed"]["per_seed"] == [6] * 5  # every pending job completes in every seed
    assert m["jobs_rejected"]["max"] == 0 and m["jobs_unfinished"]["max"] == 0
    assert all(0 < u <= 1 for u in m["gpu_util"]["per_seed"])
    # r has 1000 s of work left by its estimate: the makespan is around it, and the seeds differ honestly.
    assert len(set(m["avg_jct_s"]["per_seed"])) == 5
    assert m["makespan_s"]["min"] > 1000 * 0.4 and m["makespan_s"]["max"] < 1000 * 3
    for k in ("avg_jct_s", "makespan_s", "gpu_util"):
        d = m[k]
        assert d["min"] <= d["mean"] <= d["max"] and d["mean"] == pytest.approx(np.mean(d["per_seed"]))
    assert any("from now" in n or "t=0" in n for n in out["notes"])


def test_running_jobs_keep_their_gpus_at_t0(env: Env) -> None:
    # Shortest-first would run "next" (100 s) before "all" (1000 s left) if both were queued: only "all" holding its
    # GPUs from t=0 makes "next" wait.
    env.activate("sjf")
    env.running("all", list(range(16)), duration=4000, progress=0.75)  # 1000 s left on every GPU
    env.pending("next", 8, 100)
    out = env.ok({"seeds": 3})
    assert out["jobs"]["running"] == 1 and out["jobs"]["pending"] == 1
    for seed, makespan, queue in zip(out["seeds"], per_seed(out, "makespan_s"), per_seed(out, "avg_queue_s"),
                                     strict=True):
        f_all, f_next = whatif.draw_factors(seed, 2, 0)[0]
        assert makespan >= 1000 * f_all + 100 * f_next - 1e-6
        assert queue >= 1000 * f_all / 2 - 1e-6  # "next" waits for "all"; "all" waits for nothing


def test_extra_nodes_shorten_the_queue_of_a_saturated_cluster(env: Env) -> None:
    env.activate("fifo")
    env.running("all", list(range(16)), duration=3000, progress=0.5)
    env.pending("a", 8, 600)
    env.pending("b", 8, 600)
    out = env.ok({"extra_nodes": 2, "seeds": 4})
    assert out["cluster"]["gpus"] == 32 and out["cluster"]["extra_nodes"] == 2
    base = out["baseline"]
    assert base["policy"] == "fifo" and base["extra_nodes"] == 0
    with_nodes, without = per_seed(out, "avg_queue_s"), per_seed(out, "avg_queue_s", "baseline")
    assert all(w < b for w, b in zip(with_nodes, without, strict=True))
    assert with_nodes == pytest.approx([0.0] * 4)  # a and b start on the new nodes at once
    assert out["delta"]["avg_queue_s"]["max"] < 0
    assert out["delta"]["avg_queue_s"]["per_seed"] == pytest.approx(
        [w - b for w, b in zip(with_nodes, without, strict=True)])


def test_an_alternative_policy_is_reported_under_its_name(env: Env) -> None:
    # Half the cluster is busy; a 16-GPU job heads the queue and a 1-GPU job follows. Strict FIFO keeps the small job
    # behind the blocked head; Tiresias starts it at once.
    env.activate("fifo")
    env.running("r", list(range(8)), duration=1000, progress=0.0)
    env.pending("big", 16, 100, ago=20)
    env.pending("small", 1, 100, ago=10)
    out = env.ok({"policy": "tiresias", "seeds": 2})
    assert out["policy"] == "tiresias" and out["active_policy"] == "fifo"
    assert out["baseline"]["policy"] == "fifo"
    assert all(t < f for t, f in zip(per_seed(out, "avg_queue_s"), per_seed(out, "avg_queue_s", "baseline"),
                                     strict=True))
    same = env.ok({"policy": "fifo", "seeds": 2})
    assert same["policy"] == "fifo" and same["baseline"] is None  # nothing changed: no baseline to compare with
    assert per_seed(same, "avg_queue_s") == per_seed(out, "avg_queue_s", "baseline")


def test_a_hypothetical_job_waits_and_runs_at_least_its_drawn_duration(env: Env) -> None:
    env.activate("fifo")
    env.running("all", list(range(16)), duration=1000, progress=0.5)  # 500 s left
    body = {"seeds": 3, "jobs": [{"name": "mine", "model": "Transformer-XL", "num_gpus": 2, "duration_s": 300,
                                  "submit_in_s": 60}]}
    out = env.ok(body)
    assert out["jobs"]["hypothetical"] == 1 and out["baseline"]["hypothetical_jobs"] == 0
    [h] = out["hypothetical"]
    assert h["name"] == "mine" and h["completed_in"] == 3 and h["submit_in_s"] == 60
    for seed, jct in zip(out["seeds"], h["jct_s_per_seed"], strict=True):
        base, hypo = whatif.draw_factors(seed, 1, 1)
        # It arrives at 60 s, waits for "all" (500 s x its draw from now), then runs its own drawn work.
        assert jct >= 500 * base[0] - 60 + 300 * hypo[0] - 1e-6
        assert jct >= 300 * hypo[0]
    assert h["jct_s"] == pytest.approx(np.mean(h["jct_s_per_seed"]))
    assert out["metrics"]["jobs_completed"]["per_seed"] == [2] * 3
    assert out["baseline"]["metrics"]["jobs_completed"]["per_seed"] == [1] * 3


def test_the_default_policy_is_rl_default_when_none_is_active(env: Env) -> None:
    env.pending("p", 2, 100)
    out = env.ok({"seeds": 1})
    assert out["policy"] == out["active_policy"] == "rl:default"
    assert out["metrics"]["jobs_completed"]["per_seed"] == [1]


def test_a_job_only_a_node_that_is_down_could_hold_waits_and_is_not_rejected(store: Store, corral_home: Path) -> None:
    """The controller keeps such a job waiting for the node (its model keeps it, GPUs closed): what-if does too, and
    an elastic hypothetical job is brought down to what the whole recorded cluster holds, as `POST /jobs` would."""
    env = Env(store)
    env.register_nodes(alive=(True, False))
    env.activate("fifo")
    env.pending("whole", 16, 100)
    out = env.ok({"seeds": 1, "horizon_s": 1000,
                  "jobs": [{"name": "wide", "model": MODEL, "num_gpus": 32, "min_gpus": 8, "max_gpus": 32,
                            "duration_s": 100}]})
    assert out["metrics"]["jobs_rejected"]["per_seed"] == [0]
    assert out["metrics"]["jobs_unfinished"]["per_seed"] == [2]  # both wait for node-1
    assert any("brought down from 32 to 16 GPUs" in n for n in out["notes"]), out["notes"]
    assert whatif.WAITING_FOR_CLOSED in out["notes"]
    alone = env.ok({"seeds": 1})  # no horizon: the run ends when nothing more can happen
    assert (alone["metrics"]["jobs_rejected"]["per_seed"], alone["metrics"]["jobs_unfinished"]["per_seed"]) == ([0], [1])


def test_a_synthetic_trace_replaces_the_live_jobs(env: Env) -> None:
    env.activate("fifo")
    env.running("r", list(range(8)), duration=1000, progress=0.0)
    out = env.ok({"trace": "synthetic:30,iat=20", "seeds": 2})
    assert out["jobs"] == {"running": 0, "pending": 0, "trace": 30, "hypothetical": 0}
    assert out["metrics"]["jobs_completed"]["per_seed"] == [30, 30]


def test_horizon_stops_the_simulation(env: Env) -> None:
    env.activate("fifo")
    env.running("all", list(range(16)), duration=10_000, progress=0.0)
    env.pending("p", 8, 100)
    out = env.ok({"horizon_s": 100, "seeds": 2})
    assert out["metrics"]["jobs_unfinished"]["per_seed"] == [2, 2]
    assert out["metrics"]["gpu_util"]["per_seed"] == pytest.approx([1.0, 1.0])
    assert out["metrics"]["makespan_s"]["per_seed"] == [100, 100]


def test_jobs_on_a_dead_node_queue_again(store: Store, corral_home: Path) -> None:
    env = Env(store)
    env.register_nodes(alive=(True, False))
    env.activate("fifo")
    env.running("lost", list(range(8, 16)), duration=1000, progress=0.5)
    out = env.ok({"seeds": 1})
    # The down node stays in the model, its GPUs closed, as the controller keeps it: the lost job runs on node-0.
    assert (out["cluster"]["gpus"], out["cluster"]["down_nodes"]) == (16, 1)
    assert out["jobs"] == {"running": 0, "pending": 1, "trace": 0, "hypothetical": 0}
    assert out["metrics"]["jobs_completed"]["per_seed"] == [1]


class Stranding:
    """A policy that never places anything: what-if must call that a failure, not a wait for closed GPUs."""

    name, oracle = "stranding", False

    def schedule(self, view: object, queue: object, now: float) -> list[Any]:
        return []


def test_a_policy_that_strands_jobs_the_open_gpus_hold_fails_even_with_a_node_down(store: Store,
                                                                                     corral_home: Path) -> None:
    """A node down excuses a run that ends with jobs queued only where some job needs its GPUs (the policy's order
    may keep others behind that one, as fifo's does); jobs the alive node could all run, left queued, are a failure."""
    env = Env(store)
    env.register_nodes(alive=(True, False))
    env.pending("small", 2, 100)  # node-0 holds it
    fifo = whatif.WhatIfRequest.model_validate({"seeds": 1, "policy": "fifo"})
    stranding = whatif.WhatIfRequest.model_validate({"seeds": 1, "policy": "stranding"})

    def policies(name: str, seed: int) -> Any:
        return Stranding() if name == "stranding" else make_policy(name, seed=seed)

    with pytest.raises(whatif.WhatIfError, match=r"stranding left 1 job\(s\) queued on an idle cluster, first small"):
        whatif.evaluate(whatif.snapshot(store), stranding, policies)
    assert whatif.evaluate(whatif.snapshot(store), fifo, policies)["metrics"]["jobs_unfinished"]["per_seed"] == [0]
    with store.session() as s:  # now one that only node-1 could hold, first in the queue
        s.execute(update(JobRow).values(submitted_at=time.time() - 5, queued_since=time.time() - 5))
    env.pending("whole", 16, 100, ago=60.0)
    out = whatif.evaluate(whatif.snapshot(store), fifo, policies)  # "small" waits behind it, in fifo's order
    assert out["metrics"]["jobs_unfinished"]["per_seed"] == [2] and whatif.WAITING_FOR_CLOSED in out["notes"]
    assert whatif.WAITING_FOR_CLOSED in whatif.evaluate(whatif.snapshot(store), stranding, policies)["notes"]


def test_a_drained_node_takes_no_job_in_the_what_if(env: Env) -> None:
    """What-if sees the cluster as the controller does: a drained node's GPUs take no new job, so an 8-GPU job
    waits for the running one on the other node instead of starting on the drained one at once."""
    env.activate("fifo")
    env.running("busy", list(range(8)), duration=1000, progress=0.5)  # node-0, 500 s left
    env.pending("next", 8, 100)
    free = env.ok({"seeds": 1})
    assert per_seed(free, "avg_queue_s") == [0.0]  # node-1 is free: it starts at once
    with env.store.session() as s:
        s.execute(update(Node).where(Node.name == "node-1").values(drained_at=time.time(), drain_reason="repair"))
    drained = env.ok({"seeds": 1})
    f_busy = whatif.draw_factors(0, 2, 0)[0][0]
    assert per_seed(drained, "avg_queue_s") == [pytest.approx(500 * f_busy / 2)]  # "next" waits for node-0
    assert any("8 GPU(s) take no new job" in n for n in drained["notes"]), drained["notes"]


# ---- the API: refusals ---------------------------------------------------------------------------------------------


def test_a_hypothetical_elastic_job_is_sized_by_the_policy(env: Env) -> None:
    # On the idle cluster marginal-gain starts it at its most (8 GPUs): its 800 s of work at 2 GPUs take a quarter of
    # that, at the seed's draw (it scales linearly inside a node); rigid, it takes all of them.
    env.activate("marginal-gain")
    job = {"name": "grows", "model": MODEL, "num_gpus": 2, "duration_s": 800, "min_gpus": 1, "max_gpus": 8}
    out = env.ok({"seeds": 2, "jobs": [job]})
    [h] = out["hypothetical"]
    rigid = env.ok({"seeds": 2, "jobs": [{k: v for k, v in job.items() if k not in ("min_gpus", "max_gpus")}]})
    [r] = rigid["hypothetical"]
    for elastic_jct, rigid_jct in zip(h["jct_s_per_seed"], r["jct_s_per_seed"], strict=True):
        assert elastic_jct == pytest.approx(rigid_jct / 4, rel=0.02)
    bad = env.post({"jobs": [{**job, "max_gpus": None}]})
    assert bad.status_code == 422 and "jobs.0.min_gpus" in bad.json["errors"]["json"], bad.json
    bad = env.post({"jobs": [{**job, "sizes": [1, 8]}]})
    assert bad.status_code == 422 and "jobs.0.sizes" in bad.json["errors"]["json"], bad.json


def test_bad_fields_are_refused_by_name(env: Env) -> None:
    resp = env.post({"extra_nodes": 2000, "seeds": 0, "horizon_s": -1, "bogus": 1,
                     "jobs": [{"model": "nope", "num_gpus": 1.5, "duration_s": -1, "submit_in_s": -5, "x": 1}]})
    assert resp.status_code == 422
    errors = resp.json["errors"]["json"]
    assert {"extra_nodes", "seeds", "horizon_s", "bogus", "jobs"} <= set(errors)
    assert set(errors["jobs"]["0"]) == {"model", "num_gpus", "duration_s", "submit_in_s", "x"}
    assert "extra_nodes" in resp.json["message"]
    for body, name in [({"extra_nodes": True}, "extra_nodes"), ({"seeds": 21}, "seeds"), ({"limit": 5}, "limit"),
                       ({"jobs": [{"model": MODEL, "num_gpus": 1}]}, "jobs")]:
        resp = env.post(body)
        assert resp.status_code == 422 and name in resp.json["errors"]["json"], body


def test_unknown_policy_is_a_422_naming_the_field(env: Env) -> None:
    resp = env.post({"policy": "no-such-policy"})
    assert resp.status_code == 422
    assert "no-such-policy" in resp.json["errors"]["json"]["policy"][0]
    assert resp.json["message"].startswith("policy:")


def test_checks_against_the_cluster_name_the_field(env: Env) -> None:
    resp = env.post({"jobs": [{"model": MODEL, "num_gpus": 1, "duration_s": 10},
                              {"model": MODEL, "num_gpus": 32, "duration_s": 10}]})
    assert resp.status_code == 422 and "jobs.1.num_gpus" in resp.json["errors"]["json"]
    ok = env.post({"extra_nodes": 2, "seeds": 1, "policy": "fifo",
                   "jobs": [{"model": MODEL, "num_gpus": 32, "duration_s": 10}]})
    assert ok.status_code == 200  # 32 GPUs fit once two nodes join


def test_trace_files_are_for_admins_by_name_and_must_exist(env: Env, tmp_path: Path, corral_home: Path) -> None:
    """No API field names a file: an admin replays a trace by its name in CORRAL_HOME/traces, never by path."""
    path = tmp_path / "mine.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s,kind,model\na,0,1,60,training,\nb,5,2,30,training,\n")
    for who in ("alice", "root"):
        resp = env.post({"trace": str(path)}, who=who)
        assert resp.status_code == (403 if who == "alice" else 422)
    assert "the API never opens a path" in resp.json["errors"]["json"]["trace"][0]
    assert env.post({"trace": "../mine.csv"}, who="root").status_code == 422
    resp = env.post({"trace": "nope.csv"}, who="root")
    assert resp.status_code == 422 and "does not exist" in resp.json["errors"]["json"]["trace"][0]
    (corral_home / "traces").mkdir(parents=True)
    (corral_home / "traces" / "mine.csv").write_text(path.read_text())
    resp = env.post({"trace": "mine.csv", "seeds": 1}, who="root")
    assert resp.status_code == 200, resp.json
    assert resp.json["jobs"]["trace"] == 2


def test_no_nodes_is_a_conflict(store: Store, corral_home: Path) -> None:
    resp = Env(store).post({})
    assert resp.status_code == 409 and "no live nodes" in resp.json["message"]


def test_non_admins_are_held_to_a_jobs_x_seeds_budget(store: Store, corral_home: Path) -> None:
    env = Env(store, config={"CORRAL_WHATIF_BUDGET": 100})
    env.register_nodes()
    env.activate("fifo")
    body = {"trace": "synthetic:30,iat=20", "seeds": 4}  # 30 jobs x 4 seeds = 120 > 100
    resp = env.post(body, who="alice")
    assert resp.status_code == 422, resp.json
    assert "at most 3 seeds" in resp.json["errors"]["json"]["seeds"][0] and resp.json["message"].startswith("seeds:")
    too_many = env.post({"trace": "synthetic:200,iat=20", "seeds": 1}, who="alice")  # over budget even with 1 seed
    assert too_many.status_code == 422 and "limit" in too_many.json["errors"]["json"]
    assert env.post({**body, "seeds": 3}, who="alice").status_code == 200  # 90 job-seeds fit
    admin = env.post(body, who="root")
    assert admin.status_code == 200 and admin.json["metrics"]["jobs_completed"]["per_seed"] == [30] * 4


def test_a_full_worker_pool_answers_429_with_retry_after(store: Store, corral_home: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    env = Env(store, config={"CORRAL_WHATIF_WORKERS": 1})
    env.register_nodes()
    env.activate("fifo")
    started, release = threading.Event(), threading.Event()
    real = whatif_api.what_if

    def held(*args: Any, **kwargs: Any) -> dict[str, Any]:  # the real what-if, once the test lets it go
        started.set()
        assert release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(whatif_api, "what_if", held)
    first: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: first.update(resp=env.post({"seeds": 1})))
    worker.start()
    try:
        assert started.wait(30)  # the only worker is busy with the first request
        busy = env.post({"seeds": 1}, who="root")  # admins wait their turn too
        assert busy.status_code == 429 and int(busy.headers["Retry-After"]) > 0
        assert "busy" in busy.json["message"]
    finally:
        release.set()
        worker.join(60)
    assert first["resp"].status_code == 200
    assert env.post({"seeds": 1}).status_code == 200  # the worker is free again


def test_whatif_needs_a_token(env: Env) -> None:
    resp = env.client.post(f"{API}/whatif", json={})
    assert resp.status_code == 401
    resp = env.client.post(f"{API}/whatif", json={}, headers={"Authorization": "Bearer corral_wrong"})
    assert resp.status_code == 401


def test_openapi_documents_whatif(env: Env) -> None:
    spec = env.client.get(f"{API}/openapi.json").json
    op = spec["paths"][f"{API}/whatif"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("WhatIfArgs")
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("WhatIf")
    assert "422" in op["responses"] and "429" in op["responses"]  # the pool may be full: documented
    assert "per_seed" in spec["components"]["schemas"]["Distribution"]["properties"]


def test_the_apis_limits_are_the_cores() -> None:
    assert limits.WHATIF_MAX_SEEDS == whatif.MAX_SEEDS
    assert limits.WHATIF_MAX_EXTRA_NODES == whatif.MAX_EXTRA_NODES
    assert limits.WHATIF_MAX_HYPOTHETICAL == whatif.MAX_HYPOTHETICAL
    assert limits.WHATIF_MAX_JOBS == whatif.MAX_JOBS
    assert limits.MAX_JOB_GPUS == whatif.MAX_ELASTIC_GPUS and limits.MAX_ELASTIC_SIZES == whatif.MAX_ELASTIC_SIZES


def test_the_core_refuses_bad_requests_naming_the_field() -> None:
    for data, name in [({"extra_nodes": -1}, "extra_nodes"), ({"seeds": 50}, "seeds"), ({"nope": 1}, "nope"),
                       ({"jobs": [{"model": "nope", "num_gpus": 1, "duration_s": 1}]}, "jobs.0.model"),
                       ({"jobs": [{"model": MODEL, "num_gpus": 2.5, "duration_s": 1}]}, "jobs.0.num_gpus"),
                       ({"limit": 3}, "limit")]:
        with pytest.raises(whatif.WhatIfError) as err:
            whatif.WhatIfRequest.parse(data)
        assert err.value.field == name, data


def test_corral_whatif_prints_the_scenario_beside_the_active_policy(env: Env) -> None:
    """The CLI and the Python client: two more nodes for a saturated cluster shorten the queue, the table says so
    next to the active policy, and a hypothetical job gets its JCT; a malformed --job names the flag."""
    from click.testing import CliRunner
    from conftest import served

    from corral import Client
    from scheduler.cli.commands import main

    env.running("hog", list(range(16)), duration=3600.0, progress=0.5)
    for i in range(3):
        env.pending(f"p{i}", 8, 1800.0)
    with served(env.app) as url:
        cli_env = {"CORRAL_URL": url, "CORRAL_TOKEN": env.tokens["alice"]}
        result = CliRunner().invoke(main, ["whatif", "--extra-nodes", "2", "--job", "ResNet-50-bs64:1:600",
                                           "--seeds", "2"], env=cli_env)
        assert result.exit_code == 0, result.output
        out = result.stdout
        assert "2 more node(s), 1 more job(s) (2 seeds)" in out and "average queueing" in out and "now:" in out
        assert "1 GPU of ResNet-50-bs64, done" in out
        res = Client(url, env.tokens["alice"]).whatif(extra_nodes=2, seeds=2)
        assert res.cluster is not None and res.cluster.extra_nodes == 2
        assert res.delta is not None and res.delta["avg_queue_s"]["mean"] < 0
        bad = CliRunner().invoke(main, ["whatif", "--job", "ResNet-50-bs64:two:600"], env=cli_env)
        assert bad.exit_code == 2 and "--job" in bad.output and "MODEL:GPUS:SECONDS" in bad.output
