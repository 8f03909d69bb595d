"""Policy names to classes. Policies register themselves; nothing dispatches on a policy's name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from scheduler.core.decisions import Policy
from scheduler.core.model import SpecError

_CLASSES: dict[str, type] = {}
_PREFIXES: dict[str, Callable[[str, int], Policy]] = {}

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


def register_prefix(prefix: str, loader: Callable[[str, int], Policy]) -> None:
    """Names `PREFIX:ARG` are built by `loader(ARG, seed)` (e.g. `rl:default` loads a trained agent)."""
    _PREFIXES[prefix] = loader


def available() -> list[str]:
    return sorted(_CLASSES) + [f"{p}:NAME" for p in sorted(_PREFIXES)]


def make_policy(name: str, seed: int = 0) -> Policy:
    prefix, sep, arg = name.partition(":")
    if sep and prefix in _PREFIXES:
        return _PREFIXES[prefix](arg, seed)
    cls = _CLASSES.get(name)
    if cls is None:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose from {', '.join(available())}")
    return cls(seed=seed)
