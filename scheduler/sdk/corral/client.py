"""`corral.Client`: the REST API with typed answers and typed errors. The `corral` command is built on it.

    from corral import Client, NotFound
    client = Client("http://127.0.0.1:8080", token="...")      # or CORRAL_URL and CORRAL_TOKEN
    job = client.submit(name="train", kind="command", num_gpus=1, entrypoint="python train.py")
    print(job.id, job.state, client.explain(job.id).summary)

Every method returns a class of `corral.models` (generated from the server's OpenAPI document) or raises a class of
`corral.errors`; `client.transport.request(method, path)` reaches anything else as plain JSON.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

import corral.models as m
from corral.model_base import Answer
from corral.transport import READ_TIMEOUT_S, Transport
from scheduler.live.job_states import JobState

T = TypeVar("T", bound=Answer)


class LogText(NamedTuple):
    """Text a job's log gained: of run `attempt`, from rank `rank`; a new run starts where `rank` is None."""

    attempt: int
    rank: int | None
    text: str


class Submitted(NamedTuple):
    """A submission's job, and whether this call created it (False: a job with the same `client_token` existed, so a
    retry after a lost answer made no second job)."""

    job: m.Job
    created: bool


def _name(value: str) -> str:
    return quote(value, safe="")


def _given(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class Client:
    """A Corral server's API. `url` and `token` default to CORRAL_URL and CORRAL_TOKEN (and the URL to
    http://127.0.0.1:8080)."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.transport = Transport(url, token, timeout_s=timeout_s)

    @property
    def url(self) -> str:
        return self.transport.url

    def _ask(self, answer: type[T], method: str, path: str, *, json: Any = None,
             params: Mapping[str, Any] | None = None) -> T:
        return answer.from_json(self.transport.request(method, path, json=json, params=params))

    # ---- jobs ---------------------------------------------------------------------------------------------------

    def submit(self, spec: Mapping[str, Any] | None = None, **fields: Any) -> m.Job:
        """Submit a job (the fields of `POST /jobs`, as a mapping or keywords); a retry with a known `client_token`
        returns the first job."""
        return self.submit_once({**(spec or {}), **fields}).job

    def submit_once(self, spec: Mapping[str, Any]) -> Submitted:
        """`submit`, saying whether this call created the job or found the one its `client_token` made."""
        body, status = self.transport.call("POST", "/jobs", json=dict(spec))
        return Submitted(m.Job.from_json(body), status == 201)

    def resubmit(self, job_id: int, **changes: Any) -> m.Job:
        """A copy of job `job_id` as it was submitted, with `changes`, as the caller's."""
        return self.resubmit_once(job_id, changes).job

    def resubmit_once(self, job_id: int, changes: Mapping[str, Any] | None = None) -> Submitted:
        body, status = self.transport.call("POST", f"/jobs/{job_id}/resubmit", json=dict(changes or {}))
        return Submitted(m.Job.from_json(body), status == 201)

    def job(self, job_id: int) -> m.JobDetail:
        return self._ask(m.JobDetail, "GET", f"/jobs/{job_id}")

    def jobs(self, *, state: str | None = None, user: str | None = None, team: str | None = None, limit: int = 100,
             offset: int = 0) -> m.JobList:
        return self._ask(m.JobList, "GET", "/jobs",
                         params={"state": state, "user": user, "team": team, "limit": limit, "offset": offset})

    def explain(self, job_id: int) -> m.Explain:
        """Why the job waits (its reason, place and start estimate) or why it sits where it does."""
        return self._ask(m.Explain, "GET", f"/jobs/{job_id}/explain")

    def cancel(self, job_id: int) -> m.Job:
        return self._ask(m.Job, "POST", f"/jobs/{job_id}/cancel")

    def update(self, job_id: int, **changes: Any) -> m.Job:
        """Change a pending or running job: `time_limit_s=seconds` (None: no limit)."""
        return self._ask(m.Job, "PATCH", f"/jobs/{job_id}", json=changes)

    def hold(self, job_id: int) -> m.Job:
        """Hold a pending job: it does not start until released."""
        return self._ask(m.Job, "POST", f"/jobs/{job_id}/hold")

    def release(self, job_id: int) -> m.Job:
        """Release a held job: it may start again, in its place in the queue."""
        return self._ask(m.Job, "POST", f"/jobs/{job_id}/release")

    def requeue(self, job_id: int, *, hold: bool = False) -> m.Job:
        """Checkpoint a running job and put it back in the queue (held, with `hold`)."""
        return self._ask(m.Job, "POST", f"/jobs/{job_id}/requeue", json={"hold": hold})

    def logs(self, job_id: int, *, attempt: int | None = None, rank: int | None = None, tail: int | None = None,
             offset: int | None = None, wait_s: float | None = None) -> m.Logs:
        """The last `tail` lines of each rank's log; or, with `rank` and `offset`, what that log gained since byte
        `offset`, waiting up to `wait_s` for it (`follow_logs` does the bookkeeping)."""
        return self._ask(m.Logs, "GET", f"/jobs/{job_id}/logs", params={
            "attempt": attempt, "rank": rank, "tail": tail, "offset": offset, "wait_s": wait_s})

    def follow_logs(self, job_id: int, *, rank: int | None = None, tail: int = 10, poll_s: float = 1.0,
                    wait_s: float = 10.0) -> Iterator[LogText]:
        """Like `tail -f` on a job's worker logs: the last `tail` lines of each rank's log (or of `rank`'s), then what
        they gain, until the job ends; when the job runs again (requeued, retried), its next run's logs from their
        start. Long-polls one rank's log (`wait_s`); several ranks are polled every `poll_s`."""
        first = self.logs(job_id, rank=rank, tail=tail)
        attempt = first.attempt or 0
        ends = {e.rank: e.end or 0 for e in first.logs or []}
        for e in first.logs or []:
            if e.text:
                yield LogText(attempt, e.rank, e.text)
        while True:
            news = False
            state, current = first.state, first.current_attempt
            for i, r in enumerate(list(ends)):
                res = self.logs(job_id, attempt=attempt, rank=r, offset=ends[r],
                                wait_s=wait_s if len(ends) == 1 else 0.0)
                if i == 0:  # read (server side) before every rank's text of this pass: if it says the run is over,
                    state, current = res.state, res.current_attempt  # the pass read each rank to its end
                entry = (res.logs or [m.RankLog()])[0]
                ends[r] = entry.end or ends[r]
                if entry.text:
                    news = True
                    yield LogText(attempt, r, entry.text)
            if news:
                continue
            if current is not None and current != attempt:  # this run is over and read to its end: on to the next
                attempt = current  # one, from its start
                ends = {e.rank: 0 for e in self.logs(job_id, attempt=attempt, rank=rank, tail=1).logs or []}
                yield LogText(attempt, None, "")
                continue
            if state is not None and JobState(state).terminal:
                return
            if len(ends) != 1:
                time.sleep(poll_s)
            if not ends:  # no rank has a log yet (the job waits to start): look for them
                ends = {e.rank: 0 for e in self.logs(job_id, attempt=attempt, rank=rank, tail=1).logs or []}

    def array(self, array_id: int) -> m.Array:
        """A job array with each task's state."""
        return self._ask(m.Array, "GET", f"/arrays/{array_id}")

    def cancel_array(self, array_id: int) -> m.Array:
        """Cancel every task of an array not yet finished."""
        return self._ask(m.Array, "POST", f"/arrays/{array_id}/cancel")

    def hold_array(self, array_id: int) -> m.Array:
        """Hold every pending task of an array."""
        return self._ask(m.Array, "POST", f"/arrays/{array_id}/hold")

    def release_array(self, array_id: int) -> m.Array:
        """Release every held task of an array the caller may release."""
        return self._ask(m.Array, "POST", f"/arrays/{array_id}/release")

    def whatif(self, *, policy: str | None = None, extra_nodes: int = 0, jobs: Sequence[Mapping[str, Any]] = (),
               seeds: int | None = None, horizon_s: float | None = None, trace: str | None = None,
               limit: int | None = None) -> m.WhatIf:
        """The present queue simulated under `policy` (default: the active one), with `extra_nodes` and hypothetical
        `jobs` ({"model", "num_gpus", "duration_s", "submit_in_s", "name"}), next to the active policy as it is:
        distributions over `seeds` (POST /whatif)."""
        body = _given({"policy": policy, "extra_nodes": extra_nodes, "jobs": [dict(j) for j in jobs], "seeds": seeds,
                       "horizon_s": horizon_s, "trace": trace, "limit": limit})
        return self._ask(m.WhatIf, "POST", "/whatif", json=body)

    # ---- the cluster and its settings -----------------------------------------------------------------------------

    def health(self) -> m.Health:
        return self._ask(m.Health, "GET", "/health")

    def cluster(self) -> m.Cluster:
        return self._ask(m.Cluster, "GET", "/cluster")

    def drain_node(self, name: str, *, reason: str, now: bool = False) -> m.NodeDrain:
        """Start no new job on the node; with `now`, requeue its jobs at once (admins)."""
        return self._ask(m.NodeDrain, "POST", f"/nodes/{_name(name)}/drain", json={"reason": reason, "now": now})

    def resume_node(self, name: str) -> m.NodeDrain:
        return self._ask(m.NodeDrain, "POST", f"/nodes/{_name(name)}/resume")

    def models(self) -> list[m.Model]:
        return self._ask(m.Models, "GET", "/models").models or []

    def policies(self) -> m.Policies:
        return self._ask(m.Policies, "GET", "/policies")

    def set_policy(self, name: str) -> str:
        """Make `name` the controller's policy (admins); the answer is the active policy's name."""
        return self._ask(m.ActivePolicy, "PUT", "/policies/active", json={"name": name}).active or name

    def accounting(self, *, since: float | None = None, until: float | None = None, by: str = "user") -> m.Accounting:
        return self._ask(m.Accounting, "GET", "/accounting", params={"since": since, "until": until, "by": by})

    def time_limits(self) -> m.TimeLimits:
        """The cluster's time limits: `default_s` and `max_s` (None: not set)."""
        return self._ask(m.TimeLimits, "GET", "/time-limits")

    def set_time_limits(self, changes: Mapping[str, float | None]) -> m.TimeLimits:
        """Only the keys given (`default_s`, `max_s`) change; None clears one. Admins."""
        return self._ask(m.TimeLimits, "PATCH", "/time-limits", json=dict(changes))

    def priority_classes(self) -> list[m.PriorityClass]:
        """Every priority class, highest value first."""
        return self._ask(m.PriorityClassList, "GET", "/priority-classes").priority_classes or []

    def create_priority_class(self, name: str, value: int, *, preemptible: bool = True,
                              description: str | None = None) -> m.PriorityClass:
        body = {"name": name, "value": value, "preemptible": preemptible, "description": description}
        return self._ask(m.PriorityClass, "POST", "/priority-classes", json=body)

    def delete_priority_class(self, name: str) -> m.PriorityClass:
        return self._ask(m.PriorityClass, "DELETE", f"/priority-classes/{_name(name)}")

    # ---- teams, users and fair use ----------------------------------------------------------------------------------

    def teams(self) -> m.TeamList:
        """Every team with its usage, and `cluster_gpus`."""
        return self._ask(m.TeamList, "GET", "/teams")

    def team(self, name: str) -> m.Team:
        return self._ask(m.Team, "GET", f"/teams/{_name(name)}")

    def create_team(self, name: str, quota_gpus: float, borrow_limit_gpus: float | None = None) -> m.Team:
        body = {"name": name, "quota_gpus": quota_gpus, "borrow_limit_gpus": borrow_limit_gpus}
        return self._ask(m.Team, "POST", "/teams", json=body)

    def update_team(self, name: str, changes: Mapping[str, Any]) -> m.Team:
        """Only the keys given change; `borrow_limit_gpus: None` removes the limit, a ceiling setting None clears it."""
        return self._ask(m.Team, "PATCH", f"/teams/{_name(name)}", json=dict(changes))

    def delete_team(self, name: str) -> m.TeamDeleted:
        return self._ask(m.TeamDeleted, "DELETE", f"/teams/{_name(name)}")

    def users(self) -> list[m.User]:
        return self._ask(m.UserList, "GET", "/users").users or []

    def set_user_team(self, name: str, team: str) -> m.User:
        return self._ask(m.User, "PATCH", f"/users/{_name(name)}", json={"team": team})

    def limits(self, user: str | None = None) -> m.Limits:
        """The limits that apply to `user` (None: the cluster-wide defaults), with where each comes from."""
        return self._ask(m.Limits, "GET", "/limits" if user is None else f"/users/{_name(user)}/limits")

    def set_limits(self, changes: Mapping[str, Any], user: str | None = None) -> m.Limits:
        """Only the keys given change; None clears one (back to the default)."""
        path = "/limits" if user is None else f"/users/{_name(user)}/limits"
        return self._ask(m.Limits, "PATCH", path, json=dict(changes))

    # ---- webhooks (docs/webhooks.md) ----------------------------------------------------------------------------

    def add_webhook(self, url: str, description: str = "") -> m.WebhookCreated:
        """A webhook called on every state change of your jobs from now on; the answer holds its `secret`, which
        signs each request and is never shown again. (A single job's webhook: `submit` with `webhook`.)"""
        return self._ask(m.WebhookCreated, "POST", "/webhooks", json={"url": url, "description": description})

    def webhooks(self, *, user: str | None = None, job: int | None = None, limit: int | None = None,
                 offset: int | None = None) -> m.WebhookList:
        """Your webhooks (an admin: everyone's, or `user`'s), newest first, without secrets."""
        return self._ask(m.WebhookList, "GET", "/webhooks",
                         params={"user": user, "job": job, "limit": limit, "offset": offset})

    def delete_webhook(self, webhook_id: int) -> m.Webhook:
        return self._ask(m.Webhook, "DELETE", f"/webhooks/{webhook_id}")

    def rotate_webhook_secret(self, webhook_id: int) -> m.WebhookCreated:
        """The webhook with a new `secret` (the old one signs nothing from now on)."""
        return self._ask(m.WebhookCreated, "POST", f"/webhooks/{webhook_id}/secret")

    def webhook_deliveries(self, *, webhook: int | None = None, job: int | None = None, status: str | None = None,
                           user: str | None = None, limit: int | None = None,
                           offset: int | None = None) -> m.DeliveryList:
        """Deliveries to your webhooks, newest first, each pending, delivered or failed."""
        return self._ask(m.DeliveryList, "GET", "/webhooks/deliveries", params={
            "webhook": webhook, "job": job, "status": status, "user": user, "limit": limit, "offset": offset})

    def webhook_delivery(self, delivery_id: int) -> m.DeliveryDetail:
        """One delivery with the body sent and every attempt (`attempt_log`)."""
        return self._ask(m.DeliveryDetail, "GET", f"/webhooks/deliveries/{delivery_id}")
