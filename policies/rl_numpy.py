"""The agent's deterministic action computed with numpy on weights exported once from its SB3 policy.

Why: on a deep queue torch's per-call overhead (tensor creation, module dispatch, a handful of small kernels) was a
sizeable share of a decision for a network of three small matrices; numpy does the same arithmetic in a few
microseconds. The SB3 model stays the one loaded (`policies.trained` checks and caches it per agent file); this module
only reads its actor's weights, once per model (`actor_of`).

Same decisions: the actor is `MaskableActorCriticPolicy`'s (a flatten extractor, Linear/activation layers, then
`action_net`). `NumpyActor.act` repeats `RLPolicy.act`'s operations in float32 in the same order (logits normalised
by their logsumexp, masked ones set to -1e8, normalised again, softmax, first argmax). numpy's BLAS and torch's may
still round the last bit differently, so the two can only disagree where the best valid action's log-probability is
within rounding of the runner-up's. Where the margin between them is under `TIE_MARGIN` (orders of magnitude above
float32 rounding at these sizes, and rare), `act` returns None and the caller asks torch: the action is torch's in
every case (tests/test_rl_numpy.py checks the logits and the actions on the shipped agent).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# Log-probability gap below which the runner-up might win under torch's rounding: float32 logits of this network agree
# with torch's to ~1e-6 (measured on the shipped agent; the test bounds them by 1e-4).
TIE_MARGIN = 1e-3
MASKED = np.float32(-1e8)  # what MaskableCategorical puts in place of a masked logit

Activation = Callable[[np.ndarray], np.ndarray]
_ACTIVATIONS: dict[str, Activation] = {
    "Tanh": np.tanh,
    "ReLU": lambda x: np.maximum(x, np.float32(0.0)),
}


@dataclass(frozen=True)
class NumpyActor:
    """The actor's layers as (weight transposed, bias, activation or None), float32, in order."""

    layers: tuple[tuple[np.ndarray, np.ndarray, Activation | None], ...]

    def logits(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32).reshape(-1)
        for w, b, activation in self.layers:
            x = x @ w + b  # torch's Linear: x W^T + b
            if activation is not None:
                x = activation(x)
        return x

    def act(self, obs: np.ndarray, mask: np.ndarray) -> int | None:
        """The deterministic action, or None where the best two valid actions are too close to call against torch."""
        logits = self.logits(obs)
        logits = logits - _logsumexp(logits)
        masked = np.where(np.asarray(mask, dtype=bool).reshape(-1), logits, MASKED)
        masked = masked - _logsumexp(masked)
        action = int(np.argmax(masked))  # softmax is monotone: its argmax is this one, ties to the first alike
        if np.count_nonzero(masked > MASKED / 2) > 1:
            runner_up = np.partition(masked, -2)[-2]
            if masked[action] - runner_up < TIE_MARGIN:
                return None
        return action


def _logsumexp(x: np.ndarray) -> np.float32:
    top = x.max()
    return np.float32(top + np.log(np.exp(x - top).sum(dtype=np.float32)))


def export_actor(policy: Any) -> NumpyActor | None:
    """The actor of an SB3 `ActorCriticPolicy` as numpy arrays, or None where it is not the plain MLP this module
    reproduces (another feature extractor, layer or activation): the caller keeps torch then."""
    import torch as th
    from stable_baselines3.common.torch_layers import FlattenExtractor

    extractor = getattr(policy, "pi_features_extractor", None)
    if type(extractor) is not FlattenExtractor or not hasattr(policy, "mlp_extractor"):
        return None
    modules = [*policy.mlp_extractor.policy_net, policy.action_net]
    layers: list[tuple[np.ndarray, np.ndarray, Activation | None]] = []
    for m in modules:
        if isinstance(m, th.nn.Linear) and m.bias is not None:
            with th.no_grad():
                w = m.weight.detach().cpu().numpy().astype(np.float32).T.copy()
                b = m.bias.detach().cpu().numpy().astype(np.float32).copy()
            layers.append((w, b, None))
        elif type(m).__name__ in _ACTIVATIONS and layers and layers[-1][2] is None:
            w, b, _ = layers[-1]
            layers[-1] = (w, b, _ACTIVATIONS[type(m).__name__])
        else:
            return None
    return NumpyActor(tuple(layers))


# Exported once per loaded model (`policies.trained` keeps one model per agent file), dropped with it.
_EXPORTED: weakref.WeakKeyDictionary[Any, NumpyActor | None] = weakref.WeakKeyDictionary()


def actor_of(model: Any) -> NumpyActor | None:
    """`model`'s actor in numpy (exported on first use), or None if it has none this module can reproduce."""
    policy = getattr(model, "policy", None)
    if policy is None:
        return None
    try:
        return _EXPORTED[policy]
    except KeyError:
        actor = _EXPORTED[policy] = export_actor(policy)
        return actor
