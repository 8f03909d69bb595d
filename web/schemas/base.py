"""What every schema builds on: the request base that refuses unstorable strings, the fields of Corral's own kinds
(GPU counts, retry codes) and numbers bounded as web.limits says."""

from __future__ import annotations

import math
from typing import Any

from marshmallow import Schema, ValidationError, fields, pre_load, validate

import web.limits as lim
from scheduler.live.store.queries import check_user_name


class GpuCount(fields.Field):
    """A whole number of GPUs (>= 1), or a share of one GPU strictly between 0 and 1 (MPS). 1.5 GPUs means nothing a
    placement can give, so it is refused rather than rounded. Dumped as an int when whole, so clients see `2`."""

    # marshmallow's Field declares this a plain attribute, so it cannot be a ClassVar here; read per class, not mutated
    default_error_messages = {  # noqa: RUF012
        "invalid": "Not a number.",
        "range": f"Must be a whole number of GPUs from 1 to {lim.MAX_JOB_GPUS}, or a fraction from "
                 f"{lim.MIN_GPU_SHARE} to below 1.",
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs["metadata"] = {"minimum": lim.MIN_GPU_SHARE, "maximum": lim.MAX_JOB_GPUS, **kwargs.get("metadata", {})}
        super().__init__(**kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.make_error("invalid")
        if isinstance(value, int) and value > lim.MAX_JOB_GPUS:  # before float(): a long int would overflow it
            raise self.make_error("range")
        x = float(value)
        if not math.isfinite(x) or not (lim.MIN_GPU_SHARE <= x < 1 or (1 <= x <= lim.MAX_JOB_GPUS and x.is_integer())):
            raise self.make_error("range")
        return x

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> int | float | None:
        if value is None:
            return None
        x = float(value)
        return int(x) if x.is_integer() else x


class RetryOn(fields.Field):
    """The exit codes a failed run is retried on: "any", or a list of codes from 1 to 255. Stored as None for any."""

    default_error_messages = {  # noqa: RUF012  (as GpuCount's)
        "invalid": f'Must be "any" or a list of 1 to {lim.MAX_RETRY_CODES} exit codes from 1 to 255.',
    }

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[int] | None:
        if value == "any":
            return None
        if (not isinstance(value, list) or not 1 <= len(value) <= lim.MAX_RETRY_CODES
                or not all(type(v) is int and 1 <= v <= 255 for v in value)):
            raise self.make_error("invalid")
        return sorted(set(value))

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str | list[int]:
        return "any" if value is None else list(value)


def db_int(minimum: int = 0, maximum: int = lim.DB_INT_MAX, **kw: Any) -> fields.Integer:
    """An integer the store can hold (web.limits.DB_INT_MAX): out of range is a 422 naming the field, not a driver
    error."""
    return fields.Integer(validate=validate.Range(min=minimum, max=maximum), **kw)


def positive(**kw: Any) -> fields.Float:
    """A finite number of seconds above 0, at most web.limits.MAX_SECONDS."""
    return fields.Float(validate=validate.Range(min=0, min_inclusive=False, max=lim.MAX_SECONDS), allow_nan=False, **kw)


def bounded(low: float, high: float, **kw: Any) -> fields.Float:
    """A finite float in [low, high] (web.limits says why each bound), stated in the OpenAPI document."""
    return fields.Float(validate=validate.Range(min=low, max=high), allow_nan=False, **kw)


def _bad_string(text: str) -> str | None:
    """Why `text` cannot be stored or passed on, or None. A NUL byte: PostgreSQL's text cannot hold one, and no name,
    command or path needs it. A lone surrogate ("\\ud800" in JSON): not Unicode, so it cannot be encoded as UTF-8
    for the database, a log or a process's environment (it made the insert, and a worker's Popen, fail)."""
    if "\x00" in text:
        return "Must not contain a NUL byte."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"Must be valid Unicode: a lone surrogate (U+{ord(text[exc.start]):04X}) at character {exc.start}."
    return None


def bad_strings(data: Any) -> dict[str, str]:
    """{dotted name: why} for every string (key or value) anywhere in `data` that `_bad_string` refuses. Iterative:
    the app refuses deep JSON, but this must not be the thing that overflows the stack either."""
    found: dict[str, str] = {}
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                name = f"{path}.{key}" if path else str(key)
                why = _bad_string(key) if isinstance(key, str) else None
                if why:
                    found[name.encode("utf-8", "backslashreplace").decode()] = why
                stack.append((name, item))
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}" if path else str(i), item) for i, item in enumerate(value))
        elif isinstance(value, str) and (why := _bad_string(value)):
            found[path.encode("utf-8", "backslashreplace").decode() or "_schema"] = why
    return found


class RequestSchema(Schema):
    """What every request schema shares: no string, key or value, at any depth, may hold a NUL byte or a lone
    surrogate (see `_bad_string`); refused as a 422 naming the field before anything reads it."""

    @pre_load
    def _storable_strings(self, data: Any, **kwargs: Any) -> Any:
        # Query strings arrive as a (proxy of a) MultiDict: look at every value, but hand on the data unchanged.
        seen = {k: data.getlist(k) for k in data} if hasattr(data, "getlist") else data
        bad = bad_strings(seen)
        if bad:
            raise ValidationError({name.split(".")[0]: [why] for name, why in bad.items()})
        return data


class PageArgs(RequestSchema):
    """A page of a short list (tokens, users, teams): by default all of it, up to the maximum page."""

    limit = fields.Integer(load_default=lim.MAX_PAGE, validate=validate.Range(min=1, max=lim.MAX_PAGE))
    offset = db_int(load_default=0)


def name_rule(value: str) -> None:
    """The user-name rule (queries.check_user_name) for team and priority-class names too: no name can be taken for
    a CLI flag."""
    try:
        check_user_name(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
