"""The RL encoding inside the tenancy frame (encoding version 5, and 6 which adds priorities): the standing the frame hands its policy, the team
features it becomes, the environment's windows with teams, and `rl:default` inside the frame."""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pytest
from conftest import small_cluster

from agents.env import PlacementEnv
from agents.imitation import collect
from agents.scenarios import Scenario
from policies import make_policy
from policies.rl_encoding import (
    CLUSTER_FEATURES,
    ENCODING_VERSION,
    MAX_JOBS,
    OBS_HIGH,
    OBS_LOW,
    OBS_SIZE,
    ORDERS,
    PRIORITY_JOB_AT,
    SLOT_SIZE,
    TEAM_CLUSTER_AT,
    TEAM_CLUSTER_FEATURES,
    TEAM_JOB_AT,
    TEAM_JOB_FEATURES,
    DecisionPoint,
    decision_point,
)
from policies.trained import AgentLoadError
from scheduler.core.decisions import Decision
from scheduler.core.model import Job, JobSpec, Placement
from scheduler.core.simulator import Placed, Simulator
from scheduler.core.standing import TenancyStanding
from scheduler.core.state import ClusterView
from scheduler.core.tenancy import Teams, TenancyFrame

ZOO = Path(__file__).resolve().parents[1] / "agents" / "zoo"
# Where a job slot's team features start, and the cluster's (encoding 6's priority features follow each).
TEAM_AT = TEAM_JOB_AT


def tjob(name: str, gpus: float, team: str, duration: float = 600.0, submit: float = 0.0) -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=gpus, duration_s=duration, model="ResNet-50-bs64", team=team)


def teams(*quotas: tuple[str, float]) -> Teams:
    return Teams.parse({"half_life_s": 3600.0, "teams": [{"name": n, "quota_gpus": q} for n, q in quotas]},
                       cluster_gpus=8)


class Capture:
    """A wrapped policy that starts nothing and keeps what it was told and what the encoding made of it."""

    name = "capture"
    oracle = False

    def __init__(self) -> None:
        self.calls: list[tuple[TenancyStanding | None, list[str], DecisionPoint | None]] = []

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        self.calls.append((view.tenancy, [j.spec.name for j in queue], decision_point(view, queue, now)))
        return []


def two_teams() -> tuple[Simulator, Capture, TenancyFrame]:
    """8 GPUs; team a (quota 4) runs 1 GPU and has a0 waiting within its quota; team b (quota 4) runs 5 GPUs, one
    borrowed, and has b9 (half a GPU, so it heads the `smallest` order) waiting: it would borrow from the GPU a0
    leaves free."""
    placed = [Placed(tjob("a-run", 1, "a", 9000.0), Placement((0,)), 9000.0)]
    placed += [Placed(tjob(f"b-run{g}", 1, "b", 9000.0), Placement((g,)), 9000.0) for g in range(1, 6)]
    capture = Capture()
    frame = TenancyFrame(capture, teams(("a", 4), ("b", 4)))
    sim = Simulator(small_cluster(nodes=2, gpus=4), [tjob("a0", 1, "a"), tjob("b9", 0.5, "b")], frame,
                    contention=False, initial=placed)
    sim.advance()
    return sim, capture, frame


def slot_of(point: DecisionPoint, name: str) -> np.ndarray:
    j = next(j for j, s in enumerate(point.slots) if s is not None and s.job.spec.name == name)
    return point.obs[j * SLOT_SIZE:(j + 1) * SLOT_SIZE]


def test_the_frame_tells_its_policy_each_teams_standing_and_only_while_it_asks() -> None:
    sim, capture, frame = two_teams()
    frame.schedule(sim.view, sim.pending.values(), sim.now)
    told, queue, _ = capture.calls[0]
    assert queue == ["a0", "b9"] and sim.view.tenancy is None  # cleared once the policy has answered
    assert told is not None
    a, b = told.teams["a"], told.teams["b"]
    assert (a.in_use_gpus, a.borrowed_gpus, b.in_use_gpus, b.borrowed_gpus) == (1.0, 0.0, 5.0, 1.0)
    # Usage is 0 for both at t=0: fair share breaks the tie by name, a first; `default` has no demand.
    assert (a.rank, b.rank, told.teams["default"].has_demand, told.teams_with_demand) == (0.0, 1.0, False, 2)
    ids = {j.spec.name: j.id for j in sim.jobs}
    assert told.within_quota == {ids["a0"]} and not told.swaps and not told.swap_call
    assert told.lendable_gpus == pytest.approx(0.5)  # 2 free: 1 held for a0, half counted on by b9
    assert told.lent_gpus == pytest.approx(1.0)  # quotas cover the cluster: b's borrowed GPU is a's idle quota


def test_the_standing_features_of_a_job_within_quota_and_of_a_borrower() -> None:
    sim, capture, frame = two_teams()
    frame.schedule(sim.view, sim.pending.values(), sim.now)
    point = capture.calls[0][2]
    assert point is not None
    a0 = slot_of(point, "a0")[TEAM_AT:TEAM_AT + TEAM_JOB_FEATURES]
    b9 = slot_of(point, "b9")[TEAM_AT:TEAM_AT + TEAM_JOB_FEATURES]
    # borrows, swap, borrowed over quota, borrowed share of the team's GPUs, fair-share rank
    np.testing.assert_allclose(a0, [0.0, 0.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(b9, [1.0, 0.0, 1 / 4, 1 / 5, 1.0], rtol=1e-6)
    cluster = point.obs[TEAM_CLUSTER_AT:TEAM_CLUSTER_AT + TEAM_CLUSTER_FEATURES]
    # borrowed share of the running GPUs, lent GPUs per cluster GPU, teams with demand beyond one (log2 / 4)
    np.testing.assert_allclose(cluster, [1 / 6, 1 / 8, 0.25], rtol=1e-6)
    assert OBS_SIZE == MAX_JOBS * SLOT_SIZE + CLUSTER_FEATURES and ENCODING_VERSION == 8


def swap_scene() -> tuple[Simulator, Capture]:
    """Team a (quota 4) runs 4 GPUs and has a9 waiting; b (quota 4) runs 2 and waits for b9 (2 GPUs within its
    quota), so the 2 free GPUs are held for b9 and a9 may start only by a swap. The frame has been asked once."""
    placed = [Placed(tjob(f"a-run{g}", 1, "a", 90000.0), Placement((g,)), 90000.0) for g in range(4)]
    placed += [Placed(tjob("b-run", 2, "b", 90000.0), Placement((4, 5)), 90000.0)]
    capture = Capture()
    frame = TenancyFrame(capture, teams(("a", 4), ("b", 4)))
    pending = [tjob("a9", 1, "a", submit=7200.0), tjob("b9", 2, "b", submit=7200.0)]
    sim = Simulator(small_cluster(nodes=2, gpus=4), pending, frame, contention=False, initial=placed)
    sim.advance()
    frame.schedule(sim.view, sim.pending.values(), sim.now)
    return sim, capture


def test_a_swap_call_says_so_and_offers_only_starts_that_preempt_the_jobs_own_team() -> None:
    """Team a (quota 4) runs 4 GPUs and has a9 waiting; b (quota 4) runs 2 and waits for b9 (2 GPUs within its
    quota), so the 2 free GPUs are held for b9 and a9 may start only by a swap: preempting one of a's own jobs (two
    GPU-hours in, they are in a lower queue than a9, as are b's)."""
    sim, capture = swap_scene()
    (asked, queue_a, _), (swap, queue_s, point) = capture.calls
    assert queue_a == ["b9"] and queue_s == ["a9"] and swap is not None and swap.swap_call and asked is not None and not asked.swap_call
    assert point is not None and all(s is None or s.victims for s in point.slots)  # no start on the held GPUs
    victims = {v for s in point.slots if s is not None for v in s.victims}
    assert victims and all(sim.jobs[v].spec.team == "a" for v in victims)
    assert slot_of(point, "a9")[TEAM_AT + 1] == 1.0  # the swap feature


def test_without_teams_the_team_features_are_neutral_as_for_one_team_owning_the_cluster() -> None:
    """The same cluster and queue, encoded without teams and inside a frame where one team owns every GPU (and every
    pending job is within its quota): the observations are identical, the team features all 0."""
    placed = [Placed(tjob(f"r{g}", 1, "all", 9000.0), Placement((g,)), 9000.0) for g in range(3)]
    pending = [tjob("p0", 1, "all"), tjob("p1", 2, "all")]
    plain = Simulator(small_cluster(nodes=2, gpus=4), pending, None, contention=False, initial=placed)
    plain.advance()
    alone = decision_point(plain.view, plain.pending.values(), plain.now)
    capture = Capture()
    frame = TenancyFrame(capture, teams(("all", 8)))
    owned = Simulator(small_cluster(nodes=2, gpus=4), pending, frame, contention=False, initial=placed)
    owned.advance()
    frame.schedule(owned.view, owned.pending.values(), owned.now)
    told, queue, framed = capture.calls[0]
    assert told is not None and queue == ["p0", "p1"] and alone is not None and framed is not None
    np.testing.assert_array_equal(alone.obs, framed.obs)
    for j, slot in enumerate(alone.slots):
        if slot is not None:
            assert not alone.obs[j * SLOT_SIZE + TEAM_AT:j * SLOT_SIZE + PRIORITY_JOB_AT + 2].any()
    assert not alone.obs[TEAM_CLUSTER_AT:].any()
    assert len(ORDERS) == MAX_JOBS


def env_with_teams(window: int = 60) -> PlacementEnv:
    return PlacementEnv(workloads=["synthetic", "synthetic:multinode"], window=window, load=(1.3, 2.0), team_share=1.0)


def test_the_environment_inside_the_frame_passes_check_env_and_its_episodes_finish() -> None:
    from gymnasium.utils.env_checker import check_env

    check_env(env_with_teams(40), skip_render_check=True)
    env = env_with_teams()
    for seed, pick in ((1, 0), (2, -1)):
        obs, info = env.reset(seed=seed)
        assert info["teams"] >= 2 and env.frame is not None
        done, steps, swaps_seen = False, 0, 0
        while not done:
            mask = env.action_masks()
            assert env.observation_space.contains(obs) and mask.any()
            swaps_seen += env.decision_is_swap
            obs, _, terminated, truncated, out = env.step(int(np.flatnonzero(mask)[pick]))
            steps += 1
            done = terminated or truncated
        assert terminated and out["metrics"]["jobs_completed"] == 60, (seed, steps)
        assert float(obs.min()) >= OBS_LOW and float(obs.max()) <= OBS_HIGH


def test_the_environment_draws_teams_with_the_asked_probability_from_its_own_rng() -> None:
    env = PlacementEnv(window=30, team_share=0.5)
    drawn = [env.reset(seed=s)[1]["teams"] for s in range(12)]
    again = [env.reset(seed=s)[1]["teams"] for s in range(12)]
    assert drawn == again and 0 < sum(1 for t in drawn if t) < 12 and set(drawn) <= {0, 2, 3, 4}
    assert all(info == 0 for info in (PlacementEnv(window=30).reset(seed=s)[1]["teams"] for s in range(4)))


def test_a_scenario_with_teams_builds_the_same_jobs_with_skewed_teams_and_equal_quotas() -> None:
    sc = Scenario("synthetic", "dgx-a100", 1.3, 200, 7, nodes=4, teams=4)
    cluster, jobs = sc.build()
    plain = Scenario("synthetic", "dgx-a100", 1.3, 200, 7, nodes=4).build()[1]
    assert [j.name for j in jobs] == [j.name for j in plain] and sc.build()[1] == jobs
    counts = [sum(1 for j in jobs if j.team == f"team{k}") for k in range(4)]
    assert sum(counts) == 200 and counts[0] > counts[3]
    tm = sc.tenancy(cluster)
    assert tm is not None and [t.quota_gpus for t in tm.teams.values()] == [cluster.num_gpus / 4] * 4
    assert Scenario("synthetic", "dgx-a100", 1.3, 200, 7).tenancy(cluster) is None


def test_the_warm_start_teacher_is_asked_inside_the_frame() -> None:
    """The teacher is asked about the jobs the frame asks the agent about, so most of its choices are actions (not
    all: asked about swaps, the job it would swap in is sometimes not the head of any preemption slot)."""
    demos = collect(env_with_teams(), 300, seed=3, teachers="tiresias")
    assert len(demos) >= 300 and demos.exact >= 0.85
    assert demos.obs.shape[1] == OBS_SIZE and demos.masks[np.arange(len(demos)), demos.actions].all()


@pytest.mark.slow  # an agent's or a trainer's run: seconds
def test_rl_default_finishes_a_small_window_with_teams_inside_the_frame() -> None:
    sc = Scenario("synthetic", "dgx-a100", 1.5, 80, 11, nodes=2, teams=3)
    cluster, jobs = sc.build()
    result = Simulator(cluster, jobs, make_policy("rl:default"), teams=sc.tenancy(cluster)).run()
    assert result.metrics["jobs_completed"] == 80 and result.teams is not None
    assert 0.0 < result.teams["jain"] <= 1.0


def test_a_version_4_agent_is_refused_with_the_usual_message(tmp_path: Path) -> None:
    shutil.copy(ZOO / "default.zip", tmp_path / "old.zip")
    meta = json.loads((ZOO / "default.json").read_text()) | {"encoding_version": 4}
    (tmp_path / "old.json").write_text(json.dumps(meta))
    with pytest.raises(AgentLoadError, match=rf"trained for encoding version 4, this Corral speaks version {ENCODING_VERSION}; "
                                             r"retrain it with `corral train"):
        make_policy(f"rl:{tmp_path / 'old.zip'}")


def test_asked_about_swaps_the_teacher_is_labelled_by_the_start_the_frame_would_keep() -> None:
    """In a swap call a teacher's start on free GPUs (held for others) is not an action; its job's swap is, and a
    start preempting another team's job is dropped by the frame: declining is the label."""
    from agents.imitation import kept_swap
    from scheduler.core.decisions import Place, Preempt

    sim, capture = swap_scene()
    point = capture.calls[1][2]
    assert point is not None
    ids = {j.spec.name: j.id for j in sim.jobs}
    on_free = [Place(ids["a9"], Placement((6,)))]
    action, exact = kept_swap(sim, point, on_free)
    assert exact and action == point.action_of(ids["a9"], (6,), preempts=True) and action != point.quiet_action()
    other_team = [Preempt(ids["b-run"]), Place(ids["a9"], Placement((4,)))]
    assert kept_swap(sim, point, other_team) == (point.quiet_action(), True)
