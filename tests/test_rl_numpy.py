"""The numpy forward pass (`policies.rl_numpy`) against torch's on the shipped agent: the same logits within float32
rounding, the same actions on a simulation's observations and masks, and torch asked where two actions tie."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agents.scenarios import SYNTHETIC_MIXES
from policies import make_policy
from policies.rl import RLPolicy
from policies.rl_numpy import TIE_MARGIN, actor_of
from scheduler.core.model import parse_cluster
from scheduler.core.simulator import Simulator
from scheduler.core.traces import scale_to_load, synthetic

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # a simulation replayed decision by decision


def torch_logits(policy: RLPolicy, obs: np.ndarray) -> np.ndarray:
    net = policy.model.policy
    with torch.no_grad():
        x = torch.as_tensor(obs.reshape(1, -1))
        return net.action_net(net.mlp_extractor.forward_actor(net.pi_features_extractor(x))).numpy()[0]


@pytest.fixture(scope="module")
def seen() -> tuple[Any, list[tuple[np.ndarray, np.ndarray]]]:
    policy: Any = make_policy("rl:default")
    assert policy.actor is not None and policy.actor is actor_of(policy.model)  # exported once per model
    out: list[tuple[np.ndarray, np.ndarray]] = []
    act = policy.act

    def recording_act(obs: np.ndarray, mask: np.ndarray) -> int:
        out.append((obs.copy(), mask.copy()))
        return act(obs, mask)

    policy.act = recording_act
    c = parse_cluster("dgx-a100:8")
    Simulator(c, scale_to_load(synthetic(200, seed=5, **SYNTHETIC_MIXES["multinode"]).jobs, c.num_gpus, 1.8),
              policy).run()
    policy.act = act
    assert len(out) > 100
    return policy, out


def test_numpy_logits_are_torchs(seen: Any) -> None:
    policy, observations = seen
    rng = np.random.default_rng(0)
    extra = [rng.uniform(0.0, 8.0, observations[0][0].shape).astype(np.float32) for _ in range(50)]
    for obs in [o for o, _ in observations] + extra:
        ours, theirs = policy.actor.logits(obs), torch_logits(policy, obs)
        assert ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)  # far inside TIE_MARGIN


def test_numpy_actions_are_torchs(seen: Any) -> None:
    policy, observations = seen
    actor, model = policy.actor, policy.model
    rng = np.random.default_rng(1)
    asked_torch = 0
    for obs, mask in observations:
        for m in (mask, mask & (rng.random(mask.shape) < 0.5)):
            if not m.any():
                continue
            expected, _ = model.predict(obs, action_masks=m, deterministic=True)
            assert policy.act(obs, m) == int(expected)
            ours = actor.act(obs, m)
            asked_torch += ours is None
            assert ours in (None, int(expected))
    assert asked_torch < len(observations) // 10  # the fallback is for near-ties, not the rule


def test_a_near_tie_is_left_to_torch(seen: Any) -> None:
    policy, observations = seen
    obs, mask = observations[0]
    logits = policy.actor.logits(obs)
    top2 = np.argsort(np.where(mask, logits, -np.inf))[-2:]
    if mask.sum() < 2:
        pytest.skip("a single valid action")
    # Mask all but the top two, then shift the network's last bias so those two land within the margin.
    only = np.zeros_like(mask)
    only[top2] = True
    w, b, act = policy.actor.layers[-1]
    gap = logits[top2[1]] - logits[top2[0]]
    nudged = b.copy()
    nudged[top2[0]] += gap - TIE_MARGIN / 4
    from policies.rl_numpy import NumpyActor

    close = NumpyActor((*policy.actor.layers[:-1], (w, nudged, act)))
    assert close.act(obs, only) is None
    nudged[top2[0]] -= 4 * TIE_MARGIN  # clearly behind again: numpy answers
    assert NumpyActor((*policy.actor.layers[:-1], (w, nudged, act))).act(obs, only) == int(top2[1])


def test_an_unknown_network_keeps_torch() -> None:
    from policies.rl_numpy import export_actor

    class Odd:  # no flatten extractor: not the MLP numpy reproduces
        pi_features_extractor = object()

    assert export_actor(Odd()) is None
