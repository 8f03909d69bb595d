"""Security headers on every response, and error messages that never show where the server keeps its files.

The Content-Security-Policy allows only what Corral serves itself: the dashboard's scripts and styles under /static,
Swagger UI's under /api/docs/assets, requests to this origin. Inline scripts are refused except the one Swagger UI's
page carries (flask-smorest's template), which is allowed by its hash, computed from the page itself so it follows
any change of the template or its configuration. Inline styles are allowed: the dashboard's views set bar widths and
colours in style attributes, and Swagger UI injects its own. No page may be framed (clickjacking).
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from pathlib import Path
from typing import Any

from flask import Flask, Response, request

from scheduler.core.paths import corral_home

CSP = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data:",  # the dashboard's empty favicon, Swagger UI's icons
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}
HEADERS = {
    "X-Frame-Options": "DENY",  # frame-ancestors' equivalent for browsers that ignore CSP
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # a job page's URL names the job: keep it from other sites
    "Cross-Origin-Opener-Policy": "same-origin",
}
INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)
MAX_HASHED_PAGE = 256 * 1024  # only small pages (Swagger UI's is 1 KB) are searched for inline scripts


def content_security_policy(html: bytes | None = None) -> str:
    """The policy, with the hashes of the inline scripts of `html` (a page Corral rendered) allowed."""
    directives = dict(CSP)
    if html:
        hashes = [base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode() for m in INLINE_SCRIPT.finditer(html)]
        directives["script-src"] += "".join(f" 'sha256-{h}'" for h in hashes)
    return "; ".join(f"{k} {v}" for k, v in directives.items())


_PLAIN_POLICY = content_security_policy()  # every answer's but Swagger UI's page: built once, not per response
SWAGGER_PAGE = "/api/docs"  # the one page whose inline script is allowed (flask-smorest's template, nothing a user sent)


def _add_headers(response: Response) -> Response:
    html = None
    # Only Swagger UI's own page: hashing the inline scripts of any page would allow a script that a page reflected.
    if request.path.rstrip("/") == SWAGGER_PAGE and response.mimetype == "text/html" and \
            not response.direct_passthrough and (response.content_length or 0) <= MAX_HASHED_PAGE:
        html = response.get_data()
    response.headers.setdefault("Content-Security-Policy", content_security_policy(html) if html else _PLAIN_POLICY)
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def server_dirs() -> list[tuple[str, str]]:
    """(directory, what to say instead), most specific first: where the server keeps its data and its code."""
    dirs = [(corral_home(), "$CORRAL_HOME"), (Path(__file__).resolve().parents[1], "<corral>"),
            (Path(sys.prefix), "<python>"), (Path.home(), "~")]
    out: list[tuple[str, str]] = []
    for path, name in dirs:
        for variant in {str(path), str(path.resolve())}:
            if len(variant) > 1:  # never "/" itself
                out.append((variant, name))
    return sorted(out, key=lambda d: -len(d[0]))


def redact_paths(value: Any) -> Any:
    """`value` (an error's message, or its {field: [messages]}) with the server's directories replaced by names:
    a client learns what is wrong, never where CORRAL_HOME, the code or the server's home is."""
    if isinstance(value, str):
        for path, name in server_dirs():
            # Whole path components only: the home /root must not turn "/rootfs" into "~fs".
            value = re.sub(re.escape(path) + r"(?![\w.-])", name, value)
        return value
    if isinstance(value, dict):
        return {k: redact_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_paths(v) for v in value]
    return value


def init_app(app: Flask) -> None:
    app.after_request(_add_headers)
