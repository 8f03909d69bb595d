"""The shared RL encoding (`ENCODING_VERSION`): which jobs the agent may start, where, whom it may preempt, and what it may
never choose."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agents.env import PlacementEnv
from agents.imitation import Teachers, teacher_action
from agents.scenarios import Scenario
from policies.rl_encoding import (
    JOB_FEATURES,
    MAX_CANDIDATES,
    N_ACTIONS,
    OBS_HIGH,
    OBS_LOW,
    OBS_SIZE,
    ORDERS,
    SLOT_SIZE,
    WAIT,
    decision_point,
    non_dominated,
)
from scheduler.core.contention import Prediction
from scheduler.core.model import Job, JobKind, JobSpec, Placement, parse_cluster
from scheduler.core.simulator import Simulator


def _sim(cluster: str, specs: list[JobSpec]) -> Simulator:
    return Simulator(parse_cluster(cluster), specs, None)


def _start(sim: Simulator, index: int, gpus: tuple[int, ...], share: float = 1.0) -> None:
    from scheduler.core.decisions import Place

    sim.apply([Place(sim.jobs[index].id, Placement(gpus, share))])


def _arrive_all(sim: Simulator) -> None:
    """Let every job arrive (the simulator's first events) without placing any."""
    while any(j.spec.submit_s > sim.now for j in sim.jobs) or not sim.pending:
        if not sim.advance():
            break


def test_non_dominated_keeps_the_pareto_front_in_order() -> None:
    p = [Prediction(1.81, {7: 1.0}, {7: 1.54}),  # worse on both than the next one
         Prediction(1.00, {}, {}),
         Prediction(1.00, {}, {}),  # an exact tie with the one before: the first stays
         Prediction(0.90, {7: 1.0}, {7: 1.3})]  # better for itself, worse for its neighbour: a real trade-off
    assert non_dominated(p) == [1, 3]


def test_graphsage_beside_bert_cannot_be_chosen() -> None:
    """The placement seen live: a 0.25-GPU GraphSage job beside a BERT inference service (1.81x for itself, the
    service slowed too) while an empty GPU offered 1.00x and nothing added. No action may choose it."""
    bert = JobSpec("bert", 0.0, 0.5, 50_000.0, "BERT-base-serve", kind=JobKind.INFERENCE)
    graphsage = JobSpec("graphsage", 1.0, 0.25, 3_600.0, "GraphSage")
    sim = _sim("pcie-v100:1", [bert, graphsage])
    sim.advance()
    _start(sim, 0, (0,), 0.5)
    _arrive_all(sim)
    beside = Placement((0,), 0.25)
    pred = sim.view.predict(graphsage, beside)
    assert pred.slowdown > 1.05 and pred.others_added > 0.0  # the situation: sharing hurts both
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None
    offered = [(slot.job.spec.name, p.gpus) for slot in point.slots if slot is not None for p in slot.candidates]
    assert ("graphsage", (0,)) not in offered
    assert any(name == "graphsage" for name, _ in offered)
    for action in np.flatnonzero(point.mask):
        chosen = point.choice(int(action))
        if chosen is not None:
            assert chosen[1].gpus != (0,)
    # The same candidate generator does produce it: it is the dominance rule that took it out.
    from policies.placement import Planner

    assert beside.gpus in [p.gpus for p in Planner(sim.view).candidates(graphsage)]


def test_slots_hold_the_heads_of_their_orders() -> None:
    specs = [
        JobSpec("old-big", 0.0, 4.0, 100.0, "ResNet-50-bs64"),
        JobSpec("small", 1.0, 0.5, 100.0, "ResNet-18-bs32"),
        JobSpec("mid", 2.0, 2.0, 100.0, "ResNet-50-bs64"),
    ]
    sim = _sim("pcie-v100:1", specs)
    _arrive_all(sim)
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None
    by_order = {name: (slot.job.spec.name if slot else None) for name, slot in zip(ORDERS, point.slots, strict=False)}
    assert by_order["fifo"] == "old-big" and by_order["las"] == "old-big"
    assert by_order["smallest"] == "small"
    assert by_order["preempt-las"] is None and by_order["preempt-fine"] is None  # nothing runs: no victims
    assert not point.mask[WAIT]  # nothing runs: waiting would wait forever
    assert point.obs.shape == (OBS_SIZE,) and point.obs.min() >= OBS_LOW and point.obs.max() <= OBS_HIGH
    # Each valid action starts the job of its slot on one of that job's placements.
    for action in np.flatnonzero(point.mask):
        slot, placement = point.choice(int(action))
        assert slot is point.slots[action // MAX_CANDIDATES] and placement in slot.candidates


def test_preemption_slot_names_its_victims_and_acting_preempts_them() -> None:
    long_run = JobSpec("long", 0.0, 8.0, 100_000.0, "ResNet-50-bs64")
    newcomer = JobSpec("new", 5_000.0, 8.0, 100.0, "ResNet-50-bs64")
    sim = _sim("pcie-v100:1", [long_run, newcomer])
    sim.advance()
    _start(sim, 0, tuple(range(8)))
    while sim.now < 5_000.0:  # the long job attains 8 x 5,000 GPU-s: a lower queue than the newcomer's
        sim.advance()
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None
    slots = dict(zip(ORDERS, point.slots, strict=False))
    assert slots["fifo"] is None  # it fits nowhere without preempting
    pre = slots["preempt-las"]
    assert pre is not None and pre.job.spec.name == "new" and pre.victims == (sim.jobs[0].id,)
    action = ORDERS.index("preempt-las") * MAX_CANDIDATES
    sim.apply(point.decisions(action, "test"))
    assert sim.jobs[0].id in sim.pending and sim.jobs[1].id in sim.running
    assert point.mask[WAIT]  # declining to preempt is a choice


def test_the_preemption_slots_predict_each_placement_once_per_decision_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ladder offers the newcomer the same victims: their candidates are predicted once (the model does not
    change within a decision point), and the three slots describe them alike."""
    long_run = JobSpec("long", 0.0, 8.0, 100_000.0, "ResNet-50-bs64")
    newcomer = JobSpec("new", 5_000.0, 4.0, 100.0, "ResNet-50-bs64")
    sim = _sim("pcie-v100:1", [long_run, newcomer])
    sim.advance()
    _start(sim, 0, tuple(range(8)))
    while sim.now < 5_000.0:
        sim.advance()
    asked: list[tuple[str, Placement]] = []
    predict = type(sim.view).predict

    def counted(view: object, spec: JobSpec, placement: Placement) -> Prediction:
        asked.append((spec.name, placement))
        return predict(view, spec, placement)  # type: ignore[arg-type]

    monkeypatch.setattr(type(sim.view), "predict", counted)
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None
    slots = [s for name, s in zip(ORDERS, point.slots, strict=False) if name.startswith("preempt-")]
    assert len(slots) == 3 and all(s is not None and s.job.spec.name == "new" for s in slots)
    assert asked and len(asked) == len(set(asked)) == len(slots[0].candidates)  # type: ignore[union-attr]
    assert all(s.victims == (sim.jobs[0].id,) and s.candidates == slots[0].candidates for s in slots)  # type: ignore[union-attr]
    blocks = [point.obs[ORDERS.index(name) * SLOT_SIZE + JOB_FEATURES:(ORDERS.index(name) + 1) * SLOT_SIZE]
              for name in ("preempt-las", "preempt-fine", "preempt-gittins")]
    assert all(np.array_equal(b, blocks[0]) for b in blocks) and blocks[0].any()


def test_observation_size_does_not_depend_on_the_cluster() -> None:
    sizes = set()
    for cluster in ("pcie-v100:1", "dgx-a100:16"):
        sim = _sim(cluster, [JobSpec(f"j{i}", float(i), 1.0, 100.0, "ResNet-18-bs32") for i in range(5)])
        _arrive_all(sim)
        point = decision_point(sim.view, sim.pending.values(), sim.now)
        assert point is not None
        sizes.add(point.obs.shape)
    assert sizes == {(OBS_SIZE,)} and len(ORDERS) * MAX_CANDIDATES + 1 == N_ACTIONS


@pytest.mark.parametrize("teacher", ["tiresias", "tiresias:thresholds=300,3600,36000", "gittins", "contention-greedy",
                                     "fifo-backfill"])
def test_every_choice_of_the_teachers_is_an_action(teacher: str) -> None:
    """The frame can represent what each heuristic does (the warm start clones them exactly), so the agent's
    starting point is the heuristic itself."""
    env = PlacementEnv(window=120)
    env.reset(options={"scenario": Scenario("synthetic", "dgx-a100", 1.3, 120, 5, nodes=2)})
    exact = total = 0
    while True:
        assert env._point is not None and env.sim is not None
        action, ok = teacher_action(env.sim, env._point, teacher)
        exact += ok
        total += 1
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    assert total > 100 and exact == total
    assert info["metrics"]["jobs_completed"] == 120


def test_teachers_by_workload_and_load() -> None:
    teachers = Teachers("tiresias", {"alibaba": [(1.2, "gittins"), (9.9, "tiresias:thresholds=60,600")]})
    ali = "../shared/traces/alibaba_openb_before_day130.csv"
    assert teachers.for_scenario(Scenario(ali, "pcie-t4", 1.0, 100, 0)) == "gittins"
    assert teachers.for_scenario(Scenario(ali, "pcie-t4", 2.0, 100, 0)) == "tiresias:thresholds=60,600"
    assert teachers.for_scenario(Scenario("synthetic", "pcie-t4", 2.0, 100, 0)) == "tiresias"


def test_jobs_are_never_started_twice_or_lost_by_any_action_sequence() -> None:
    """Random valid actions (including waits and preemptions) still finish every job exactly once."""
    env = PlacementEnv(window=80, load=(1.5, 2.0))
    env.reset(seed=11)
    rng = np.random.default_rng(0)
    while True:
        mask = env.action_masks()
        _, _, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        if terminated or truncated:
            break
    assert info["metrics"]["jobs_completed"] + info["metrics"]["jobs_rejected"] == 80
    assert all(isinstance(j, Job) and j.end_s is not None for j in env.sim.jobs if j.state.value == "done")


def test_waiting_is_offered_only_to_decline_a_preemption() -> None:
    """The agent never holds GPUs idle while a job fits: wait is masked whenever some job can start on free GPUs."""
    running = JobSpec("running", 0.0, 4.0, 100_000.0, "ResNet-50-bs64")
    fits = JobSpec("fits", 10.0, 2.0, 100.0, "ResNet-50-bs64")
    sim = _sim("pcie-v100:1", [running, fits])
    sim.advance()
    _start(sim, 0, (0, 1, 2, 3))
    _arrive_all(sim)
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None and sim.view.running
    assert dict(zip(ORDERS, point.slots, strict=False))["fifo"] is not None
    assert not point.mask[WAIT]


def test_validation_windows_are_never_the_hold_out() -> None:
    from agents.scenarios import MODEL_SEEDS, held_out
    from scheduler.core.traces import HOLDOUT_FROM

    trace = "../shared/traces/philly_day60.csv"
    from pathlib import Path

    if not Path(trace).is_file():
        pytest.skip("needs ../shared/traces (the dev traces) next to the project")
    from agents.scenarios import trace_jobs

    val = held_out([trace, "synthetic"], ["pcie-v100"], 200, (0.8, 2.2), 3, part="train")
    test = held_out([trace, "synthetic"], ["pcie-v100"], 200, (0.8, 2.2), 3, part="test")
    for sc in val:
        if sc.workload == "synthetic":
            assert sc.seed >= 2**31 and sc.seed not in {t.seed for t in test}
        else:
            n = len(trace_jobs(trace, sc.seed))
            assert sc.start + sc.window <= int(n * HOLDOUT_FROM) + 1 and sc.seed >= MODEL_SEEDS


def test_running_service_is_bitwise_the_views_attained_service() -> None:
    """Victims are ranked from `running_service`'s cached rows; a job exactly at a queue threshold must land in the
    same queue there as in `ClusterView.attained_gpu_s`, or two jobs can preempt each other back and forth at one
    instant (seen with an algebraically equal but differently rounded formula)."""
    from policies import make_policy
    from policies.rl_encoding import running_service
    from scheduler.core.traces import synthetic

    class Checking:
        name, oracle = "checking", False

        def __init__(self) -> None:
            self.inner = make_policy("tiresias")
            self.checked = 0

        def schedule(self, view, queue, now):  # type: ignore[no-untyped-def]
            jobs, attained, _ = running_service(view)
            assert attained.tolist() == [view.attained_gpu_s(j) for j in jobs]
            self.checked += len(jobs)
            return self.inner.schedule(view, queue, now)

    policy = Checking()
    Simulator(parse_cluster("dgx-a100:2"), synthetic(200, seed=3, mean_interarrival_s=20).jobs, policy).run()
    assert policy.checked > 1000


def test_size_features_follow_the_job_not_its_id_across_simulations() -> None:
    """Every episode numbers its jobs from 0; the Gittins index and expected remaining service cached for job 0 of one
    simulation must not be read for job 0 of the next (it was, before the cache held the spec)."""
    from policies import rl_encoding

    big = [JobSpec("big", 0.0, 8.0, 100_000.0, "ResNet-50-bs64"), JobSpec("other", 1.0, 1.0, 100.0, "ResNet-18-bs32")]
    small = [JobSpec("small", 0.0, 0.5, 100.0, "ResNet-18-bs32"), JobSpec("other", 1.0, 1.0, 100.0, "ResNet-18-bs32")]

    def obs(specs: list[JobSpec]) -> np.ndarray:
        sim = _sim("dgx-a100:2", specs)
        _arrive_all(sim)
        point = decision_point(sim.view, sim.pending.values(), sim.now)
        assert point is not None
        return point.obs

    rl_encoding._SIZE_KEYS.clear()
    alone = obs(small)
    rl_encoding._SIZE_KEYS.clear()
    obs(big)  # caches job 0 as the 8-GPU job
    assert np.array_equal(obs(small), alone)


@pytest.mark.slow
def test_the_default_teachers_are_per_regime_and_every_choice_is_an_action() -> None:
    from agents.imitation import BEST, FINE_TEACHER, collect

    assert BEST.for_scenario(Scenario("synthetic:short", "dgx-a100", 1.7, 100, 0)) == FINE_TEACHER
    assert BEST.for_scenario(Scenario("synthetic:multinode", "dgx-a100", 1.0, 100, 0)) == "gittins"
    assert BEST.for_scenario(Scenario("synthetic:long", "dgx-a100", 2.0, 100, 0)) == "gittins"
    assert BEST.for_scenario(Scenario("synthetic:long", "dgx-a100", 1.0, 100, 0)) == "tiresias"
    env = PlacementEnv(workloads=["synthetic", "synthetic:long", "synthetic:short"], window=100, load=(1.0, 2.4))
    demos = collect(env, 1500, seed=3, teachers=BEST)
    assert len(demos) >= 1500 and demos.exact == 1.0


def test_next_demotion_is_the_earliest_queue_crossing() -> None:
    from policies.rl_encoding import FINE_THRESHOLDS, next_demotion

    specs = [JobSpec("a", 0.0, 2.0, 10_000.0, "ResNet-50-bs64"), JobSpec("b", 0.0, 1.0, 10_000.0, "ResNet-18-bs32")]
    sim = _sim("pcie-v100:1", specs)
    sim.advance()
    _start(sim, 0, (0, 1))
    _start(sim, 1, (2,))
    # a attains 2 GPU-s per second: it crosses 300 GPU-s at t=150; b (1 GPU/s) at t=300.
    assert next_demotion(sim.view, sim.now) == pytest.approx(150.0)
    assert FINE_THRESHOLDS[0] == 300.0
    sim.view.now = 200.0
    assert next_demotion(sim.view, 200.0) == pytest.approx(300.0)  # a is past 300 (next at 3,600: t=1,800)


def test_dagger_rollouts_follow_the_actor_and_keep_the_teachers_labels() -> None:
    from agents.imitation import collect

    def last_valid(obs: np.ndarray, mask: np.ndarray) -> int:
        return int(np.flatnonzero(mask)[-1])

    env = PlacementEnv(workloads=["synthetic"], window=60, load=(1.5, 1.5))
    taught = collect(env, 300, seed=5, teachers="tiresias")
    env = PlacementEnv(workloads=["synthetic"], window=60, load=(1.5, 1.5))
    dagger = collect(env, 300, seed=5, teachers="tiresias", actor=last_valid, beta=0.0)
    # Every label is a valid action, and on the first decision (the same state) it is the teacher's.
    assert dagger.masks[np.arange(len(dagger)), dagger.actions].all()
    assert np.array_equal(dagger.obs[0], taught.obs[0]) and dagger.actions[0] == taught.actions[0]
    # The actor, not the teacher, chose where the episode went: the labelled states differ from the teacher's own.
    actor_choices = np.array([last_valid(o, m) for o, m in zip(dagger.obs, dagger.masks, strict=True)])
    assert (actor_choices != dagger.actions).any()
    n = min(len(taught), len(dagger))
    assert not np.array_equal(dagger.obs[:n], taught.obs[:n])
    merged = taught + dagger
    assert len(merged) == len(taught) + len(dagger) and merged.masks.shape[0] == len(merged)


def test_the_priority_features_and_victims_follow_the_priority_rules() -> None:
    """Encoding 6: a job's slot says what share of GPUs runs at a lower priority and whether it is pinned; the
    cluster part, what share runs pinned and above every pending job. All zero without priorities; a preemption slot
    never names a victim the rules protect."""
    from policies.rl_encoding import PRIORITY_CLUSTER_AT as PRIO_AT
    from policies.rl_encoding import PRIORITY_JOB_AT, SLOT_SIZE

    def point_for(long_priority: int, long_preemptible: bool, new_priority: int) -> tuple[np.ndarray, object]:
        long_run = JobSpec("long", 0.0, 4.0, 100_000.0, "ResNet-50-bs64", priority=long_priority,
                           preemptible=long_preemptible)
        newcomer = JobSpec("new", 5_000.0, 8.0, 100.0, "ResNet-50-bs64", priority=new_priority)
        small = JobSpec("small", 5_000.0, 1.0, 100.0, "ResNet-50-bs64", priority=new_priority)  # fits: a point
        sim = _sim("pcie-v100:1", [long_run, newcomer, small])
        sim.advance()
        _start(sim, 0, tuple(range(4)))
        while sim.now < 5_000.0:
            sim.advance()
        point = decision_point(sim.view, sim.pending.values(), sim.now)
        assert point is not None
        return point.obs, dict(zip(ORDERS, point.slots, strict=False))

    def job_prio(obs: np.ndarray, slot: int) -> list[float]:
        base = slot * SLOT_SIZE + PRIORITY_JOB_AT
        return obs[base:base + 2].tolist()

    preempt = ORDERS.index("preempt-las")
    obs, slots = point_for(0, True, 0)
    assert job_prio(obs, preempt) == [0.0, 0.0] and slots["preempt-las"] is not None  # type: ignore[index]
    assert obs[PRIO_AT:PRIO_AT + 2].tolist() == [0.0, 0.0]
    obs, slots = point_for(0, True, 5)  # the newcomer outranks the running job: half the GPUs run lower
    assert job_prio(obs, preempt) == [0.5, 0.0] and slots["preempt-las"] is not None  # type: ignore[index]
    obs, slots = point_for(0, False, 5)  # pinned: never a victim, and the cluster says half its GPUs are
    assert slots["preempt-las"] is None  # type: ignore[index]
    assert obs[PRIO_AT:PRIO_AT + 2].tolist() == [0.5, 0.0]
    obs, slots = point_for(9, True, 0)  # the running job outranks every pending one
    assert slots["preempt-las"] is None  # type: ignore[index]
    assert obs[PRIO_AT:PRIO_AT + 2].tolist() == [0.0, 0.5]


def test_training_windows_with_priorities() -> None:
    """`--priority-share`: a drawn window carries priorities with that probability (from its own seed, the same jobs
    otherwise); at 0 the draws are those made before priorities existed."""
    from agents.scenarios import draw

    def drawn(share: float) -> Scenario:
        return draw(np.random.default_rng(3), ["synthetic"], ["dgx-a100"], (2, 4), 400, (1.0, 1.0),
                    priority_share=share)

    plain, ranked = drawn(0.0), drawn(1.0)
    assert not plain.priorities and ranked.priorities
    _, jobs = Scenario(**{**ranked.__dict__, "priorities": False}).build()
    _, with_priorities = ranked.build()
    high = sum(j.priority > 0 for j in with_priorities) / len(jobs)
    pinned = sum(not j.preemptible for j in with_priorities) / len(jobs)
    assert 0.05 < high < 0.15 and 0.02 < pinned < 0.09
    assert [(j.submit_s, j.num_gpus) for j in jobs] == [(j.submit_s, j.num_gpus) for j in with_priorities]
    assert all(j.priority == 0 and j.preemptible for j in jobs)


def test_the_fabric_features_see_racks_and_the_uplinks_a_placement_would_share() -> None:
    """Encoding 7: per candidate, the racks it spans beyond the fewest and the busiest fabric link it would cross
    (the other jobs' summed duty cycles there); for the cluster, the fabric links' mean load. All 0 without a fabric,
    where the NIC load is encoding 6's."""
    from policies.rl_encoding import (
        FABRIC_CANDIDATE_AT,
        FABRIC_CANDIDATE_FEATURES,
        FABRIC_CLUSTER_AT,
        candidate_features,
    )

    gpt = "GPT-2.7B"
    # 12 HGX servers under a 3:1 fat-tree: 6 servers a leaf group, so 2 racks of 48 GPUs.
    specs = [JobSpec("running", 0.0, 16, 36_000.0, gpt), JobSpec("new", 1.0, 16, 3_600.0, gpt)]
    sim = _sim("hgx-h100:12@fat-tree-3:1", specs)
    c = sim.cluster
    assert c.num_racks == 2 and c.max_rack_gpus == 48

    def on(*servers: int) -> Placement:
        return Placement(tuple(8 * s + k for s in servers for k in range(8)))

    sim.advance()
    _start(sim, 0, on(0, 6).gpus)  # across both racks: its ring climbs both leaves' uplinks
    _arrive_all(sim)
    job = sim.jobs[1]
    fabric_at = FABRIC_CANDIDATE_AT
    fabric = slice(fabric_at, fabric_at + FABRIC_CANDIDATE_FEATURES)
    inside = candidate_features(sim.view, job, on(1, 2), sim.view.predict(job.spec, on(1, 2)), False)
    across = candidate_features(sim.view, job, on(1, 7), sim.view.predict(job.spec, on(1, 7)), False)
    assert inside[fabric].tolist() == [0.0, 0.0]  # one rack: no uplink, no rack beyond the one it needs
    assert across[fabric_at] == pytest.approx(0.25)  # one rack beyond the fewest, / 4
    shared = np.asarray(sim.view.link_load)[c.fabric_links].max()
    assert shared > 0 and across[fabric_at + 1] == pytest.approx(shared, rel=1e-6)  # the running job's load there
    # Without the running job nothing is on the uplinks: the same placement crosses them at load 0.
    alone = _sim("hgx-h100:12@fat-tree-3:1", [replace(specs[1], submit_s=0.0)])
    _arrive_all(alone)
    assert candidate_features(alone.view, alone.jobs[0], on(1, 7),
                              alone.view.predict(alone.jobs[0].spec, on(1, 7)), False)[fabric_at + 1] == 0.0
    point = decision_point(sim.view, sim.pending.values(), sim.now)
    assert point is not None
    mean_load = float(np.mean(np.asarray(sim.view.link_load)[c.fabric_links]))
    assert point.obs[FABRIC_CLUSTER_AT] == pytest.approx(mean_load, rel=1e-5) and mean_load > 0
    # The NIC load is the busiest of a server's 8 NICs: server 0's carry the running job's traffic.
    nic_load = candidate_features(sim.view, job, on(0, 1), sim.view.predict(job.spec, on(0, 1)), False)[4]
    assert nic_load == pytest.approx(np.asarray(sim.view.link_load)[c.nics_of(np.array([0]))].max()) and nic_load > 0

    # No fabric: the same jobs on 12 DGX servers (racks of the old model) give zeros.
    plain = _sim("dgx-a100:12", [JobSpec("running", 0.0, 16, 36_000.0, "Transformer-XL"),
                                 JobSpec("new", 1.0, 16, 3_600.0, "Transformer-XL")])
    plain.advance()
    _start(plain, 0, on(0, 6).gpus)
    _arrive_all(plain)
    pj = plain.jobs[1]
    feats = candidate_features(plain.view, pj, on(1, 7), plain.view.predict(pj.spec, on(1, 7)), False)
    assert feats[fabric].tolist() == [0.0, 0.0] and plain.cluster.fabric_links.size == 0
    plain_point = decision_point(plain.view, plain.pending.values(), plain.now)
    assert plain_point is not None and plain_point.obs[FABRIC_CLUSTER_AT] == 0.0


def test_jobs_alike_passed_over_by_a_preemption_order_are_asked_once(monkeypatch) -> None:
    """A deep queue of jobs alike that fit: the preemption orders pass over every one of them, and the frame asks
    (whether the plan has room) once for all of them while the plan is unchanged. The decision point is the one
    asking each job gives, bit for bit."""
    from policies import rl_scan
    from policies.placement import Planner
    from policies.rl_encoding import DecisionPoint, _Frame
    from policies.rl_scan import Scan

    def point_of(memo: bool) -> tuple[DecisionPoint, int]:
        specs = [JobSpec("long", 0.0, 4.0, 1e7, "ResNet-50-bs64")]
        specs += [JobSpec(f"alike{i}", 1.0, 1.0, 100.0, "ResNet-18-bs32") for i in range(30)]
        specs += [JobSpec("big", 2.0, 16.0, 100.0, "ResNet-50-bs64")]  # fits nowhere: the orders scan past the rest
        sim = _sim("pcie-v100:2", specs)
        sim.advance()
        _start(sim, 0, (0, 1, 2, 3))  # something runs: the preemption orders scan the queue
        _arrive_all(sim)
        asked = []
        monkeypatch.setattr(rl_scan, "_LOOP", 0)  # a short queue: the arrays' scan even so
        has_room = Planner.has_room
        monkeypatch.setattr(Planner, "has_room", lambda self, s: asked.append(s.name) or has_room(self, s))
        if not memo:  # neither the scan's answer per class (`policies.rl_scan`) nor the frame's per plan
            passing = _Frame._passing
            monkeypatch.setattr(_Frame, "_passing", lambda self, s: self._passed.clear() or passing(self, s))
            init = Scan.__init__
            monkeypatch.setattr(Scan, "__init__", lambda self, frame, jobs, known, classes, alone, *rest: init(
                self, frame, jobs, known, classes, np.ones_like(alone), *rest))
        point = decision_point(sim.view, sim.pending.values(), sim.now)
        monkeypatch.undo()
        assert point is not None
        return point, len(asked)

    fast, asked_once = point_of(memo=True)
    slow, asked_each = point_of(memo=False)
    assert asked_each >= 25 * asked_once > 0  # every alike job passed over was asked, or only the first
    assert fast.obs.tobytes() == slow.obs.tobytes() and (fast.mask == slow.mask).all()
    assert [(s.job.id, s.candidates, s.victims) if s else None for s in fast.slots] == \
        [(s.job.id, s.candidates, s.victims) if s else None for s in slow.slots]
