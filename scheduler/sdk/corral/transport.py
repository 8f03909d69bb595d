"""How `corral.Client` talks to the server: the REST API (`/api/v1`) over requests, with the URL checks, the
timeouts, and every failure as the `corral.errors` class of its kind carrying what the server said (its message,
status and per-field errors) or, when the server cannot be reached, which URL was tried and how to point elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import requests

from corral.errors import CorralError, Unreachable, kind_of

DEFAULT_URL = "http://127.0.0.1:8080"
API_PREFIX = "/api/v1"
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0


def flatten_errors(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    """{field: [messages]} from the server's `errors` ({location: {field: [messages]}}, nested for dicts)."""
    out: dict[str, list[str]] = {}
    if isinstance(errors, Mapping):
        for key, value in errors.items():
            # The top level names where the input was (json, query): not part of the field's name.
            name = f"{prefix}.{key}" if prefix else ("" if key in ("json", "query", "form", "path") else str(key))
            for field, msgs in flatten_errors(value, name).items():
                out.setdefault(field, []).extend(msgs)
    elif isinstance(errors, list):
        out[prefix or "_schema"] = [str(m) for m in errors]
    elif errors is not None:
        out[prefix or "_schema"] = [str(errors)]
    return out


def check_url(url: str) -> str:
    """The server's base URL without a trailing slash, or CorralError saying what is wrong with it."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CorralError(f"server URL {url!r} (CORRAL_URL or --url) is not an http(s) URL: write it like "
                          f"{DEFAULT_URL}")
    path = parts.path.rstrip("/")
    if path.endswith(API_PREFIX):
        base = url.strip().rstrip("/").removesuffix(API_PREFIX)
        raise CorralError(f"server URL {url!r} (CORRAL_URL or --url) ends with {API_PREFIX}: give the server's base "
                          f"URL ({base}); the client adds {API_PREFIX} itself")
    return url.strip().rstrip("/")


class Transport:
    """One server and token: `request` returns the decoded JSON of a successful call or raises."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.url = check_url(url or os.environ.get("CORRAL_URL") or DEFAULT_URL)
        self.token = token if token is not None else os.environ.get("CORRAL_TOKEN")
        self.timeout = (CONNECT_TIMEOUT_S, timeout_s)
        self.http = requests.Session()

    def call(self, method: str, path: str, *, json: Any = None,
             params: Mapping[str, Any] | None = None) -> tuple[Any, int]:
        """(decoded JSON body, status) of a successful call, or CorralError."""
        url = f"{self.url}{API_PREFIX}{path}"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = self.http.request(method, url, json=json, params=clean, headers=headers, timeout=self.timeout)
        except requests.exceptions.InvalidJSONError as exc:  # NaN or infinity in a body: JSON has neither
            raise CorralError(f"cannot send this request as JSON: {exc}", url=url) from None
        except requests.Timeout:
            raise Unreachable(f"{url} did not answer within {self.timeout[1]:.0f}s", url=url) from None
        except requests.ConnectionError:
            raise Unreachable(f"cannot reach the Corral API at {self.url} (tried {url}); is the server running? "
                              f"Set CORRAL_URL to its address", url=url) from None
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not resp.ok:
            raise _error(resp, body, url)
        if body is None:
            raise CorralError(f"{url} answered {resp.status_code} without JSON: is CORRAL_URL a Corral server?",
                              status=resp.status_code, url=url)
        return body, resp.status_code

    def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        return self.call(method, path, json=json, params=params)[0]


def _error(resp: requests.Response, body: Any, url: str) -> CorralError:
    if isinstance(body, Mapping):
        errors = flatten_errors(body.get("errors"))
        message = str(body.get("message") or body.get("status") or resp.reason)
    else:
        errors = {}
        snippet = (resp.text or "").strip().splitlines()[0][:200] if (resp.text or "").strip() else ""
        message = f"{resp.reason or 'error'}{': ' + snippet if snippet else ''}"
    if resp.status_code == 422 and errors:
        message = "invalid input"
    return kind_of(resp.status_code)(f"HTTP {resp.status_code}: {message}", status=resp.status_code, errors=errors,
                                     url=url)
