"""Dump plain dicts through a marshmallow schema's fields at a fraction of marshmallow's cost, with the same result.

A list of 1,000 jobs spent about half its time in `schema.dump` (400,000 field serializations through marshmallow's
generic machinery); a list page must stay cheap at its maximum (issue 46). `dumper(schema)` plans once per schema
which conversion each field needs (int, float, str, bool, as is, nested) and calls a field's own `_serialize` only
for custom fields. tests/test_list_cost.py checks it gives what `schema.dump` gives. The schema still documents the
answer (flask-smorest's `@blp.response`); a view returns `json_response(...)` of what the dumper made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flask import Response, current_app
from marshmallow import Schema, fields

Dump = Callable[[Mapping[str, Any]], dict[str, Any]]

# Fields whose non-null values marshmallow turns into JSON by a plain conversion. Exact types only: a subclass may
# serialize otherwise, and goes through its own `_serialize`.
_PLAIN: dict[type, Callable[[Any], Any]] = {fields.Integer: int, fields.Float: float, fields.String: str,
                                            fields.Boolean: bool}


def _conversion(field: fields.Field) -> Callable[[Any, str, Mapping[str, Any]], Any]:
    kind = type(field)
    plain = _PLAIN.get(kind)
    if isinstance(field, fields.Boolean) and (field.truthy, field.falsy) != (fields.Boolean.truthy,
                                                                            fields.Boolean.falsy):
        plain = None  # its own idea of true and false
    if plain is not None and not getattr(field, "as_string", False):
        return lambda v, _a, _o: None if v is None else plain(v)
    if kind is fields.Nested and isinstance(field, fields.Nested) and not field.many and isinstance(field.schema,
                                                                                                   Schema):
        one = dumper(field.schema)
        return lambda v, _a, _o: None if v is None else one(v)
    if kind is fields.List and isinstance(field, fields.List) and type(field.inner) is fields.Nested:
        nested = field.inner
        assert isinstance(nested, fields.Nested)
        if not nested.many and isinstance(nested.schema, Schema):
            item = dumper(nested.schema)
            return lambda v, _a, _o: None if v is None else [item(x) for x in v]
    return lambda v, a, o: field._serialize(v, a, o)


def dumper(schema: Schema) -> Dump:
    """What `schema.dump(obj)` gives for a dict `obj` (and a schema without hooks, `only`, or `many`)."""
    plan = [(field.attribute or name, field.data_key or name, _conversion(field))
            for name, field in schema.dump_fields.items()]

    def dump(obj: Mapping[str, Any]) -> dict[str, Any]:
        return {key: convert(obj[attr], attr, obj) for attr, key, convert in plan if attr in obj}

    return dump


def json_response(body: Any) -> Response:
    """`body` as flask-smorest would answer it after its dump (the app's JSON provider, its settings)."""
    out: Response = current_app.json.response(body)  # type: ignore[assignment]
    return out
