"""MkDocs hook: the REST API reference page, rendered from the OpenAPI spec the running app serves.

The spec comes from `web.create_app` on a throwaway SQLite store (flask-smorest builds it from the blueprints and
their marshmallow schemas), so the page cannot drift from the code: an endpoint added, removed or changed shows up
at the next build.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

PAGE = "reference/rest-api.md"


def openapi_spec() -> dict[str, Any]:
    from scheduler.live.store import Store
    from web import create_app

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'spec.db'}")
        try:
            return create_app(store).test_client().get("/api/v1/openapi.json").json
        finally:
            store.engine.dispose()


def _schema_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    ref = schema.get("$ref") or schema.get("items", {}).get("$ref", "")
    name = ref.rsplit("/", 1)[-1]
    return (f"list of `{name}`" if "items" in schema else f"`{name}`") if name else f"`{schema.get('type', 'object')}`"


def render(spec: dict[str, Any]) -> str:
    info = spec.get("info", {})
    out = [f"# REST API ({info.get('title', 'Corral')} {info.get('version', '')})", "",
           "Generated from the OpenAPI spec the service serves at `/api/v1/openapi.json` (Swagger UI at `/api/docs`).",
           "Every endpoint but the health check takes `Authorization: Bearer TOKEN`.", ""]
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            out += [f"## `{method.upper()} {path}`", ""]
            if (op.get("summary") or "").strip():
                out += [f"**{op['summary'].strip()}.**", ""]
            if (op.get("description") or "").strip():
                out += [op["description"].strip(), ""]
            params = [*methods.get("parameters", []), *op.get("parameters", [])]
            if params:
                out += ["| parameter | in | required | description |", "|---|---|---|---|"]
                out += [f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                        f"{(p.get('description') or '').replace('|', '/')} |" for p in params]
                out.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                out += [f"Request body: {_schema_name(body)}.", ""]
            codes = [f"{code} {_schema_name(r.get('content', {}).get('application/json', {}).get('schema'))}".strip()
                     for code, r in op.get("responses", {}).items()]
            out += [f"Responses: {', '.join(codes)}.", ""]
    schemas = spec.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", ""]
        for name, schema in schemas.items():
            out += [f"### `{name}`", "", "| field | type | description |", "|---|---|---|"]
            for field, prop in schema.get("properties", {}).items():
                kind = prop.get("type") or _schema_name(prop).strip("`") or "object"
                kind = "/".join(kind) if isinstance(kind, list) else kind
                out.append(f"| `{field}` | {kind} | {(prop.get('description') or '').replace('|', '/')} |")
            out.append("")
    return "\n".join(out) + "\n"


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, PAGE, content=render(openapi_spec())))
    return files
