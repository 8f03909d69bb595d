"""DeepShare's formulation as a baseline: its environment passes both checkers, survives invalid and non-fitting
actions, rewards what its docstring says, stays within its fixed grid; its policy acts as the environment does, and
the deepshare: loader refuses missing, corrupt, foreign and too-large cases with one clear message."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import job, small_cluster

import agents  # noqa: F401  (registers corral/DeepShare-v0)
from agents.deepshare_env import DeepShareEnv
from agents.scenarios import SYNTHETIC, Scenario, scale_to_load
from policies import make_policy
from policies.deepshare import (
    DEEPSHARE_VERSION,
    MAX_NODES,
    N_ACTIONS,
    N_PAIRS,
    OBS_SIZE,
    PAIRS,
    WAIT,
    DeepSharePolicy,
    action_placement,
    check_cluster,
    node_pair,
    pair_action,
    split_workers,
)
from policies.placement import Planner
from policies.trained import AgentLoadError
from scheduler.core.decisions import Place
from scheduler.core.model import Placement, SpecError, parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.traces import synthetic

pytestmark = pytest.mark.slow  # trains and evaluates DeepShare agents

Chooser = Callable[[np.ndarray], int]


def run_episode(env: DeepShareEnv, choose: Chooser, seed: int = 3, cluster: str = "pcie-v100:2",
                ) -> tuple[float, dict[str, Any], int]:
    obs, _ = env.reset(seed=seed, options={"cluster": cluster})
    total, info, invalid = 0.0, dict[str, Any](), 0
    while True:
        assert obs.shape == (OBS_SIZE,) and env.observation_space.contains(obs)
        obs, reward, terminated, truncated, info = env.step(choose(obs))
        total += reward
        invalid += "invalid_action" in info
        if terminated or truncated:
            return total, info, invalid


def by_obs(obs: np.ndarray) -> int:
    """A deterministic stand-in for an agent: some action, valid or not, that depends on what it sees."""
    return int(obs.sum() * 1000) % N_ACTIONS


class StubModel:
    """What DeepSharePolicy needs of a PPO model."""

    def __init__(self, choose: Chooser) -> None:
        self.choose = choose

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> tuple[np.ndarray, None]:
        return np.array(self.choose(obs)), None


# ---- the formulation ------------------------------------------------------------------------------------------------


def test_action_space_is_node_pairs_then_wait() -> None:
    assert N_PAIRS == MAX_NODES * (MAX_NODES + 1) // 2 == 136 and N_ACTIONS == 137 and WAIT == 136
    assert all(node_pair(pair_action(i, j)) == (min(i, j), max(i, j)) for i in range(16) for j in range(16))
    assert node_pair(WAIT) is None and node_pair(-1) is None and len(set(PAIRS)) == N_PAIRS


@pytest.mark.parametrize(("workers", "free_i", "free_j", "expected"), [
    (4, 8, 2, (2, 2)),  # even
    (3, 2, 8, (2, 1)),  # the larger half on the fuller node
    (6, 5, 1, (5, 1)),  # as even as the free GPUs allow
    (1, 5, 3, (0, 1)),  # a single worker on the fuller node
    (5, 2, 2, None),  # does not fit
])
def test_split_workers(workers: int, free_i: int, free_j: int, expected: tuple[int, int] | None) -> None:
    assert split_workers(workers, free_i, free_j) == expected


def test_actions_map_to_placements_on_the_named_nodes() -> None:
    cluster = parse_cluster("pcie-v100:2")
    sim = Simulator(cluster, [job("big", 0, 8, 100), job("two", 0, 2, 100), job("frac", 0, 0.5, 100)], None)
    sim.advance()
    sim.apply([Place(0, Placement(tuple(range(8))))])  # node 0 full
    planner = Planner(sim.view)
    two, frac = sim.jobs[1].spec, sim.jobs[2].spec
    assert action_placement(planner, two, pair_action(0, 0)) is None  # no room on node 0
    assert action_placement(planner, two, pair_action(0, 5)) is None  # node 5 does not exist
    assert action_placement(planner, two, WAIT) is None
    on_1 = action_placement(planner, two, pair_action(1, 1))
    assert on_1 is not None and on_1.nodes(cluster) == [1] and len(on_1.gpus) == 2
    # The pair (0, 1) with node 0 full: both workers on node 1, under one PCIe switch (Planner.gpus_in_node).
    split = action_placement(planner, two, pair_action(0, 1))
    assert split is not None and split.nodes(cluster) == [1]
    assert len({int(cluster.gpu_switch[g]) for g in split.gpus}) == 1
    assert action_placement(planner, frac, pair_action(1, 0)) is None  # a share goes on node i = min(i, j) only
    share = action_placement(planner, frac, pair_action(1, 1))
    assert share is not None and share.share == 0.5 and share.nodes(cluster) == [1]


# ---- the environment ------------------------------------------------------------------------------------------------


def test_gymnasium_and_sb3_checkers_pass() -> None:
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make("corral/DeepShare-v0", window=40)
    assert env.observation_space.shape == (OBS_SIZE,) and env.action_space == gym.spaces.Discrete(N_ACTIONS)
    check_env(env.unwrapped)
    sb3_check_env(DeepShareEnv(window=40))


def test_invalid_and_non_fitting_actions_make_the_job_wait() -> None:
    env = DeepShareEnv(window=40, invalid_penalty=5.0)
    env.reset(seed=0, options={"cluster": "pcie-v100:2"})
    sim = env.sim
    assert sim is not None and not sim.running
    # On an idle cluster even an invalid action places the job (waiting would never end), but it is still penalised.
    _, reward, _, _, info = env.step(N_ACTIONS + 5)
    assert info["invalid_action"] == N_ACTIONS + 5 and reward < -4.0 and sim.running
    refused = {"absent": 0, "full": 0}
    terminated = False
    while not terminated:
        point = env._point
        assert point is not None
        full = [k for k in range(2) if action_placement(point.planner, point.job.spec, pair_action(k, k)) is None]
        if not sim.running:
            _, _, terminated, _, info = env.step(pair_action(0, 1))
            continue
        kind = "full" if full and refused["full"] <= refused["absent"] else "absent"
        action = pair_action(full[0], full[0]) if kind == "full" else pair_action(0, 7)
        waiting, now = point.job.id, sim.now
        _, reward, terminated, _, info = env.step(action)
        assert info["invalid_action"] == action and reward < -4.0
        assert waiting not in sim.running  # passed over, not placed
        # Not asked again at this instant.
        assert terminated or sim.now > now or (env._point is not None and env._point.job.id != waiting)
        refused[kind] += 1
    assert refused["full"] > 0 and refused["absent"] > 0
    assert info["metrics"]["jobs_completed"] == 40
    # Always asking for an absent node still finishes every job (placed whenever the cluster goes idle).
    _, info, invalid = run_episode(DeepShareEnv(window=40), lambda obs: pair_action(3, 9))
    assert info["metrics"]["jobs_completed"] == 40 and invalid > 0


def test_always_waiting_still_finishes() -> None:
    _, info, invalid = run_episode(DeepShareEnv(window=40), lambda obs: WAIT)
    assert info["metrics"]["jobs_completed"] == 40 and invalid == 0


def test_utilisation_reward_integrates_to_busy_gpu_time() -> None:
    """With only the utilisation term the return is the integral of allocated share / GPUs over the episode."""
    env = DeepShareEnv(window=60, contention_weight=0.0, utilisation_weight=1.0, slo_weight=0.0, invalid_penalty=0.0,
                       reward_scale_s=1.0)
    total, info, invalid = run_episode(env, by_obs)
    m = info["metrics"]
    assert m["jobs_completed"] == 60 and invalid > 0
    assert total == pytest.approx(m["gpu_util"] * m["makespan_s"], rel=1e-6)


def test_contention_reward_penalises_sharing() -> None:
    env = DeepShareEnv(window=60, contention_weight=1.0, utilisation_weight=0.0, slo_weight=0.0, invalid_penalty=0.0)
    total, info, _ = run_episode(env, by_obs)
    assert total < 0.0 and info["metrics"]["avg_contention_slowdown"] > 1.0


def test_same_seed_same_episode() -> None:
    a = run_episode(DeepShareEnv(window=40), by_obs, seed=7, cluster="dgx-a100:3")
    b = run_episode(DeepShareEnv(window=40), by_obs, seed=7, cluster="dgx-a100:3")
    assert a[0] == b[0] and a[1]["metrics"] == b[1]["metrics"]
    env = DeepShareEnv(window=40)
    first = env.reset(seed=11)
    assert np.array_equal(first[0], env.reset(seed=11)[0]) and first[1] == env.reset(seed=11)[1]


def test_clusters_stay_within_the_grid(tmp_path: Path) -> None:
    env = DeepShareEnv(window=30, nodes=(20, 40))
    assert env.source.nodes == (MAX_NODES, MAX_NODES)
    _, info = env.reset(seed=0)
    assert env.sim is not None and env.sim.cluster.num_nodes == MAX_NODES and "capped" not in info
    with pytest.raises(SpecError, match="fixed per-GPU grid .* use rl:default"):
        env.reset(seed=0, options={"cluster": "pcie-v100:17"})
    # A trace window whose load-sized cluster would need more nodes runs on 16, and says so.
    trace = tmp_path / "wide.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s,kind,model\n"
                     + "".join(f"j{k},{k},8,10000,training,ResNet-50-bs64\n" for k in range(40)))
    scenario = Scenario(str(trace), "pcie-v100", 0.6, 40, 0)
    assert scenario.build()[0].num_nodes > MAX_NODES
    _, info = env.reset(seed=0, options={"scenario": scenario})
    assert env.sim.cluster.num_nodes == MAX_NODES and "capped at 16" in info["capped"]


# ---- the policy and its loader --------------------------------------------------------------------------------------


def test_policy_acts_as_the_environment_does() -> None:
    scenario = Scenario(SYNTHETIC, "pcie-v100", 0.9, 60, seed=5, nodes=3)
    env = DeepShareEnv()
    obs, _ = env.reset(options={"scenario": scenario})
    while True:
        obs, _, terminated, _, step_info = env.step(by_obs(obs))
        if terminated:
            break
    cluster, jobs = scenario.build()
    result = Simulator(cluster, jobs, DeepSharePolicy(StubModel(by_obs), "stub")).run()
    assert step_info["metrics"].pop("truncated") is False
    assert result.metrics == step_info["metrics"] and result.metrics["jobs_completed"] == 60


def test_gangs_beyond_a_node_pair_take_the_best_fit() -> None:
    jobs = [job("huge", 0, 24, 100), job("small", 1, 1, 100)]
    result = Simulator(parse_cluster("dgx-a100:4"), jobs, DeepSharePolicy(StubModel(lambda obs: WAIT), "w")).run()
    assert result.metrics["jobs_completed"] == 2
    assert result.jobs[0].first_start_s == 0.0  # placed on arrival without asking the agent to pick a pair


def test_too_large_clusters_are_refused_clearly() -> None:
    policy = DeepSharePolicy(StubModel(lambda obs: WAIT), "stub")
    with pytest.raises(SpecError, match="17 nodes, its grid holds at most 16: .*fixed per-GPU grid.*use rl:default"):
        Simulator(parse_cluster("pcie-v100:17"), synthetic(5, seed=0).jobs, policy).run()
    with pytest.raises(SpecError, match="16 GPUs in a node, its grid holds at most 8"):
        check_cluster(small_cluster(nodes=2, gpus=16))
    check_cluster(parse_cluster("dgx-a100:16"))  # the largest grid fits


def test_loader_errors(tmp_path: Path) -> None:
    retrain = r"retrain it with `corral train --formulation deepshare --out PATH.zip`"
    with pytest.raises(AgentLoadError, match=f"no trained agent at .*nope.zip; {retrain}"):
        make_policy("deepshare:nope")
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(AgentLoadError, match=f"bad.json .* is missing; {retrain}"):
        make_policy(f"deepshare:{bad}")
    sidecar = tmp_path / "bad.json"
    sidecar.write_text("{not json")
    with pytest.raises(AgentLoadError, match="bad.json is not valid JSON"):
        make_policy(f"deepshare:{bad}")
    sidecar.write_text(json.dumps({"encoding_version": 2}))  # an rl: agent's sidecar
    with pytest.raises(AgentLoadError, match="says formulation None, not 'deepshare'"):
        make_policy(f"deepshare:{bad}")
    sidecar.write_text(json.dumps({"formulation": "deepshare", "encoding_version": DEEPSHARE_VERSION + 1}))
    with pytest.raises(AgentLoadError, match=f"trained for DeepShare encoding version {DEEPSHARE_VERSION + 1}"):
        make_policy(f"deepshare:{bad}")
    sidecar.write_text(json.dumps({"formulation": "deepshare", "encoding_version": DEEPSHARE_VERSION}))
    with pytest.raises(AgentLoadError, match=f"not a stable-baselines3 zip .*; {retrain}"):
        make_policy(f"deepshare:{bad}")


def test_ppo_learns_a_few_steps_and_acts_in_the_simulator(tmp_path: Path) -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import configure

    model = PPO("MlpPolicy", DeepShareEnv(window=40), n_steps=128, batch_size=64, seed=0, device="cpu")
    # SB3's default logger would make a SB3-<date> folder in the system's temporary directory: keep it in tmp_path.
    model.set_logger(configure(str(tmp_path / "sb3-log"), []))
    sb3_dirs = set(Path(tempfile.gettempdir()).glob("SB3-*"))
    model.learn(total_timesteps=256)
    assert set(Path(tempfile.gettempdir()).glob("SB3-*")) == sb3_dirs
    path = tmp_path / "smoke.zip"
    model.save(path)
    (tmp_path / "smoke.json").write_text(json.dumps({"formulation": "deepshare",
                                                     "encoding_version": DEEPSHARE_VERSION}))
    policy = make_policy(f"deepshare:{path}")
    assert isinstance(policy, DeepSharePolicy) and policy.name == f"deepshare:{path}"
    trace = synthetic(80, seed=1, mean_interarrival_s=120).jobs
    result = Simulator(parse_cluster("pcie-v100:2"), trace, policy).run()
    assert result.metrics["jobs_completed"] == 80
    # A model of another shape under a valid sidecar is refused, not run.
    from stable_baselines3.common.env_util import make_vec_env

    other = PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=1), n_steps=64, batch_size=64, device="cpu")
    other.save(tmp_path / "cart.zip")
    (tmp_path / "cart.json").write_text((tmp_path / "smoke.json").read_text())
    with pytest.raises(AgentLoadError, match=f"expected \\({OBS_SIZE},\\) and {N_ACTIONS}"):
        make_policy(f"deepshare:{tmp_path / 'cart.zip'}")


def test_scenario_arrivals_match_the_placement_env_on_a_fixed_cluster() -> None:
    """options["cluster"] rescales synthetic arrivals to the scenario's load, as corral/Placement-v0 does."""
    scenario = Scenario(SYNTHETIC, "pcie-v100", 0.8, 30, seed=2, nodes=4)
    env = DeepShareEnv()
    env.reset(options={"scenario": scenario, "cluster": "pcie-v100:2"})
    expected = scale_to_load(scenario.build()[1], 16, 0.8)
    assert env.sim is not None and [j.submit_s for j in env.sim.specs] == [j.submit_s for j in expected]
