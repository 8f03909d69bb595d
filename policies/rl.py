"""`rl:NAME` / `rl:PATH`: a trained MaskablePPO agent acting through the shared encoding (`policies.rl_encoding`).

`rl:default` is the agent shipped in `agents/zoo/default.zip`; `rl:NAME` looks for `NAME.zip` in agents/zoo, then in
`$CORRAL_HOME/agents`; anything ending in `.zip` is a path (offline tools only: the API takes names). `policies.
trained` checks the agent's sidecar (formulation, encoding version, SHA-256), loads it without unpickling, and
refuses a missing, corrupt, altered or incompatible agent with one message saying which and how to retrain.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from policies.gittins import SizeDistribution, default_sizes
from policies.registry import register_prefix
from policies.rl_encoding import (
    COMPACTNESS,
    ENCODING_VERSION,
    GROW,
    MAX_CANDIDATES,
    N_ACTIONS,
    OBS_SIZE,
    DecisionPoint,
    JobSlot,
    decision_point,
    next_demotion,
    next_wait_end,
)
from policies.rl_numpy import NumpyActor, actor_of
from policies.trained import AgentFormat, load, safe_objects
from scheduler.core.decisions import Candidate, Decision, Deliberation, Place, Wait, WakeAt
from scheduler.core.model import Job, Placement
from scheduler.core.resizing import regrow_at
from scheduler.core.runner import answered
from scheduler.core.state import ClusterView

RETRAIN = "retrain it with `corral train --out PATH.zip` (see agents/zoo/README.md)"
FORMAT = AgentFormat("corral", ENCODING_VERSION, OBS_SIZE, N_ACTIONS, RETRAIN, default_formulation="corral")


def load_agent(arg: str) -> tuple[Any, dict[str, Any]]:
    """The MaskablePPO model and its metadata, or AgentLoadError saying what is wrong and how to fix it."""

    def load_model(path: Path) -> Any:
        from sb3_contrib import MaskablePPO
        from sb3_contrib.common.maskable.buffers import MaskableRolloutBuffer
        from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

        safe = safe_objects(FORMAT, MaskableActorCriticPolicy, MaskableRolloutBuffer)
        return MaskablePPO.load(path, device="cpu", custom_objects=safe)

    return load(FORMAT, arg, load_model)


class RLPolicy:
    """At each decision point the agent picks which pending job starts, where, and whether to preempt for it, or
    waits (`policies.rl_encoding`)."""

    name: ClassVar[str] = "rl"
    oracle: ClassVar[bool] = False
    # Its least-attained-service preemption takes jobs of equal priority (`scheduler.core.priorities`, rule 2).
    time_sharing: ClassVar[bool] = True

    def __init__(self, model: Any, label: str, sizes: SizeDistribution | None = None, explain: bool = True,
                 actor: NumpyActor | None = None) -> None:
        """`explain`: attach the candidates the agent chose between, scored, to each placement (the controller stores
        them to explain the decision; training needs none). `actor`: the model's actor in numpy
        (`policies.rl_numpy`), for a model whose weights no longer change (a loaded agent): `act` then asks torch
        only where two actions are too close to call."""
        self.model = model
        self.actor = actor
        self.label = label
        self.sizes = sizes or default_sizes()
        self.explain = explain
        self._waited: tuple[float, int] | None = None  # (instant, running jobs) at which the agent chose to wait

    def fresh(self) -> RLPolicy:
        """A new instance for another simulation, sharing what no decision changes (the loaded model, its actor): what
        an instance keeps between calls belongs to one simulation's jobs (`policies.guarded` replays with these)."""
        policy = RLPolicy(self.model, self.label, self.sizes, self.explain, self.actor)
        policy.name = self.name  # type: ignore[misc]
        return policy

    def act(self, obs: Any, mask: Any) -> int:
        """The agent's deterministic action: `model.predict(obs, action_masks=mask, deterministic=True)`, computed by
        the same tensor operations in the same order (so the same action, bit for bit) without the wrappers around
        them (input checks, mode switching, distribution objects and their argument validation), which took most of
        the forward pass's time on a deep queue; with `actor`, by numpy, which picks the same action (see
        `policies.rl_numpy`)."""
        if self.actor is not None:
            action = self.actor.act(obs, mask)
            if action is not None:
                return action
        policy = getattr(self.model, "policy", None)
        if policy is None or not hasattr(policy, "mlp_extractor"):
            action, _ = self.model.predict(obs, action_masks=mask, deterministic=True)
            return int(action)
        import torch as th
        from stable_baselines3.common.preprocessing import preprocess_obs

        if policy.training:  # `predict` switches to eval mode (and leaves it so)
            policy.set_training_mode(False)
        with th.no_grad():
            x = th.as_tensor(np.asarray(obs).reshape((-1, *policy.observation_space.shape)), device=policy.device)
            features = policy.pi_features_extractor(preprocess_obs(x, policy.observation_space, policy.normalize_images))
            latent = policy.mlp_extractor.forward_actor(features)
            logits = policy.action_net(latent).view(-1, N_ACTIONS)
            # MaskableCategorical: normalised logits, masked ones set to -1e8, normalised again; the mode is the
            # argmax of the probabilities (softmax), as in MaskableCategoricalDistribution.mode.
            logits = logits - logits.logsumexp(dim=-1, keepdim=True)
            keep = th.as_tensor(mask, dtype=th.bool, device=logits.device).reshape(logits.shape)
            masked = th.where(keep, logits, th.tensor(-1e8, dtype=logits.dtype, device=logits.device))
            masked = masked - masked.logsumexp(dim=-1, keepdim=True)
            return int(th.argmax(th.softmax(masked, dim=-1), dim=1)[0])

    def answer(self, point: DecisionPoint) -> int:
        """The agent's action at this decision point (in training, the environment answers in its place)."""
        return self.act(point.obs, point.mask)

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        return answered(self.deliberate(view, queue, now), self.answer)

    def deliberate(self, view: ClusterView, queue: Collection[Job], now: float) -> Deliberation:
        """Yields the decision point (if any job can start) and takes the agent's action back
        (`scheduler.core.runner`)."""
        # After a wait, nothing more starts until something changes (the clock moves or a job leaves), as in the
        # environment. Inside the tenancy frame a wait holds for the swaps it offers next at this instant too.
        held: dict[int, float] = {}  # jobs the frame holds for compact room, and until when
        # Whether a decision point read the running jobs at this instant, with nothing changed since (a wait below
        # then reads them as it did, not again: on 2,048 GPUs a second read was a tenth of a deep-queue decision).
        synced = False
        if self._waited != (now, len(view.running)):
            point = decision_point(view, queue, now, self.sizes, held=held)
            synced = bool(queue)
            if point is not None:
                action = yield point
                chosen = point.choice(action)
                if chosen is not None:
                    slot, placement = chosen
                    why = self._why(slot, placement, action)
                    decisions = point.decisions(action, why)
                    if not self.explain:
                        return decisions
                    return self._with_candidates(view, slot, decisions)
                self._waited = (now, len(view.running))
        # Someone waits: look again when a running job drops to a lower queue and may be preempted, or when a job's
        # wait for compact room ends and it may start spread; GPUs idle: when an elastic job may be resized again.
        regrow = regrow_at(view, now) if view.free_whole > 0 else None
        if not queue:
            return [WakeAt(regrow)] if regrow is not None else []
        c = view.cluster
        specs = {j.id: j.spec for j in queue} if held else {}
        said: list[Decision] = [Wait(i, COMPACTNESS.words(c, specs[i], until, now), until)
                                for i, until in held.items() if i in specs]
        wakes = [t for t in (next_demotion(view, now, synced=synced), next_wait_end(view, queue, now), regrow)
                 if t is not None]
        return said + [WakeAt(min(wakes))] if wakes else said

    def _why(self, slot: JobSlot, placement: Placement, action: int) -> str:
        n, k = len(placement.gpus), action % MAX_CANDIDATES + 1
        if slot.kind == GROW:
            return f"rl:{self.label} grew it to {n} GPUs (size {k} of {len(slot.candidates)} offered)"
        sized = f" at {n} GPUs" if (slot.job.submitted or slot.job.spec).elastic else ""
        return (f"rl:{self.label} chose {slot.job.spec.name}{sized} (heads {', '.join(slot.heads)}), candidate "
                f"{k} of {len(slot.candidates)}" + (f", preempting {len(slot.victims)}" if slot.victims else "")
                + (f", shrinking {len(slot.resizes)} elastic job(s)" if slot.resizes else ""))

    @staticmethod
    def _with_candidates(view: ClusterView, slot: JobSlot, decisions: list[Decision]) -> list[Decision]:
        """Attach what the agent chose between, with the contention model's predictions, to its placement (the
        controller stores them to explain the decision). The predictions are the decision point's own (nothing
        changed since: `Candidate.scored` would compute them again)."""
        if slot.kind == GROW:  # a resize: no placement to explain
            return decisions
        if len(slot.predictions) == len(slot.candidates):
            weighed = [Candidate(p, pred.slowdown, pred.others_added, tuple(sorted(pred.others_before)))
                       for p, pred in zip(slot.candidates, slot.predictions, strict=True)]
        else:
            weighed = [Candidate.scored(view, slot.job.spec, p) for p in slot.candidates]
        return [replace(d, candidates=tuple(weighed)) if isinstance(d, Place) else d for d in decisions]


def make_rl_policy(arg: str, seed: int = 0) -> RLPolicy:
    model, _ = load_agent(arg)
    policy = RLPolicy(model, arg, actor=actor_of(model))
    policy.name = f"rl:{arg}"  # type: ignore[misc]  # instances report the name they were asked for
    return policy


register_prefix("rl", make_rl_policy)
