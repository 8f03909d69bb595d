"""Warm start: behaviour cloning of a teacher in the agent's own decision frame, before PPO fine-tunes it.

PPO from scratch learns slowly here: an episode is hundreds of decisions whose rewards (minus jobs in system x time)
arrive long after the decision that caused them, so in a training budget of minutes the advantage estimates stay
noisy, and the greedy (deterministic) policy it leaves can be worse than any heuristic. Starting from a teacher's
behaviour, with the value head fitted to the teacher's returns-to-go, PPO begins where a good heuristic is and spends
its budget on what the teacher does not know (when waiting, or skipping a preemption, pays).

The teacher acts in the same frame and encoding (`policies.rl_encoding`): 2D-LAS order with Tiresias' preemption,
and for each job the candidate with the least predicted lost progress (`contention-greedy`'s cost). It never waits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from agents.env import PlacementEnv
from policies.contention_greedy import ContentionGreedy
from policies.rl_encoding import DecisionPoint


def teacher_action(env: PlacementEnv, point: DecisionPoint, cost: ContentionGreedy) -> int:
    assert env.sim is not None
    costs = [cost.cost(env.sim.view, point.job.spec, p) for p in point.candidates]
    return min(range(len(costs)), key=lambda i: (round(costs[i], 9), i))


@dataclass
class Demonstrations:
    obs: np.ndarray  # [n, OBS_SIZE]
    masks: np.ndarray  # [n, N_ACTIONS]
    actions: np.ndarray  # [n]
    returns: np.ndarray  # [n] undiscounted return-to-go (the value the critic should predict)

    def __len__(self) -> int:
        return len(self.actions)


def collect(env: PlacementEnv, samples: int, seed: int, progress: Callable[[int], None] | None = None) -> Demonstrations:
    """Roll the teacher out in `env` (drawing training scenarios) until `samples` decisions are recorded."""
    cost = ContentionGreedy()
    obs_l, mask_l, act_l, ret_l = [], [], [], []
    episode = 0
    while sum(map(len, act_l)) < samples:
        obs, _ = env.reset(seed=seed + episode)
        episode += 1
        o, m, a, r = [], [], [], []
        while True:
            point = env._point
            assert point is not None
            action = teacher_action(env, point, cost)
            o.append(obs)
            m.append(env.action_masks())
            a.append(action)
            obs, reward, terminated, truncated, _ = env.step(action)
            r.append(reward)
            if terminated or truncated:
                break
        obs_l.append(np.array(o, dtype=np.float32))
        mask_l.append(np.array(m, dtype=bool))
        act_l.append(np.array(a, dtype=np.int64))
        ret_l.append(np.cumsum(np.array(r, dtype=np.float64)[::-1])[::-1].astype(np.float32))
        if progress is not None:
            progress(len(a))
    return Demonstrations(np.concatenate(obs_l), np.concatenate(mask_l), np.concatenate(act_l), np.concatenate(ret_l))


def clone(model, demos: Demonstrations, epochs: int = 8, batch_size: int = 256, lr: float = 1e-3,
          seed: int = 0) -> dict[str, float]:
    """Fit the policy to the teacher's actions (cross-entropy under the action mask) and the value head to the
    returns-to-go. Returns the final loss terms and the agent's agreement with the teacher."""
    import torch

    policy = model.policy
    policy.set_training_mode(True)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    obs = torch.as_tensor(demos.obs)
    masks = torch.as_tensor(demos.masks)
    actions = torch.as_tensor(demos.actions)
    returns = torch.as_tensor(demos.returns)
    n = len(demos)
    stats: dict[str, float] = {}
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            values, log_prob, _ = policy.evaluate_actions(obs[idx], actions[idx], action_masks=masks[idx])
            policy_loss = -log_prob.mean()
            value_loss = torch.nn.functional.mse_loss(values.flatten(), returns[idx])
            loss = policy_loss + 0.5 * value_loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            stats = {"policy_loss": policy_loss.item(), "value_loss": value_loss.item()}
    policy.set_training_mode(False)
    with torch.no_grad():
        dist = policy.get_distribution(obs, action_masks=masks)
        greedy = dist.distribution.probs.argmax(dim=1)
    stats["agreement"] = float((greedy == actions).float().mean())
    return stats
