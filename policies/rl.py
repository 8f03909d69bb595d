"""`rl:NAME` / `rl:PATH`: a trained MaskablePPO agent acting through the shared encoding (`policies.rl_encoding`).

`rl:default` is the agent shipped in `agents/zoo/default.zip`; `rl:NAME` looks for `agents/zoo/NAME.zip`; anything
ending in `.zip` is a path. Next to each agent a `.json` file records the encoding version it was trained with (and
how it was trained); an agent from another encoding version, a missing file or a corrupt one is refused with one
message saying which and how to retrain. stable-baselines3 and torch are imported only when an agent is loaded.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import Any, ClassVar

from policies.base import Decision, WakeAt
from policies.placement import PassedOver
from policies.registry import UnknownPolicyError, register_prefix
from policies.rl_encoding import ENCODING_VERSION, OBS_SIZE, decision_points, next_demotion
from scheduler.model import Job
from scheduler.state import ClusterView

ZOO = Path(__file__).resolve().parents[1] / "agents" / "zoo"
RETRAIN = "retrain it with `corral train --out PATH.zip` (see agents/zoo/README.md)"


class AgentLoadError(UnknownPolicyError):
    pass


def resolve(arg: str) -> Path:
    return Path(arg) if arg.endswith(".zip") else ZOO / f"{arg}.zip"


def metadata_path(model_path: Path) -> Path:
    return model_path.with_suffix(".json")


def load_agent(arg: str) -> tuple[Any, dict[str, Any]]:
    """The MaskablePPO model and its metadata, or AgentLoadError saying what is wrong and how to fix it."""
    path = resolve(arg)
    if not path.is_file():
        raise AgentLoadError(f"rl:{arg}: no trained agent at {path}; {RETRAIN}")
    meta_file = metadata_path(path)
    if not meta_file.is_file():
        raise AgentLoadError(f"rl:{arg}: {meta_file} (the agent's encoding version) is missing; {RETRAIN}")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as exc:
        raise AgentLoadError(f"rl:{arg}: {meta_file} is not valid JSON ({exc}); {RETRAIN}") from None
    version = meta.get("encoding_version")
    if version != ENCODING_VERSION:
        raise AgentLoadError(
            f"rl:{arg}: trained for encoding version {version}, this Corral speaks version {ENCODING_VERSION}; "
            f"{RETRAIN}"
        )
    if not zipfile.is_zipfile(path):
        raise AgentLoadError(f"rl:{arg}: {path} is not a stable-baselines3 zip (corrupt or not a model); {RETRAIN}")
    from sb3_contrib import MaskablePPO

    try:
        model = MaskablePPO.load(path, device="cpu")
    except Exception as exc:  # noqa: BLE001 - any failure inside the archive means the same thing to the user
        raise AgentLoadError(f"rl:{arg}: {path} could not be loaded ({type(exc).__name__}: {exc}); {RETRAIN}") from None
    if model.observation_space.shape != (OBS_SIZE,):
        raise AgentLoadError(f"rl:{arg}: observations of shape {model.observation_space.shape}, expected "
                             f"({OBS_SIZE},); {RETRAIN}")
    return model, meta


class RLPolicy:
    """Visits pending jobs in LAS order; the agent picks each one's placement (preempting if it must) or wait."""

    name: ClassVar[str] = "rl"
    oracle: ClassVar[bool] = False

    def __init__(self, model: Any, label: str) -> None:
        self.model = model
        self.label = label
        self._passed = PassedOver()

    def act(self, obs: Any, mask: Any) -> int:
        action, _ = self.model.predict(obs, action_masks=mask, deterministic=True)
        return int(action)

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        # As in the environment: a job told to wait is passed over until the clock moves (or capacity frees up).
        passed = self._passed.refresh(view, now)
        for point in decision_points(view, queue, now, passed):
            action = self.act(point.obs, point.mask)
            decisions = point.decisions(action, f"rl:{self.label} chose candidate {action} (queue {point.level})")
            if decisions:
                return decisions
            passed.add(point.job.id)
        # Someone waits: look again when a running job drops to a lower queue and may be preempted.
        wake = next_demotion(view, now) if queue else None
        return [WakeAt(wake)] if wake is not None else []


def make_rl_policy(arg: str, seed: int = 0) -> RLPolicy:
    model, _ = load_agent(arg)
    policy = RLPolicy(model, arg)
    policy.name = f"rl:{arg}"  # type: ignore[misc]  # instances report the name they were asked for
    return policy


register_prefix("rl", make_rl_policy)
