"""The app's JSON provider: what the API parses from a request body and how it writes every response.

Parsing refuses, as a 400 naming the problem, what no field could take and what broke the server before any field
was looked at: integers of more digits than any field could mean (a 5,000-digit literal made int() raise ValueError
past Python's 4,300-digit guard: a 500), and nesting deeper than any request needs (the C parser raises
RecursionError on 100k nested arrays; a 50k-deep object parses, then sinks every recursive walker behind it).
NaN, Infinity and 1e999 still parse: the schemas refuse them with a 422 naming the field (every request float is
`allow_nan=False` or checks `math.isfinite`).

Writing never emits NaN or Infinity (invalid JSON: the dashboard's JSON.parse and strict clients fail on the whole
response): a non-finite float anywhere in a response, even one already in the store, is written as null.
"""

from __future__ import annotations

import json
import math
from typing import Any

from flask.json.provider import DefaultJSONProvider

MAX_JSON_DEPTH = 32  # the deepest request (a what-if's jobs, a node's GPUs) nests 3 levels
MAX_INT_DIGITS = 1000  # far beyond any field's bound (2**63 has 19 digits); longer ones reach a field as too large


class JSONInputError(ValueError):
    """A request body the API refuses at parse time. A ValueError, so Flask's request.get_json answers 400 with it."""


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise JSONInputError(f"an integer of {digits} digits: at most {MAX_INT_DIGITS} are accepted")
    return int(text)


def _check_depth(value: Any) -> None:
    """Refuse nesting deeper than MAX_JSON_DEPTH, iteratively (a recursive check would itself overflow)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > MAX_JSON_DEPTH:
            raise JSONInputError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in children)


def _finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by None (responses are the API's own data: shallow, no cycles)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


class CorralJSONProvider(DefaultJSONProvider):
    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        kwargs.setdefault("parse_int", _parse_int)
        try:
            value = json.loads(s, **kwargs)
        except RecursionError:
            raise JSONInputError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
        _check_depth(value)
        return value

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        # The fast path writes as Flask does, with NaN refused; only a response that holds one is walked and rewritten.
        try:
            return super().dumps(obj, allow_nan=False, **kwargs)
        except ValueError:
            return super().dumps(_finite(obj), allow_nan=False, **kwargs)


def _parse_body_first() -> None:
    """Parse a JSON body before any view, as a 400 naming the problem if the provider refuses it. (webargs parses the
    body again with the json module; it only ever sees a body that passed these checks.)"""
    from flask import current_app, request
    from flask_smorest import abort

    if not request.is_json:
        return
    data = request.get_data(cache=True)  # over MAX_CONTENT_LENGTH: 413 here
    if not data:
        return
    try:
        current_app.json.loads(data)
    except UnicodeDecodeError as exc:
        abort(400, message=f"Invalid JSON body: not UTF-8 ({exc.reason} at byte {exc.start})")
    except ValueError as exc:  # JSONDecodeError and JSONInputError
        abort(400, message=f"Invalid JSON body: {exc}")


def init_app(app: Any) -> None:
    app.json = CorralJSONProvider(app)
    app.json.sort_keys = False  # keep the schemas' field order: easier to read
    app.before_request(_parse_body_first)
