"""Co-location that can really happen (issue 46 item 6; `scheduler.core.colocation`).

A share of a GPU runs under CUDA MPS with a memory cap (share x the GPU's memory): a model that needs more is refused
at submit, in the simulator and by the controller, and never placed on a GPU whose share is too small for it. And one
node's MPS daemon serves one OS user at a time: with per-user job accounts the shares of a node go to one user's jobs
at a time, in every policy's placements (the simulator) and the controller's."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import StartingBackend

from policies import make_policy
from scheduler.core.admission import admission
from scheduler.core.colocation import mem_cap_mb
from scheduler.core.model import Cluster, JobPhase, JobSpec, Placement
from scheduler.core.simulator import Simulator
from scheduler.core.state import ClusterState, PlacementError
from scheduler.core.workloads import catalog
from scheduler.live.cluster import build_live_cluster
from scheduler.live.controller import Controller
from scheduler.live.job_accounts import JobAccounts
from scheduler.live.runs import Launch, RankSpec, rank_env
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Gpu, Node
from tests.test_api import EMULATED, field_errors, make_env

LLAMA = "LLaMA-7B-serve"  # 15 GB in the catalog
SMALL = "ResNet-50-bs64"  # 4.17 GB: a quarter of an 80 GB GPU holds it
POLICIES = ["fifo", "gandiva", "contention-greedy", "tiresias",
            pytest.param("rl:default", marks=pytest.mark.slow)]  # loading and running the agent: seconds


def spec(name: str, share: float, model: str = SMALL, user: str = "", submit: float = 0.0,
         duration: float = 100.0) -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=share, duration_s=duration, model=model,
                   kind=catalog()[model].kind, user=user)


def watch(sim: Simulator, seen: Callable[[ClusterState], None]) -> None:
    """Call `seen` with the cluster state after every placement the simulation makes."""
    real = sim.state.allocate

    def allocate(job_id: int, spec: JobSpec, placement: Placement, *, adopt: bool = False) -> None:
        real(job_id, spec, placement, adopt=adopt)
        seen(sim.state)

    sim.state.allocate = allocate  # type: ignore[method-assign]


# ---- memory: a share too small for its model --------------------------------------------------------------------


def test_the_api_refuses_a_share_too_small_for_its_model(store: Store, corral_home: Path) -> None:
    """The issue's case: 0.05 of an 80 GB GPU is 4 GB under MPS (the cap the worker would set), LLaMA-7B-serve needs
    15 GB: a 422 naming num_gpus, with the memory and the share to ask for; nothing stored."""
    env = make_env(store)
    with store.session() as s:
        node = Node(name="node0", index=0, preset="dgx-a100", alive=True, updated_at=time.time())
        node.gpus = [Gpu(index=i, local_index=i, gpu_type="A100-80GB", mem_gb=80.0) for i in range(8)]
        s.add(node)
    resp = env.post("/jobs", EMULATED | {"model": LLAMA, "num_gpus": 0.05})
    assert resp.status_code == 422, resp.json
    assert field_errors(resp)["num_gpus"] == [
        "0.05 of a 80 GB GPU gives 4 GB under MPS, but LLaMA-7B-serve needs 15 GB; ask for at least 0.19"]
    assert env.job_count() == 0
    assert env.post("/jobs", EMULATED | {"model": LLAMA, "num_gpus": 0.19}).status_code == 201
    assert mem_cap_mb(0.19, 80.0) >= 15 * 1024 > mem_cap_mb(0.18, 80.0)


def test_the_cap_the_core_checks_is_the_one_the_worker_sets() -> None:
    rank = RankSpec(0, "node0", (0,), 0.05, 80.0)
    launch = Launch(job_id=1, attempt=1, kind="emulated", ranks=(rank,), work_s=1.0, rate=1.0, log_dir="/x",
                    checkpoint_dir="/y")
    env = rank_env(rank, 1, "127.0.0.1", 1234, launch)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={mem_cap_mb(0.05, 80.0)}M" == "0=4096M"


def test_the_simulator_refuses_it_as_admission_does() -> None:
    cluster = build_live_cluster("dgx-a100", [4])
    refusal = admission(LLAMA, 0.05, gpus=4, largest_gpu_gb=80.0, profiles=catalog())
    assert refusal is not None and refusal.field == "num_gpus"
    result = Simulator(cluster, [spec("small", 0.05, LLAMA), spec("enough", 0.19, LLAMA)], make_policy("fifo")).run()
    small, enough = result.jobs
    assert small.state is JobPhase.REJECTED and small.reject_reason == refusal.why
    assert enough.state is JobPhase.DONE


@pytest.mark.parametrize("policy", POLICIES)
def test_a_share_lands_only_on_gpus_whose_share_holds_its_model(policy: str) -> None:
    """T4s (16 GB) and A100s (80 GB): half of a T4 is 8 GB, too small for LLaMA-7B-serve; half of an A100 holds it.
    Every share goes to an A100 (waiting for one), even with the T4s idle, and every job runs."""
    cluster = build_live_cluster([("pcie-t4", 4), ("dgx-a100", 2)])
    t4 = {g for g in range(cluster.num_gpus) if cluster.gpu_mem[g] < 20}
    assert len(t4) == 4
    jobs = [spec(f"llama{i}", 0.5, LLAMA, submit=float(i)) for i in range(6)]
    sim = Simulator(cluster, jobs, make_policy(policy, seed=0))
    used: set[int] = set()
    watch(sim, lambda st: used.update(g for p in st.placements.values() for g in p.gpus))
    result = sim.run()
    assert used and not used & t4, used
    assert all(j.state is JobPhase.DONE for j in result.jobs)


def test_the_state_refuses_a_share_whose_cap_is_too_small_but_adopts_a_running_one() -> None:
    cluster = build_live_cluster([("pcie-t4", 1), ("dgx-a100", 1)])
    state = ClusterState(cluster, catalog())
    with pytest.raises(PlacementError, match="gives 8 GB under MPS, needs 15 GB"):
        state.allocate(0, spec("l", 0.5, LLAMA), Placement((0,), 0.5))
    state.allocate(0, spec("l", 0.5, LLAMA), Placement((0,), 0.5), adopt=True)  # a run placed before the rule
    state.allocate(1, spec("m", 0.5, LLAMA), Placement((1,), 0.5))


# ---- one OS user per MPS daemon (per node) ------------------------------------------------------------------------


def users_per_node(cluster: Cluster, sim: Simulator) -> Callable[[ClusterState], None]:
    """A watcher recording, after each placement, the users of each node's shares and the tenants per GPU."""
    sim.mixed = []  # type: ignore[attr-defined]
    sim.packed = 0  # type: ignore[attr-defined]

    def seen(state: ClusterState) -> None:
        users: dict[int, set[str]] = {}
        per_gpu: dict[int, int] = {}
        for j, p in state.placements.items():
            if p.share < 1:
                users.setdefault(int(cluster.gpu_node[p.gpus[0]]), set()).add(sim.jobs[j].spec.user)
                per_gpu[p.gpus[0]] = per_gpu.get(p.gpus[0], 0) + 1
        sim.mixed.extend(n for n, u in users.items() if len(u) > 1)  # type: ignore[attr-defined]
        sim.packed = max(sim.packed, max(per_gpu.values(), default=0))  # type: ignore[attr-defined]
    return seen


def two_users() -> list[JobSpec]:
    return [spec(f"{who}{i}", 0.25, user=who, submit=float(2 * i + k)) for i in range(4)
            for k, who in enumerate(["alice", "bob"])]


@pytest.mark.parametrize("policy", POLICIES)
def test_with_the_rule_two_users_never_share_a_node_s_mps(policy: str) -> None:
    """Two nodes of two A100s, alice's and bob's quarter-GPU jobs interleaved: with `mps_one_user`, no node ever holds
    shares of both at once, one user's jobs still share a GPU, and every job runs."""
    cluster = build_live_cluster("dgx-a100", [2, 2])
    sim = Simulator(cluster, two_users(), make_policy(policy, seed=0), mps_one_user=True)
    watch(sim, users_per_node(cluster, sim))
    result = sim.run()
    assert sim.mixed == []  # type: ignore[attr-defined]
    assert sim.packed >= 2  # type: ignore[attr-defined]
    assert all(j.state is JobPhase.DONE for j in result.jobs)


@pytest.mark.parametrize("policy", ["fifo", "gandiva"])
def test_without_the_rule_placements_are_as_before(policy: str) -> None:
    """Off (the simulator's default): packing puts both users' shares on one node, as it always did."""
    cluster = build_live_cluster("dgx-a100", [2, 2])
    sim = Simulator(cluster, two_users(), make_policy(policy, seed=0))
    watch(sim, users_per_node(cluster, sim))
    sim.run()
    assert sim.mixed  # type: ignore[attr-defined]


def test_the_rule_holds_after_a_user_s_last_share_leaves() -> None:
    """A node is closed to bob only while alice's shares hold it."""
    cluster = build_live_cluster("dgx-a100", [1])
    state = ClusterState(cluster, catalog(), mps_one_user=True)
    state.allocate(0, spec("a", 0.25, user="alice"), Placement((0,), 0.25))
    with pytest.raises(PlacementError, match="MPS daemon serves another user"):
        state.allocate(1, spec("b", 0.25, user="bob"), Placement((0,), 0.25))
    state.allocate(2, spec("a2", 0.25, user="alice"), Placement((0,), 0.25))
    state.release(0)
    state.release(2)
    state.allocate(1, spec("b", 0.25, user="bob"), Placement((0,), 0.25))


# ---- the controller sets the rule from its job accounts -----------------------------------------------------------


@pytest.mark.parametrize(("accounts", "on"), [
    (JobAccounts(pattern="corral-{user}"), True),
    (JobAccounts(mapping={"alice": "alice", "bob": "bob"}, mapping_file="users.yaml"), True),
    (JobAccounts(shared="nobody"), False),
    (JobAccounts(), False),
])
def test_the_controller_keeps_users_apart_when_jobs_run_as_their_own_accounts(
        store: Store, corral_home: Path, accounts: JobAccounts, on: bool) -> None:
    names = ["n0", "n1"]
    backend = StartingBackend(names, 1)
    ctl = Controller(store, backend, build_live_cluster("dgx-a100", [1, 1]), names, make_policy,
                     default_policy="fifo", tick_s=0.1, preset="dgx-a100", accounts=accounts)
    ctl.recover()
    assert ctl.state.mps.one_user is on
    base = {"kind": "emulated", "model": SMALL, "num_gpus": 0.25, "duration_s": 600.0}
    with store.session() as s:
        owner = {}
        for i, who in enumerate(["alice", "bob", "alice", "bob"]):
            row, _ = q.submit(s, q.ensure_user(s, who), base | {"name": f"{who}{i}"})
            owner[row.id] = who
    for _ in range(4):
        ctl.step()
    assert len(backend.launches) == 4
    nodes: dict[str, set[str]] = {}
    for job_id, launch in backend.launches.items():
        nodes.setdefault(launch.ranks[0].node, set()).add(owner[job_id])
    if on:
        assert sorted(map(sorted, nodes.values())) == [["alice"], ["bob"]]
    else:  # fifo packs all four on the first GPU
        assert list(nodes.values()) == [{"alice", "bob"}]
    ctl2 = Controller(store, StartingBackend(names, 1), build_live_cluster("dgx-a100", [1, 1]), names, make_policy,
                      default_policy="fifo", tick_s=0.1, preset="dgx-a100",
                      accounts=JobAccounts(pattern="corral-{user}"))
    ctl2.recover()  # runs placed before the rule are adopted as they are, not refused


def test_a_share_kept_out_by_the_rule_says_so() -> None:
    """The pending reason names the rule, not a lack of room: the GPU has room, another user's shares hold its node."""
    from scheduler.core.contention import ContentionModel
    from scheduler.core.state import ClusterView
    from scheduler.live.explain import capacity_reason

    cluster = build_live_cluster("dgx-a100", [1])
    state = ClusterState(cluster, catalog(), mps_one_user=True)
    view = ClusterView(state, ContentionModel(cluster, catalog()), {})
    state.allocate(0, spec("a", 0.25, user="alice"), Placement((0,), 0.25))
    assert "no other user's shares" in capacity_reason(view, spec("b", 0.25, user="bob"), "fifo").text
    assert capacity_reason(view, spec("a2", 0.25, user="alice"), "fifo").text == "fits now: fifo chose to wait"


# ---- what-if: the same admission, and the server's accounts decide the one-user rule ------------------------------


def test_what_if_refuses_the_share_and_follows_the_server_s_accounts(store: Store, corral_home: Path) -> None:
    """A what-if job too big for its share is a 422 naming `jobs.0.num_gpus`. With per-user accounts, a what-if job (of
    another user than alice's) cannot share a node with alice's running shares: it waits for them; without, it starts
    at once beside them."""
    from tests.test_whatif import Env

    jct: dict[bool, list[float]] = {}
    for per_user in (False, True):
        accounts = JobAccounts(pattern="corral-{user}") if per_user else JobAccounts()
        env = Env(store, config={"CORRAL_JOB_ACCOUNTS": accounts})
        if not per_user:
            env.register_nodes()
            env.activate("fifo")
            for g in range(16):  # alice holds a quarter of every GPU of both nodes, 500 s left
                env.running(f"a{g}", [g], duration=1000, progress=0.5, share=0.25)
            resp = env.post({"jobs": [{"model": LLAMA, "num_gpus": 0.05, "duration_s": 60}]})
            assert resp.status_code == 422
            assert "needs 15 GB" in resp.json["errors"]["json"]["jobs.0.num_gpus"][0]
        out = env.ok({"seeds": 1, "jobs": [{"name": "mine", "model": SMALL, "num_gpus": 0.25, "duration_s": 60}]})
        jct[per_user] = out["hypothetical"][0]["jct_s_per_seed"]
    assert jct[False][0] < 200, jct  # beside alice's shares at once
    assert jct[True][0] > 400, jct  # after them (500 s x its draw)
