"""Pushing the node's GPU health to the Corral API (`corral node start --api URL`): `PUT /api/v1/nodes/<name>/health`
after every health reading, with an admin token (`CORRAL_TOKEN`). The API keeps the last report on the node's row,
and the cluster map shows it.

A push that fails (the API down or still starting, the node not registered yet, a refused token) is logged and tried
again at the next reading: the agent's job is the node, and a missing report shows on the map as stale anyway. Only a
change of outcome is logged, so an API that is down for an hour is one line, not one per reading.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import requests

API_PREFIX = "/api/v1"
TIMEOUT_S = (3.0, 10.0)  # connect, read: a hung API delays the next reading by at most this
MAX_XIDS = 100  # the latest critical XID codes sent per GPU (the API refuses more)


def payload(report: Mapping[str, Any], interval_s: float) -> dict[str, Any]:
    """What the API takes from a health report (`write_health`'s): the readings and how often they come. The API
    derives the node's status from the GPUs' and records when the report arrived."""
    mps = report.get("mps") or {}
    return {
        "agent": report["agent"],
        "updated_at": report["updated_at"],
        "interval_s": interval_s,
        "gpus": [{"index": g["index"], "status": g["status"], "temperature_c": g.get("temperature_c"),
                  "ecc_uncorrected": g.get("ecc_uncorrected"), "xid_errors": list(g.get("xid_errors") or ())[-MAX_XIDS:],
                  "error": g.get("error") or ""} for g in report["gpus"]],
        "mps": {"enabled": bool(mps.get("enabled")), "daemon_running": mps.get("daemon_running"),
                "clients": len(mps.get("clients") or ())},
    }


def health_url(api: str, node: str) -> str:
    return f"{api.rstrip('/')}{API_PREFIX}/nodes/{quote(node, safe='')}/health"


class HealthPusher:
    """Sends each report to the API; never raises. `out` gets a line when the outcome changes."""

    def __init__(self, api: str, token: str, node: str, out: Callable[[str], None],
                 session: requests.Session | None = None) -> None:
        self.url = health_url(api, node)
        self._headers = {"Authorization": f"Bearer {token}"}
        self._out = out
        self._http = session or requests.Session()
        self._failing: str | None = None  # the last failure logged; None: the last push went through (or none yet)
        self.pushed = 0  # reports the API accepted

    def push(self, report: Mapping[str, Any], interval_s: float) -> bool:
        problem = self._send(payload(report, interval_s))
        if problem is None:
            self.pushed += 1
            if self._failing is not None:
                self._out(f"  health: reaches {self.url} again")
        elif problem != self._failing:
            self._out(f"  health: push to {self.url} failed ({problem}); trying again at each reading")
        self._failing = problem
        return problem is None

    def _send(self, body: dict[str, Any]) -> str | None:
        """None if the API took the report, else what went wrong, in a line."""
        try:
            resp = self._http.put(self.url, json=body, headers=self._headers, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            return f"{type(exc).__name__}: no answer from the API"
        except Exception as exc:  # noqa: BLE001 - whatever breaks in the client, the node goes on
            return f"{type(exc).__name__}: {exc}"
        if resp.ok:
            return None
        try:
            message = str(resp.json().get("message") or resp.reason)
        except (ValueError, AttributeError):
            message = resp.reason or ""
        hint = {401: " (is CORRAL_TOKEN a valid token?)", 403: " (CORRAL_TOKEN must be an admin's token)"}
        return f"HTTP {resp.status_code}: {message[:300]}{hint.get(resp.status_code, '')}"
