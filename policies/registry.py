"""Policy names to classes. Policies register themselves; nothing dispatches on a policy's name.

Other installed packages add policies through the `corral.policies` entry point group: each entry point names a
policy class (the protocol of `scheduler.core.decisions.Policy`, built as `cls(seed=...)`) under its `name`, e.g. in
the package's pyproject.toml:

    [project.entry-points."corral.policies"]
    lifo = "my_policies.lifo:Lifo"

They are loaded the first time a name is listed or built, so `pip install` is all it takes for `corral simulate
--policy lifo`, `corral evaluate` and the live service. A package whose entry point fails to load, names something
that is not a policy class, or takes a name already in use is left out with a warning (and building that name says
why); Corral's own policies are never replaced.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Collection
from importlib.metadata import entry_points
from typing import TypeVar

from scheduler.core.decisions import Policy
from scheduler.core.model import SpecError

ENTRY_POINT_GROUP = "corral.policies"
_CLASSES: dict[str, type] = {}
_PREFIXES: dict[str, Callable[[str, int], Policy]] = {}
_WRAPPERS: set[str] = set()  # prefixes whose argument is another policy's name
_LEFT_OUT: dict[str, str] = {}  # entry point name -> why it was not registered
_FROM_PACKAGES: set[str] = set()  # the names registered from entry points
_plugins_loaded = False
# A policy name the API and the CLI can carry: what the built-in names look like.
PLUGIN_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")

log = logging.getLogger(__name__)

T = TypeVar("T", bound=type)


class UnknownPolicyError(SpecError):
    pass


def register(cls: T) -> T:
    """Class decorator: make `cls` available under `cls.name`."""
    name = cls.name  # type: ignore[attr-defined]
    if name in _CLASSES:
        raise ValueError(f"policy {name!r} registered twice")
    _CLASSES[name] = cls
    return cls


def register_prefix(prefix: str, loader: Callable[[str, int], Policy], *, wraps: bool = False) -> None:
    """Names `PREFIX:ARG` are built by `loader(ARG, seed)` (e.g. `rl:default` loads a trained agent). `wraps`: ARG is
    itself a policy's name, which the loader builds (`largest:POLICY`, `guarded:POLICY`): `wrapped` reads through it."""
    _PREFIXES[prefix] = loader
    if wraps:
        _WRAPPERS.add(prefix)


def wrapped(name: str) -> str:
    """The policy a name builds once its wrappers are taken off (`guarded:largest:rl:x` -> `rl:x`): whatever checks a
    name (an API's refusal of agent paths) checks this one too."""
    prefix, sep, arg = name.partition(":")
    while sep and prefix in _WRAPPERS:
        name = arg
        prefix, sep, arg = name.partition(":")
    return name


def load_plugins(*, again: bool = False) -> dict[str, str]:
    """Register the policies of the `corral.policies` entry points (once; `again` looks afresh, for tests). Returns
    the entry points left out, each with why."""
    global _plugins_loaded
    if _plugins_loaded and not again:
        return dict(_LEFT_OUT)
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {ep.name!r} = {ep.value!r}" + (f" of package {ep.dist.name!r}" if ep.dist else "")
        why = _plugin_problem(ep.name)
        obj: object = None
        if why is None:
            try:
                obj = ep.load()
            except Exception as exc:  # noqa: BLE001  (a broken package must not take Corral down: left out, says why)
                why = f"it failed to load: {type(exc).__name__}: {exc}"
        if why is None:
            why = _not_a_policy(obj, ep.name)
        if why is not None:
            if _LEFT_OUT.get(ep.name) != why:
                log.warning("policy %s left out: %s", where, why)
            _LEFT_OUT[ep.name] = why
            continue
        _LEFT_OUT.pop(ep.name, None)
        _FROM_PACKAGES.add(ep.name)
        _CLASSES[ep.name] = obj  # type: ignore[assignment]  # (the module may have used @register itself)
    return dict(_LEFT_OUT)


def _plugin_problem(name: str) -> str | None:
    if not PLUGIN_NAME.fullmatch(name):
        return "its name must be lowercase letters, digits, '-' or '_' (at most 64), starting with a letter"
    if name in _PREFIXES:
        return f"{name!r} is the prefix of Corral's {name}:NAME policies"
    taken = _CLASSES.get(name)
    if taken is not None and name not in _FROM_PACKAGES:  # checked before loading: Corral's own names stay its own
        return f"the name {name!r} is already {taken.__module__}.{taken.__qualname__}'s"
    return None


def _not_a_policy(obj: object, name: str) -> str | None:
    if not isinstance(obj, type):
        return f"it names {type(obj).__name__} {obj!r}, not a policy class"
    if getattr(obj, "name", None) != name:
        return f"its class {obj.__qualname__} has name {getattr(obj, 'name', None)!r}, not {name!r}"
    if not callable(getattr(obj, "schedule", None)) or not isinstance(getattr(obj, "oracle", None), bool):
        return f"its class {obj.__qualname__} lacks the policy protocol (schedule, name, oracle)"
    taken = _CLASSES.get(name)
    if taken is not None and taken is not obj:
        return f"the name {name!r} is already {taken.__module__}.{taken.__qualname__}'s"
    return None


def available() -> list[str]:
    load_plugins()
    return sorted(_CLASSES) + [f"{p}:NAME" for p in sorted(_PREFIXES)]


def make_policy(name: str, seed: int = 0) -> Policy:
    prefix, sep, arg = name.partition(":")
    if sep and prefix in _PREFIXES:
        return _PREFIXES[prefix](arg, seed)
    left_out = load_plugins()
    cls = _CLASSES.get(name)
    if cls is None:
        if name in left_out:
            raise UnknownPolicyError(f"policy {name!r} from an installed package was left out: {left_out[name]}")
        raise UnknownPolicyError(f"unknown policy {name!r}; choose from {', '.join(available())}")
    return cls(seed=seed)


def parse_options(name: str, arg: str, lists: Collection[str] = (),
                  numbers: Collection[str] = ()) -> dict[str, list[float]]:
    """`KEY=VALUE,...` options of policy `name` (given as `name:arg`): keys in `lists` take one or more comma-separated
    numbers (`thresholds=60,600,3600`), keys in `numbers` exactly one. Every value must be a finite number. Raises
    `UnknownPolicyError` (a `SpecError`) naming the option and the problem."""
    where = f"policy '{name}:{arg}'"
    keys = [*lists, *numbers]
    choices = ", ".join(f"{k}=N,N,..." if k in lists else f"{k}=N" for k in keys)
    if not arg.strip():
        raise UnknownPolicyError(f"{where}: no options given; use {name} alone, or {name}:{choices}")
    out: dict[str, list[float]] = {}
    key: str | None = None
    for token in arg.split(","):
        token = token.strip()
        if "=" in token:
            key, _, token = (part.strip() for part in token.partition("="))
            if key not in keys:
                raise UnknownPolicyError(f"{where}: unknown option {key!r}; choose from {choices}")
            if key in out:
                raise UnknownPolicyError(f"{where}: option {key!r} given twice")
            out[key] = []
        elif key is None:
            raise UnknownPolicyError(f"{where}: expected KEY=VALUE, got {token!r}; choose from {choices}")
        elif key not in lists:
            raise UnknownPolicyError(f"{where}: option {key!r} takes one number, got another value {token!r}")
        if not token:
            raise UnknownPolicyError(f"{where}: option {key!r} has an empty value")
        try:
            value = float(token)
        except ValueError:
            raise UnknownPolicyError(f"{where}: option {key!r}: {token!r} is not a number") from None
        if not math.isfinite(value):
            raise UnknownPolicyError(f"{where}: option {key!r}: {token!r} is not a finite number")
        out[key].append(value)
    return out
