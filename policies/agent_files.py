"""Loading a trained stable-baselines3 agent and its `.json` sidecar, for every formulation (`rl:`, `deepshare:`).

`PREFIX:NAME` means `agents/zoo/NAME.zip`; anything ending in `.zip` is a path. The sidecar records the formulation
and the encoding version the agent was trained with. A missing file or sidecar, a corrupt archive, an agent of
another formulation or encoding version, or one whose spaces do not match, is refused with one `AgentLoadError`
saying which and how to retrain. stable-baselines3 and torch are imported only by the `load` callable.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.registry import UnknownPolicyError

ZOO = Path(__file__).resolve().parents[1] / "agents" / "zoo"
PREFIX_OF = {"corral": "rl", "deepshare": "deepshare"}  # formulation -> the prefix its agents load under


class AgentLoadError(UnknownPolicyError):
    pass


@dataclass(frozen=True)
class AgentFormat:
    formulation: str
    version: int
    obs_size: int
    n_actions: int
    retrain: str  # how to make a compatible agent, appended to every error
    version_label: str = ""  # e.g. "DeepShare " in "trained for DeepShare encoding version 3"
    default_formulation: str | None = None  # assumed when a sidecar does not say (agents from before it was recorded)

    @property
    def prefix(self) -> str:
        return PREFIX_OF[self.formulation]


def resolve(arg: str) -> Path:
    return Path(arg) if arg.endswith(".zip") else ZOO / f"{arg}.zip"


def metadata_path(model_path: Path) -> Path:
    return model_path.with_suffix(".json")


# Loaded models by (file, modification time, formulation): `corral evaluate` builds a fresh policy per case, and
# reading the archive again each time would cost more than the simulations. Prediction keeps no state in the model.
_LOADED: dict[tuple[str, int, str], Any] = {}


def load(fmt: AgentFormat, arg: str, load_model: Callable[[Path], Any]) -> tuple[Any, dict[str, Any]]:
    """The model and its metadata, or AgentLoadError naming the problem and how to fix it."""
    who, fix = f"{fmt.prefix}:{arg}", fmt.retrain
    path = resolve(arg)
    if not path.is_file():
        raise AgentLoadError(f"{who}: no trained agent at {path}; {fix}")
    meta_file = metadata_path(path)
    if not meta_file.is_file():
        raise AgentLoadError(f"{who}: {meta_file} (the agent's formulation and encoding version) is missing; {fix}")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as exc:
        raise AgentLoadError(f"{who}: {meta_file} is not valid JSON ({exc}); {fix}") from None
    if not isinstance(meta, dict):
        raise AgentLoadError(f"{who}: {meta_file} should hold a JSON object; {fix}")
    formulation = meta.get("formulation", fmt.default_formulation)
    if formulation != fmt.formulation:
        hint = f" (a {formulation} agent loads as {PREFIX_OF[formulation]}:{arg})" if formulation in PREFIX_OF else ""
        raise AgentLoadError(f"{who}: {meta_file} says formulation {formulation!r}, not {fmt.formulation!r}{hint}; "
                             f"{fix}")
    version = meta.get("encoding_version")
    if version != fmt.version:
        raise AgentLoadError(f"{who}: trained for {fmt.version_label}encoding version {version}, this Corral speaks "
                             f"version {fmt.version}; {fix}")
    if not zipfile.is_zipfile(path):
        raise AgentLoadError(f"{who}: {path} is not a stable-baselines3 zip (corrupt or not a model); {fix}")
    key = (str(path.resolve()), path.stat().st_mtime_ns, fmt.formulation)
    if key in _LOADED:
        return _LOADED[key], meta
    try:
        model = load_model(path)
    except Exception as exc:  # noqa: BLE001 - any failure inside the archive means the same thing to the user
        raise AgentLoadError(f"{who}: {path} could not be loaded ({type(exc).__name__}: {exc}); {fix}") from None
    n_actions = getattr(model.action_space, "n", None)
    if model.observation_space.shape != (fmt.obs_size,) or n_actions != fmt.n_actions:
        raise AgentLoadError(f"{who}: observations {model.observation_space.shape} and {n_actions} actions, expected "
                             f"({fmt.obs_size},) and {fmt.n_actions}; {fix}")
    _LOADED[key] = model
    return model, meta
