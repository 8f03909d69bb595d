"""The RL environment passes both checkers, masks what it must, survives invalid actions, and the rl: loader
refuses missing, corrupt and foreign-version agents with one clear message."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import agents  # noqa: F401  (registers corral/Placement-v0)
from agents.env import PlacementEnv
from policies import make_policy
from policies.rl_encoding import ENCODING_VERSION, N_ACTIONS, OBS_SIZE, WAIT
from policies.trained import AgentLoadError


def test_gymnasium_and_sb3_checkers_pass() -> None:
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make("corral/Placement-v0", window=40)
    check_env(env.unwrapped)
    sb3_check_env(PlacementEnv(window=40))


def run_episode(env: PlacementEnv, choose) -> tuple[float, dict]:
    obs, _ = env.reset(seed=3, options={"cluster": "pcie-v100:2"})
    total, info = 0.0, {}
    while True:
        assert obs.shape == (OBS_SIZE,) and env.observation_space.contains(obs)
        obs, reward, terminated, truncated, info = env.step(choose(env.action_masks()))
        assert reward <= 0.0
        total += reward
        if terminated or truncated:
            return total, info


def test_episode_return_is_minus_total_jct() -> None:
    env = PlacementEnv(window=60, reward_scale_s=1.0, slo_weight=0.0)
    total, info = run_episode(env, lambda mask: int(np.flatnonzero(mask)[0]))
    m = info["metrics"]
    assert m["jobs_completed"] == 60
    assert -total == pytest.approx(m["avg_jct_s"] * 60, rel=1e-6)


def test_wait_is_masked_on_an_idle_cluster_and_invalid_actions_do_not_crash() -> None:
    env = PlacementEnv(window=30)
    env.reset(seed=0, options={"cluster": "dgx-a100:2"})
    assert env.sim is not None and not env.sim.running
    mask = env.action_masks()
    assert mask.shape == (N_ACTIONS,) and not mask[WAIT] and mask[0]
    _, _, _, _, info = env.step(N_ACTIONS + 5)  # out of range
    assert info["invalid_action"] == N_ACTIONS + 5
    assert env.sim.running  # taken as candidate 0, since waiting was masked


def test_the_environment_sees_a_drained_node_as_the_controller_does() -> None:
    """Node 0 of two is drained for the first 3,000 s: no action the masks offer places a job there meanwhile."""
    from scheduler.core.outages import Outage

    env = PlacementEnv(window=30)
    env.reset(seed=0, options={"cluster": "dgx-a100:2", "outages": [Outage(0.0, 3000.0, node=0, reason="repair")]})
    assert env.sim is not None
    node0 = set(range(8))
    while True:
        mask = env.action_masks()
        _, _, done, truncated, info = env.step(int(np.flatnonzero(mask)[0]))
        if env.sim.now < 3000.0:
            assert not any(node0 & set(j.placement.gpus) for j in env.sim.running.values() if j.placement), env.sim.now
        if done or truncated:
            break
    assert info["metrics"]["jobs_completed"] == 30


def test_always_waiting_still_finishes() -> None:
    env = PlacementEnv(window=30)
    _, info = run_episode(env, lambda mask: WAIT if mask[WAIT] else int(np.flatnonzero(mask)[0]))
    assert info["metrics"]["jobs_completed"] == 30


def test_same_seed_same_episode() -> None:
    a = run_episode(PlacementEnv(window=40), lambda m: int(np.flatnonzero(m)[-1]))
    b = run_episode(PlacementEnv(window=40), lambda m: int(np.flatnonzero(m)[-1]))
    assert a[0] == b[0]


def test_rl_loader_errors(tmp_path: Path) -> None:
    with pytest.raises(AgentLoadError, match="no trained agent at .*nope.zip; retrain it with `corral train"):
        make_policy("rl:nope")
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    (tmp_path / "bad.json").write_text(json.dumps({"encoding_version": ENCODING_VERSION}))
    with pytest.raises(AgentLoadError, match="not a stable-baselines3 zip"):
        make_policy(f"rl:{bad}")
    (tmp_path / "bad.json").write_text(json.dumps({"formulation": "deepshare", "encoding_version": ENCODING_VERSION}))
    with pytest.raises(AgentLoadError, match=f"says formulation 'deepshare', not 'corral' .*deepshare:{bad}"):
        make_policy(f"rl:{bad}")
    (tmp_path / "bad.json").write_text(json.dumps({"encoding_version": ENCODING_VERSION + 1}))
    with pytest.raises(AgentLoadError, match=f"trained for encoding version {ENCODING_VERSION + 1}"):
        make_policy(f"rl:{bad}")


@pytest.mark.slow  # an agent's or a trainer's run: seconds
def test_maskable_ppo_learns_a_few_steps_and_acts_in_the_simulator(tmp_path: Path) -> None:
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import configure

    from scheduler.core.model import parse_cluster
    from scheduler.core.simulator import Simulator
    from scheduler.core.traces import synthetic

    model = MaskablePPO("MlpPolicy", PlacementEnv(window=40), n_steps=128, batch_size=64, seed=0, device="cpu")
    # SB3's default logger would make a SB3-<date> folder in the system's temporary directory: keep it in tmp_path.
    model.set_logger(configure(str(tmp_path / "sb3-log"), []))
    sb3_dirs = set(Path(tempfile.gettempdir()).glob("SB3-*"))
    model.learn(total_timesteps=256)
    assert set(Path(tempfile.gettempdir()).glob("SB3-*")) == sb3_dirs
    path = tmp_path / "smoke.zip"
    model.save(path)
    (tmp_path / "smoke.json").write_text(json.dumps({"encoding_version": ENCODING_VERSION}))
    policy = make_policy(f"rl:{path}")
    assert policy.name == f"rl:{path}"
    trace = synthetic(80, seed=1, mean_interarrival_s=120).jobs
    result = Simulator(parse_cluster("pcie-v100:2"), trace, policy).run()
    assert result.metrics["jobs_completed"] == 80


@pytest.mark.slow  # an agent's or a trainer's run: seconds
def test_shipped_default_agent_loads_and_acts_in_the_simulator() -> None:
    """rl:default works on a fresh clone, without training: it places jobs, preempts in LAS order, finishes."""
    from policies.rl import RLPolicy
    from scheduler.core.model import parse_cluster
    from scheduler.core.simulator import Simulator
    from scheduler.core.traces import synthetic

    policy = make_policy("rl:default")
    assert isinstance(policy, RLPolicy) and policy.name == "rl:default"
    trace = synthetic(150, seed=4, mean_interarrival_s=30).jobs
    result = Simulator(parse_cluster("dgx-a100:2"), trace, policy).run()
    m = result.metrics
    assert m["jobs_completed"] + m["jobs_rejected"] == 150 and m["jobs_completed"] > 140
    assert all(j.placement is None for j in result.jobs)  # every job finished and released its GPUs
    again = Simulator(parse_cluster("dgx-a100:2"), trace, make_policy("rl:default")).run().metrics
    assert again == m  # deterministic: the agent acts greedily


@pytest.mark.slow  # an agent's or a trainer's run: seconds
def test_corral_evaluate_runs_with_the_default_agent(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from scheduler.cli.commands import main

    out = tmp_path / "eval.json"
    result = CliRunner().invoke(main, ["evaluate", "--policy", "rl:default,tiresias", "--trace",
                                       "synthetic:120,iat=40", "--cluster", "pcie-v100:2", "--seeds", "2",
                                       "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())["synthetic:120,iat=40"]["policies"]
    assert len(data["rl:default"]["avg_jct_s"]["values"]) == 2
    assert data["rl:default"]["avg_jct_s"]["mean"] > 0


def test_the_docstring_states_the_real_spaces() -> None:
    doc = PlacementEnv.__doc__ or ""
    assert f"`Discrete({N_ACTIONS})`" in doc and f"({OBS_SIZE},)" in doc and f"{WAIT} = wait" in doc
