"""Warm start: behaviour cloning of the best heuristic in the agent's own decision frame, before PPO fine-tunes it.

PPO from scratch learns slowly here: an episode is hundreds of decisions whose rewards (minus jobs in system x time)
arrive long after the decision that caused them, so in a training budget of minutes the advantage estimates stay
noisy, and the greedy (deterministic) policy it leaves can be worse than any heuristic. Starting from a teacher's
behaviour, with the value head fitted to the teacher's returns-to-go, PPO begins where a good heuristic is and spends
its budget on what the teacher does not know.

The teacher is a heuristic policy, asked at every decision point what it would do now; its first placement is
mapped into the frame (`DecisionPoint.action_of`): the slot holding that job, the candidate with the same GPUs (else
the job's first). No single heuristic is best everywhere (Tiresias' default queues suit Philly, finer ones or a
Gittins order suit Alibaba's short jobs), so the teacher may depend on the scenario (`Teachers`): the best heuristic
for its workload and load, chosen beforehand on training windows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from agents.env import PlacementEnv
from agents.scenarios import SYNTHETIC, Scenario, is_synthetic
from policies import make_policy
from policies.rl_encoding import GROW, SHRINK, WAIT, DecisionPoint
from scheduler.core.decisions import Decision, Place, Preempt, Resize
from scheduler.core.model import Job
from scheduler.core.simulator import Simulator


def teacher_action(sim: Simulator, point: DecisionPoint, teacher: str,
                   queue: Collection[Job] | None = None, swap: bool = False) -> tuple[int, bool]:
    """The action standing for what `teacher` would do now, and whether it was representable exactly (its job is
    a candidate here). A fresh policy each time: heuristics keep per-run memos that assume their decisions were
    all applied, and here only the first one is. `queue`: the jobs the decision is about (inside the tenancy frame,
    those it asked the agent about: `PlacementEnv.decision_queue`), by default every pending job. `swap`: the frame
    asks about jobs that may start only by preempting their own team's jobs (`kept_swap`)."""
    queue = sim.pending.values() if queue is None else queue
    decisions = make_policy(teacher).schedule(sim.view, queue, sim.now)
    if swap:
        return kept_swap(sim, point, decisions)
    place = next((d for d in decisions if isinstance(d, Place)), None)
    if place is None:  # a sizing teacher's grows (`policies.rl_elastic`: the frame offers one at a time), or nothing
        grows = [d for d in decisions if isinstance(d, Resize)]
        if not grows:
            return point.quiet_action(), bool(point.mask[WAIT])
        action = next((a for d in grows if (a := point.action_of(d.job_id, d.placement.gpus, kind=GROW)) is not None),
                      None)
        return (point.quiet_action(), False) if action is None else (action, True)
    before = decisions[:decisions.index(place)]
    preempts = any(isinstance(d, Preempt) for d in before)
    shrinks = any(isinstance(d, Resize) for d in before)
    action = point.action_of(place.job_id, place.placement.gpus, preempts, kind=SHRINK if shrinks else "start")
    if action is None:
        return point.quiet_action(), False
    return action, True


def kept_swap(sim: Simulator, point: DecisionPoint, decisions: list[Decision]) -> tuple[int, bool]:
    """Asked about swaps, the teacher's first start that is a swap here: in the teacher's order, the first job it
    starts without preempting another team's job whose swap (preempting its own team's) a slot offers. Declining if
    there is none (exact if the teacher starts nothing the frame could keep).

    Labelling by the teacher's first start instead, as outside the frame, declined most swaps the teacher makes: that
    start was often on free GPUs held for others (which a swap call cannot offer) or preempted another team (which
    the frame drops), and the agent so trained left short jobs of a busy team waiting for hours."""
    victims: list[Preempt] = []
    wanted = False
    for d in decisions:
        if isinstance(d, Preempt):
            victims.append(d)
            continue
        if not isinstance(d, Place):
            continue
        group, victims = victims, []
        team = sim.jobs[d.job_id].spec.team
        if any(sim.jobs[v.job_id].spec.team != team for v in group):
            continue  # the frame drops it
        wanted = True
        action = point.action_of(d.job_id, d.placement.gpus, preempts=True)
        if action is not None:
            return action, True
    return point.quiet_action(), not wanted and bool(point.mask[WAIT])


@dataclass(frozen=True)
class Teachers:
    """Which heuristic teaches on which scenario: by workload kind and offered load (the first band whose upper end
    is at least the load), else `default`; on an elastic mix, that heuristic wrapped in `sizing` (`grow:`: its
    decisions, and idle GPUs given to running elastic jobs, `policies.marginal_gain.GrowIdle`; None: as it is).
    On training windows of the elastic mix `grow:gittins` had 0.895x gittins' average JCT (16 windows of Philly's
    first three quarters and synthetic seeds at loads 0.8-2.2, +-0.036), `grow:tiresias` 0.917x, and
    `marginal-gain-expected` (which shrinks jobs instead of preempting them) 1.07x: the grows are what pays."""

    default: str = "tiresias"
    bands: Mapping[str, Sequence[tuple[float, str]]] = field(default_factory=dict)  # kind -> [(load up to, name)]
    sizing: str | None = "grow"

    @staticmethod
    def kind(scenario: Scenario) -> str:
        if is_synthetic(scenario.workload):
            return scenario.workload  # "synthetic" or "synthetic:MIX": each mix is its own regime
        return scenario.workload.rsplit("/", 1)[-1].split("_")[0]

    def for_scenario(self, scenario: Scenario) -> str:
        name = next((n for upto, n in self.bands.get(self.kind(scenario), ()) if scenario.load <= upto), self.default)
        return f"{self.sizing}:{name}" if scenario.elastic and self.sizing else name

    def names(self) -> list[str]:
        return sorted({self.default, *(n for bands in self.bands.values() for _, n in bands)})


# The teachers `corral train` clones by default, read off
# `python benchmarks/teachers.py --loads 0.8,1.0,1.3,1.7,2.2 --windows 8 --window 500 --nodes 8,8` (training windows
# only: first three quarters of each trace, model seeds 0-3, 8 windows of 500 jobs per workload and load, synthetic
# mixes on 8-node clusters like the hold-out's; each band covers the loads nearest one of those). A heuristic teaches
# where it beat tiresias by 1% or more there, the better of the two where both did. Alibaba's jobs are mostly under a
# GPU-hour, so a finer first queue lets short ones overtake under load (0.86-0.96 x tiresias at 1.3-2.2; Gittins'
# order 0.92-0.97 x at 0.8-1.0). Gittins' order pays on multi-node gangs at every load (0.85-0.97 x) and under heavy
# load on Philly and the default, long-job and fractional mixes (0.91-0.98 x at 1.7-2.2). An earlier table, from 4
# windows of 300 jobs on 3-6 nodes, had tiresias teach the multi-node mix: too few windows to see Gittins' edge there
# (8 windows of 500 jobs on 3-6 nodes show it too, 0.81-0.89 x at loads 1.0-2.2). The large-gang mix, on its own
# fabric clusters (`agents.scenarios.MIX_PRESETS`, 32-64 HGX servers; the same command with `--workloads
# synthetic:gangs --policies tiresias,gittins,tiresias:thresholds=300,3600,36000,topology,consolidate,contention-greedy`):
# the finer queues at 0.8 (0.95 x), Gittins' order at 1.3 and 1.7 (0.97-0.98 x), tiresias elsewhere (gittins 0.997 x
# at 1.0 and 2.2); topology, consolidate and contention-greedy were 1.00-1.10 x tiresias, FIFO 17-22 x (a 512-GPU gang
# blocks the queue). On 128 servers (presets `hgx-h100:128@...`) contention-greedy taught at 0.8 and 1.7 (0.975 and
# 0.990 x), Gittins' order at 1.0, topology at 2.2 (0.937 x); a retrain there fits the budget (17.7 minutes) but was
# not kept: it did not imitate contention-greedy well on the gang windows. Since topology waits for compact room it is
# the best teacher there at every load (0.92-0.99 x tiresias, `--nodes 128,128`); a retrain with it teaching the mix
# (26.0 minutes) became topology (1.005 x it on 30 held-out big-gang cases) and was not kept either
# (agents/zoo/README.md).
FINE_TEACHER = "tiresias:thresholds=300,3600,36000"
BEST = Teachers("tiresias", {
    "alibaba": [(1.15, "gittins"), (99.0, FINE_TEACHER)],
    "philly": [(0.9, "tiresias"), (1.15, "gittins"), (1.5, "tiresias"), (99.0, "gittins")],
    SYNTHETIC: [(1.5, "tiresias"), (99.0, "gittins")],
    f"{SYNTHETIC}:short": [(1.5, "tiresias"), (1.95, FINE_TEACHER), (99.0, "gittins")],
    f"{SYNTHETIC}:long": [(1.5, "tiresias"), (99.0, "gittins")],
    f"{SYNTHETIC}:fractional": [(0.9, "tiresias"), (1.15, FINE_TEACHER), (1.5, "tiresias"), (99.0, "gittins")],
    f"{SYNTHETIC}:multinode": [(99.0, "gittins")],
    f"{SYNTHETIC}:gangs": [(0.9, FINE_TEACHER), (1.15, "tiresias"), (1.95, "gittins"), (99.0, "tiresias")],
})


@dataclass
class Demonstrations:
    obs: np.ndarray  # [n, OBS_SIZE]
    masks: np.ndarray  # [n, N_ACTIONS]
    actions: np.ndarray  # [n]
    returns: np.ndarray  # [n] undiscounted return-to-go (the value the critic should predict)
    exact: float = 1.0  # fraction of the teacher's choices the frame could represent exactly

    def __len__(self) -> int:
        return len(self.actions)

    def __add__(self, other: Demonstrations) -> Demonstrations:
        n, k = len(self), len(other)
        return Demonstrations(np.concatenate([self.obs, other.obs]), np.concatenate([self.masks, other.masks]),
                              np.concatenate([self.actions, other.actions]),
                              np.concatenate([self.returns, other.returns]), (self.exact * n + other.exact * k) / (n + k))


def collect(env: PlacementEnv, samples: int, seed: int, teachers: Teachers | str = "tiresias",
            progress: Callable[[int], None] | None = None,
            actor: Callable[[np.ndarray, np.ndarray], int] | None = None, beta: float = 1.0) -> Demonstrations:
    """Roll out in `env` (drawing training scenarios) until `samples` decisions are recorded, each labelled with the
    teacher's action. Without `actor` the teacher acts. With one (DAgger), each step follows the teacher with
    probability `beta` and `actor(obs, mask)` otherwise, so the labels cover the states the agent itself reaches:
    a clone that only saw the teacher's states compounds its rare mistakes into states it never learned."""
    if isinstance(teachers, str):
        teachers = Teachers(teachers)
    coin = np.random.default_rng(seed)
    obs_l: list[np.ndarray] = []
    mask_l: list[np.ndarray] = []
    act_l: list[np.ndarray] = []
    ret_l: list[np.ndarray] = []
    exact = total = 0
    episode = 0
    while sum(map(len, act_l)) < samples:
        obs, _ = env.reset(seed=seed + episode)
        episode += 1
        assert env.scenario is not None
        teacher = teachers.for_scenario(env.scenario)
        o, m, a, r = [], [], [], []
        while True:
            point, sim = env._point, env.sim
            assert point is not None and sim is not None
            # Inside the tenancy frame the teacher is asked about the jobs the agent is (eligible ones, or swaps),
            # so it teaches the frame's choices, not ones the frame would drop.
            action, ok = teacher_action(sim, point, teacher, env.decision_queue, env.decision_is_swap)
            exact += ok
            total += 1
            mask = env.action_masks()
            o.append(obs)
            m.append(mask)
            a.append(action)
            taken = action if actor is None or coin.random() < beta else actor(obs, mask)
            obs, reward, terminated, truncated, _ = env.step(taken)
            r.append(reward)
            if terminated or truncated:
                break
        obs_l.append(np.array(o, dtype=np.float32))
        mask_l.append(np.array(m, dtype=bool))
        act_l.append(np.array(a, dtype=np.int64))
        ret_l.append(np.cumsum(np.array(r, dtype=np.float64)[::-1])[::-1].astype(np.float32))
        if progress is not None:
            progress(len(a))
    return Demonstrations(np.concatenate(obs_l), np.concatenate(mask_l), np.concatenate(act_l),
                          np.concatenate(ret_l), exact / max(total, 1))


def clone(model, demos: Demonstrations, epochs: int = 20, batch_size: int = 256, lr: float = 1e-3,
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
    stats["agreement"] = agreement(model, demos)
    stats["teacher_exact"] = demos.exact
    return stats


def agreement(model, demos: Demonstrations) -> float:
    """The fraction of `demos` on which the model's greedy action is the teacher's."""
    import torch

    with torch.no_grad():
        dist = model.policy.get_distribution(torch.as_tensor(demos.obs), action_masks=torch.as_tensor(demos.masks))
        greedy = dist.distribution.probs.argmax(dim=1)
    return float((greedy == torch.as_tensor(demos.actions)).float().mean())
