"""What every typed answer shares: built from the API's JSON by its annotations, ignoring fields this client does not
know (a newer server may add some), so an answer never fails to parse for having more than expected."""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from functools import cache
from typing import Any, TypeVar, Union, get_args, get_origin

T = TypeVar("T", bound="Answer")


class Answer:
    """A typed answer of the API (a generated dataclass of `corral.models`)."""

    @classmethod
    def from_json(cls: type[T], data: Any) -> T:
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        dc: Any = cls  # (a generated dataclass: `Answer` itself declares no fields)
        hints = _hints(dc)
        known = {f.name: f.name.rstrip("_") for f in dataclasses.fields(dc)}  # (a keyword field: `from_`)
        made = cls(**{attr: _build(hints[attr], data[key]) for attr, key in known.items() if key in data})
        object.__setattr__(made, "_sent", data)  # (frozen: set past the dataclass's guard)
        return made

    def to_json(self) -> dict[str, Any]:
        """The JSON the server sent, as it sent it (fields this client does not know included: `corral ... --json`
        prints this); for an answer built in code, its fields that are set."""
        sent = getattr(self, "_sent", None)
        if sent is not None:
            return dict(sent)
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not None:
                out[f.name.rstrip("_")] = _plain(value)
        return out


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def _build(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(hint) if a is not type(None)]
        return _build(inner[0], value) if len(inner) == 1 else value
    if origin is list and isinstance(value, list):
        (item,) = get_args(hint)
        return [_build(item, v) for v in value]
    if isinstance(hint, type) and issubclass(hint, Answer) and isinstance(value, dict):
        return hint.from_json(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Answer):
        return value.to_json()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
