"""A small client for the Corral REST API (`/api/v1`), over requests. The CLI uses it; so can scripts and notebooks.

Every failure is a `ClientError` carrying what the server said (its message, status and per-field errors), or, when
the server cannot be reached, which URL was tried and how to point the client elsewhere.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

import requests

from scheduler.live.job_states import JobState

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


class LogText(NamedTuple):
    """Text a job's log gained: of run `attempt`, from rank `rank`; a new run starts where `rank` is None."""

    attempt: int
    rank: int | None
    text: str


class ClientError(Exception):
    """An API call that failed: `status` is None when no response came back."""

    def __init__(self, message: str, *, status: int | None = None, errors: dict[str, list[str]] | None = None,
                 url: str | None = None) -> None:
        self.message = message
        self.status = status
        self.errors = errors or {}
        self.url = url
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.status == 422 and self.errors:  # name every bad field: the point of a validation error
            return f"{self.message}: " + "; ".join(f"{f}: {' '.join(m)}" for f, m in self.errors.items())
        return self.message


def check_url(url: str) -> str:
    """The server's base URL without a trailing slash, or ClientError saying what is wrong with it."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClientError(f"server URL {url!r} (CORRAL_URL or --url) is not an http(s) URL: write it like "
                          f"{DEFAULT_URL}")
    path = parts.path.rstrip("/")
    if path.endswith(API_PREFIX):
        base = url.strip().rstrip("/").removesuffix(API_PREFIX)
        raise ClientError(f"server URL {url!r} (CORRAL_URL or --url) ends with {API_PREFIX}: give the server's base "
                          f"URL ({base}); the client adds {API_PREFIX} itself")
    return url.strip().rstrip("/")


class CorralClient:
    def __init__(self, url: str | None = None, token: str | None = None, *, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.url = check_url(url or os.environ.get("CORRAL_URL") or DEFAULT_URL)
        self.token = token if token is not None else os.environ.get("CORRAL_TOKEN")
        self.timeout = (CONNECT_TIMEOUT_S, timeout_s)
        self.http = requests.Session()

    def call(self, method: str, path: str, *, json: Any = None,
             params: Mapping[str, Any] | None = None) -> tuple[Any, int]:
        """(decoded JSON body, status) of a successful call, or ClientError."""
        url = f"{self.url}{API_PREFIX}{path}"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = self.http.request(method, url, json=json, params=clean, headers=headers, timeout=self.timeout)
        except requests.exceptions.InvalidJSONError as exc:  # NaN or infinity in a body: JSON has neither
            raise ClientError(f"cannot send this request as JSON: {exc}", url=url) from None
        except requests.Timeout:
            raise ClientError(f"{url} did not answer within {self.timeout[1]:.0f}s", url=url) from None
        except requests.ConnectionError:
            raise ClientError(f"cannot reach the Corral API at {self.url} (tried {url}); is the server running? "
                              f"Set CORRAL_URL to its address", url=url) from None
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not resp.ok:
            raise _error(resp, body, url)
        if body is None:
            raise ClientError(f"{url} answered {resp.status_code} without JSON: is CORRAL_URL a Corral server?",
                              status=resp.status_code, url=url)
        return body, resp.status_code

    def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        return self.call(method, path, json=json, params=params)[0]

    # ---- endpoints ----------------------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/health")

    def submit(self, spec: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """(job, created): created is False when a job with the same client_token already existed."""
        body, status = self.call("POST", "/jobs", json=dict(spec))
        return body, status == 201

    def resubmit(self, job_id: int, changes: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
        """(new job, created): a copy of job `job_id` as it was submitted, with `changes`, as the caller's."""
        body, status = self.call("POST", f"/jobs/{job_id}/resubmit", json=dict(changes or {}))
        return body, status == 201

    def whatif(self, *, policy: str | None = None, extra_nodes: int = 0, jobs: Sequence[Mapping[str, Any]] | None = None,
               seeds: int | None = None, horizon_s: float | None = None, trace: str | None = None,
               limit: int | None = None) -> dict[str, Any]:
        """The present queue simulated under `policy` (default: the active one), with `extra_nodes` and hypothetical
        `jobs` ({"model", "num_gpus", "duration_s", "submit_in_s", "name"}), next to the active policy as it is:
        distributions over `seeds` (POST /whatif; see the API reference for every field of the answer)."""
        body = {"policy": policy, "extra_nodes": extra_nodes, "jobs": [dict(j) for j in jobs or []], "seeds": seeds,
                "horizon_s": horizon_s, "trace": trace, "limit": limit}
        return self.request("POST", "/whatif", json={k: v for k, v in body.items() if v is not None})

    def jobs(self, *, state: str | None = None, user: str | None = None, team: str | None = None,
             limit: int | None = None, offset: int | None = None) -> dict[str, Any]:
        return self.request("GET", "/jobs",
                            params={"state": state, "user": user, "team": team, "limit": limit, "offset": offset})

    def job(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/jobs/{job_id}")

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self.request("POST", f"/jobs/{job_id}/cancel")

    def update_job(self, job_id: int, changes: dict[str, Any]) -> dict[str, Any]:
        """Change a pending or running job: `{"time_limit_s": seconds or None}`."""
        return self.request("PATCH", f"/jobs/{job_id}", json=changes)

    def requeue(self, job_id: int, *, hold: bool = False) -> dict[str, Any]:
        """Checkpoint a running job and put it back in the queue (held, with `hold`)."""
        return self.request("POST", f"/jobs/{job_id}/requeue", json={"hold": hold})

    def hold(self, job_id: int) -> dict[str, Any]:
        """Hold a pending job: it does not start until released."""
        return self.request("POST", f"/jobs/{job_id}/hold")

    def release(self, job_id: int) -> dict[str, Any]:
        """Release a held job: it may start again, in its place in the queue."""
        return self.request("POST", f"/jobs/{job_id}/release")

    def array(self, array_id: int) -> dict[str, Any]:
        """A job array with each task's state."""
        return self.request("GET", f"/arrays/{array_id}")

    def cancel_array(self, array_id: int) -> dict[str, Any]:
        """Cancel every task of an array not yet finished."""
        return self.request("POST", f"/arrays/{array_id}/cancel")

    def hold_array(self, array_id: int) -> dict[str, Any]:
        """Hold every pending task of an array."""
        return self.request("POST", f"/arrays/{array_id}/hold")

    def release_array(self, array_id: int) -> dict[str, Any]:
        """Release every held task of an array the caller may release."""
        return self.request("POST", f"/arrays/{array_id}/release")

    def logs(self, job_id: int, *, attempt: int | None = None, rank: int | None = None, tail: int | None = None,
             offset: int | None = None, wait_s: float | None = None) -> dict[str, Any]:
        """The last `tail` lines of each rank's log; or, with `rank` and `offset`, what that log gained since byte
        `offset`, waiting up to `wait_s` for it (`follow_logs` does the bookkeeping)."""
        return self.request("GET", f"/jobs/{job_id}/logs", params={
            "attempt": attempt, "rank": rank, "tail": tail, "offset": offset, "wait_s": wait_s})

    def follow_logs(self, job_id: int, *, rank: int | None = None, tail: int = 10, poll_s: float = 1.0,
                    wait_s: float = 10.0) -> Iterator[LogText]:
        """Like `tail -f` on a job's worker logs: the last `tail` lines of each rank's log (or of `rank`'s), then what
        they gain, until the job ends; when the job runs again (requeued, retried), its next run's logs from their
        start. Long-polls one rank's log (`wait_s`); several ranks are polled every `poll_s`."""
        first = self.logs(job_id, rank=rank, tail=tail)
        attempt = first["attempt"]
        ends = {e["rank"]: e["end"] for e in first["logs"]}
        for e in first["logs"]:
            if e["text"]:
                yield LogText(attempt, e["rank"], e["text"])
        while True:
            news = False
            state, current = first["state"], first["current_attempt"]
            for i, r in enumerate(list(ends)):
                res = self.logs(job_id, attempt=attempt, rank=r, offset=ends[r],
                                wait_s=wait_s if len(ends) == 1 else 0.0)
                if i == 0:  # read (server side) before every rank's text of this pass: if it says the run is over,
                    state, current = res["state"], res["current_attempt"]  # the pass read each rank to its end
                entry = res["logs"][0]
                ends[r] = entry["end"]
                if entry["text"]:
                    news = True
                    yield LogText(attempt, r, entry["text"])
            if news:
                continue
            if current != attempt:  # this run is over and read to its end: on to the next one, from its start
                attempt = current
                nxt = self.logs(job_id, attempt=attempt, rank=rank, tail=1)
                ends = {e["rank"]: 0 for e in nxt["logs"]}
                yield LogText(attempt, None, "")
                continue
            if JobState(state).terminal:
                return
            if len(ends) != 1:
                time.sleep(poll_s)
            if not ends:  # no rank has a log yet (the job waits to start): look for them
                ends = {e["rank"]: 0 for e in self.logs(job_id, attempt=attempt, rank=rank, tail=1)["logs"]}

    def drain_node(self, name: str, reason: str, now: bool) -> dict[str, Any]:
        return self.request("POST", f"/nodes/{quote(name, safe='')}/drain",
                            json={"reason": reason, "now": now})

    def resume_node(self, name: str) -> dict[str, Any]:
        return self.request("POST", f"/nodes/{quote(name, safe='')}/resume")

    def cluster(self) -> dict[str, Any]:
        return self.request("GET", "/cluster")

    def accounting(self, *, since: float | None = None, until: float | None = None, by: str = "user") -> dict[str, Any]:
        return self.request("GET", "/accounting", params={"since": since, "until": until, "by": by})

    def models(self) -> list[dict[str, Any]]:
        return self.request("GET", "/models")["models"]

    def policies(self) -> dict[str, Any]:
        return self.request("GET", "/policies")

    def set_policy(self, name: str) -> str:
        return self.request("PUT", "/policies/active", json={"name": name})["active"]

    def teams(self) -> dict[str, Any]:
        """Every team with its usage, and `cluster_gpus`."""
        return self.request("GET", "/teams")

    def team(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/teams/{quote(name, safe='')}")

    def create_team(self, name: str, quota_gpus: float, borrow_limit_gpus: float | None = None) -> dict[str, Any]:
        body = {"name": name, "quota_gpus": quota_gpus, "borrow_limit_gpus": borrow_limit_gpus}
        return self.request("POST", "/teams", json=body)

    def update_team(self, name: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Only the keys given change; `borrow_limit_gpus: None` removes the limit, a ceiling setting None clears it."""
        return self.request("PATCH", f"/teams/{quote(name, safe='')}",
                            json=dict(changes))

    def delete_team(self, name: str) -> dict[str, Any]:
        return self.request("DELETE", f"/teams/{quote(name, safe='')}")

    def time_limits(self) -> dict[str, Any]:
        """The cluster's time limits: `default_s` and `max_s` (None: not set)."""
        return self.request("GET", "/time-limits")

    def set_time_limits(self, changes: Mapping[str, float | None]) -> dict[str, Any]:
        """Only the keys given (`default_s`, `max_s`) change; None clears one. Admins."""
        return self.request("PATCH", "/time-limits", json=dict(changes))

    def priority_classes(self) -> list[dict[str, Any]]:
        """Every priority class, highest value first."""
        return self.request("GET", "/priority-classes")["priority_classes"]

    def create_priority_class(self, name: str, value: int, *, preemptible: bool = True,
                              description: str | None = None) -> dict[str, Any]:
        body = {"name": name, "value": value, "preemptible": preemptible, "description": description}
        return self.request("POST", "/priority-classes", json=body)

    def delete_priority_class(self, name: str) -> dict[str, Any]:
        return self.request("DELETE", f"/priority-classes/{quote(name, safe='')}")

    def users(self) -> list[dict[str, Any]]:
        return self.request("GET", "/users")["users"]

    def set_user_team(self, name: str, team: str) -> dict[str, Any]:
        return self.request("PATCH", f"/users/{quote(name, safe='')}",
                            json={"team": team})

    # ---- fair use (admins) --------------------------------------------------------------------------------------

    def limits(self, user: str | None = None) -> dict[str, Any]:
        """The limits that apply to `user` (None: the cluster-wide defaults), with where each comes from."""
        path = "/limits" if user is None else f"/users/{quote(user, safe='')}/limits"
        return self.request("GET", path)

    def set_limits(self, changes: Mapping[str, Any], user: str | None = None) -> dict[str, Any]:
        """Only the keys given change; None clears one (back to the default)."""
        path = "/limits" if user is None else f"/users/{quote(user, safe='')}/limits"
        return self.request("PATCH", path, json=dict(changes))

    # ---- webhooks (docs/webhooks.md) ----------------------------------------------------------------------------

    def add_webhook(self, url: str, description: str = "") -> dict[str, Any]:
        """A webhook called on every state change of your jobs from now on; the answer holds its `secret`, which
        signs each request and is never shown again. (A single job's webhook: `submit` with `webhook`.)"""
        return self.request("POST", "/webhooks", json={"url": url, "description": description})

    def webhooks(self, *, user: str | None = None, job: int | None = None, limit: int | None = None,
                 offset: int | None = None) -> dict[str, Any]:
        """Your webhooks (an admin: everyone's, or `user`'s), newest first, without secrets: {webhooks, total}."""
        return self.request("GET", "/webhooks", params={"user": user, "job": job, "limit": limit, "offset": offset})

    def delete_webhook(self, webhook_id: int) -> dict[str, Any]:
        return self.request("DELETE", f"/webhooks/{webhook_id}")

    def rotate_webhook_secret(self, webhook_id: int) -> dict[str, Any]:
        """The webhook with a new `secret` (the old one signs nothing from now on)."""
        return self.request("POST", f"/webhooks/{webhook_id}/secret")

    def webhook_deliveries(self, *, webhook: int | None = None, job: int | None = None, status: str | None = None,
                           user: str | None = None, limit: int | None = None,
                           offset: int | None = None) -> dict[str, Any]:
        """Deliveries to your webhooks, newest first, each pending, delivered or failed: {deliveries, total}."""
        return self.request("GET", "/webhooks/deliveries", params={
            "webhook": webhook, "job": job, "status": status, "user": user, "limit": limit, "offset": offset})

    def webhook_delivery(self, delivery_id: int) -> dict[str, Any]:
        """One delivery with the body sent and every attempt (`attempt_log`)."""
        return self.request("GET", f"/webhooks/deliveries/{delivery_id}")


def _error(resp: requests.Response, body: Any, url: str) -> ClientError:
    if isinstance(body, Mapping):
        errors = flatten_errors(body.get("errors"))
        message = str(body.get("message") or body.get("status") or resp.reason)
    else:
        errors = {}
        snippet = (resp.text or "").strip().splitlines()[0][:200] if (resp.text or "").strip() else ""
        message = f"{resp.reason or 'error'}{': ' + snippet if snippet else ''}"
    if resp.status_code == 422 and errors:
        message = "invalid input"
    return ClientError(f"HTTP {resp.status_code}: {message}", status=resp.status_code, errors=errors, url=url)
