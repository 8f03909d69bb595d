"""Loading a trained stable-baselines3 agent and its `.json` sidecar, for every formulation (`rl:`, `deepshare:`).

`PREFIX:NAME` means `NAME.zip` in the first agent directory that has it: the shipped `agents/zoo`, then
`$CORRAL_HOME/agents` (where `corral train` saves by default). Both are meant to be writable by admins only. A named
agent loads only if its sidecar records the archive's SHA-256 and the archive still has it. `PREFIX:PATH.zip` loads a
file by path: the command line's offline tools accept it (the user's own process, the user's own file); the API never
does (`check_api_name`), so no request can make the server open a file a user wrote.

Loading never unpickles: stable-baselines3 keeps the policy class, spaces and schedules of an agent as cloudpickle
blobs in the archive's `data`, and every one of them is replaced through `custom_objects` by the object this code
builds itself (an archive carrying any other pickled entry is refused before loading); the weights are read with
`torch.load(weights_only=True)`, which SB3 does.

The sidecar records the formulation and the encoding version the agent was trained with. A missing file or sidecar, a
corrupt archive, an agent of another formulation or encoding version, or one whose spaces do not match, is refused
with one `AgentLoadError` saying which and how to retrain. stable-baselines3 and torch are imported only by the `load`
callable.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.registry import UnknownPolicyError, wrapped
from scheduler.core.paths import agents_dir

ZOO = Path(__file__).resolve().parents[1] / "agents" / "zoo"
PREFIX_OF = {"corral": "rl", "deepshare": "deepshare"}  # formulation -> the prefix its agents load under
# A registered agent's name: letters, digits, `_`, `-` and inner dots; never a separator, `..` or a `.zip` suffix.
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*")
# The pickled entries a stable-baselines3 PPO / MaskablePPO archive carries; each is rebuilt by `safe_objects`.
PICKLED_ENTRIES = frozenset({"policy_class", "observation_space", "action_space", "lr_schedule", "clip_range",
                             "rollout_buffer_class", "_last_obs", "_last_episode_starts", "ep_info_buffer",
                             "ep_success_buffer", "clip_range_vf"})


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
    obs_low: float = 0.0
    obs_high: float = 8.0

    @property
    def prefix(self) -> str:
        return PREFIX_OF[self.formulation]


def is_path(arg: str) -> bool:
    return arg.endswith(".zip") or "/" in arg or "\\" in arg


def agent_dirs() -> list[Path]:
    """Where named agents are looked up, in order."""
    return [ZOO, agents_dir()]


def resolve(arg: str) -> Path:
    if is_path(arg):
        return Path(arg)
    for folder in agent_dirs():
        if (folder / f"{arg}.zip").is_file():
            return folder / f"{arg}.zip"
    return ZOO / f"{arg}.zip"


def check_api_name(name: str, field: str = "name") -> None:
    """Refuse a policy name from an API request that would make the server open a file: agents are chosen by name,
    from the agent directories, never by path; through wrappers too (`guarded:rl:PATH`). (The registry then refuses
    names it does not know.)"""
    prefix, sep, arg = wrapped(name).partition(":")
    if sep and prefix in PREFIX_OF.values() and (is_path(arg) or not AGENT_NAME.fullmatch(arg) or len(arg) > 100):
        raise AgentLoadError(f"{field}: {name!r}: the API takes agents by name ({prefix}:NAME, an agent in "
                             f"{' or '.join(str(d) for d in agent_dirs())}), never by path")


def metadata_path(model_path: Path) -> Path:
    return model_path.with_suffix(".json")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_data(path: Path) -> dict[str, Any]:
    """The archive's `data` as plain JSON: nothing in it is unpickled here."""
    with zipfile.ZipFile(path) as archive:
        data = json.loads(archive.read("data"))
    if not isinstance(data, dict):  # the file's content is wrong, as with json's own errors: not a caller's TypeError
        raise ValueError("`data` is not a JSON object")  # noqa: TRY004
    return data


def pickled_entries(data: dict[str, Any]) -> set[str]:
    """The entries of `data` that stable-baselines3 would unpickle."""
    return {k for k, v in data.items() if isinstance(v, dict) and ":serialized:" in v}


def declared_spaces(data: dict[str, Any]) -> tuple[Any, Any]:
    """(observation shape, number of actions) as the archive describes them in readable form beside the pickles,
    or None where it does not."""
    def readable(key: str, attr: str) -> Any:
        try:
            value = data[key][attr]
            return json.loads(value) if isinstance(value, str) else value  # a string or already JSON, by SB3 version
        except (KeyError, TypeError, ValueError):
            return None

    shape = readable("observation_space", "_shape")
    return (tuple(shape) if isinstance(shape, list) else None), readable("action_space", "n")


def safe_objects(fmt: AgentFormat, policy_class: type, rollout_buffer_class: type) -> dict[str, Any]:
    """`custom_objects` for `PPO.load`: every pickled entry of the archive, built here instead of unpickled. The
    schedules only matter for further training, which starts from the training config, not from a loaded agent."""
    import numpy as np
    from gymnasium import spaces

    return {
        "policy_class": policy_class,
        "observation_space": spaces.Box(fmt.obs_low, fmt.obs_high, shape=(fmt.obs_size,), dtype=np.float32),
        "action_space": spaces.Discrete(fmt.n_actions),
        "lr_schedule": 0.0, "clip_range": 0.2, "clip_range_vf": None,
        "rollout_buffer_class": rollout_buffer_class,
        "_last_obs": None, "_last_episode_starts": None, "ep_info_buffer": None, "ep_success_buffer": None,
    }


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
    recorded = meta.get("sha256")
    if recorded is None and not is_path(arg):
        raise AgentLoadError(f"{who}: {meta_file} records no SHA-256 of the agent, so it cannot be trusted; an admin "
                             f"adds it with `corral train` (new agents) or by writing the archive's sha256sum there")
    if recorded is not None and sha256_of(path) != recorded:
        raise AgentLoadError(f"{who}: {path} does not have the SHA-256 its sidecar records: the archive was changed "
                             "after training; refusing to load it")
    key = (str(path.resolve()), path.stat().st_mtime_ns, fmt.formulation)
    if key in _LOADED:
        return _LOADED[key], meta
    try:
        data = read_data(path)
    except (KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise AgentLoadError(f"{who}: {path} has no readable `data` ({exc}); {fix}") from None
    shape, n_actions = declared_spaces(data)
    if shape != (fmt.obs_size,) or n_actions != fmt.n_actions:
        raise AgentLoadError(f"{who}: observations {shape} and {n_actions} actions, expected ({fmt.obs_size},) and "
                             f"{fmt.n_actions}; {fix}")
    unknown = pickled_entries(data) - PICKLED_ENTRIES
    if unknown:
        raise AgentLoadError(f"{who}: {path} carries pickled objects Corral does not load "
                             f"({', '.join(sorted(unknown))}); refusing to unpickle them")
    try:
        model = load_model(path)
    except Exception as exc:  # noqa: BLE001 - any failure inside the archive means the same thing to the user
        raise AgentLoadError(f"{who}: {path} could not be loaded ({type(exc).__name__}: {exc}); {fix}") from None
    n_actions = getattr(model.action_space, "n", None)
    if model.observation_space.shape != (fmt.obs_size,) or n_actions != fmt.n_actions:
        raise AgentLoadError(f"{who}: observations {model.observation_space.shape} and {n_actions} actions, expected "
                             f"({fmt.obs_size},) and {fmt.n_actions}; {fix}")
    # The agents are small MLPs, trained on one torch thread. Where the machine's cores are busy (Ray workers,
    # another replay), torch's intra-op threads spin-wait on each other: each layer took 3 ms instead of 0.05 (a
    # 1,024-GPU replay on 2 cores beside one other process: 50 s instead of 9). So one thread here too.
    import torch

    torch.set_num_threads(1)
    _LOADED[key] = model
    return model, meta
