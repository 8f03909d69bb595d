"""`corral.Client`: the REST API with typed answers and typed errors.

    from corral import Client, NotFound
    client = Client("http://127.0.0.1:8080", token="...")      # or CORRAL_URL and CORRAL_TOKEN
    job = client.submit(name="train", kind="command", num_gpus=1, entrypoint="python train.py")
    print(job.id, job.state, client.explain(job.id).summary)

It speaks through the same transport as the `corral` command (`scheduler.cli.client.CorralClient`: the URL checks,
timeouts and the server's error messages), reached as `client.raw` for any endpoint not typed here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import corral.models as m
from corral.errors import CorralError, typed
from corral.model_base import Answer
from scheduler.cli.client import ClientError, CorralClient, LogText

T = TypeVar("T", bound=Answer)


@contextmanager
def _typed_errors() -> Iterator[None]:
    try:
        yield
    except CorralError:
        raise
    except ClientError as exc:
        raise typed(exc) from exc


class Client:
    """A Corral server's API. `url` and `token` default to CORRAL_URL and CORRAL_TOKEN (and the URL to
    http://127.0.0.1:8080); every method returns a class of `corral.models` or raises a `corral.errors` class."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout_s: float = 30.0) -> None:
        with _typed_errors():
            self.raw = CorralClient(url, token, timeout_s=timeout_s)

    def _get(self, cls: type[T], call: Callable[[], Any]) -> T:
        with _typed_errors():
            return cls.from_json(call())

    # ---- jobs ---------------------------------------------------------------------------------------------------

    def submit(self, spec: Mapping[str, Any] | None = None, **fields: Any) -> m.Job:
        """Submit a job (the fields of `POST /jobs`, as a mapping or keywords); a retry with a known `client_token`
        returns the first job."""
        with _typed_errors():
            job, _ = self.raw.submit({**(spec or {}), **fields})
        return m.Job.from_json(job)

    def resubmit(self, job_id: int, **changes: Any) -> m.Job:
        with _typed_errors():
            job, _ = self.raw.resubmit(job_id, changes)
        return m.Job.from_json(job)

    def job(self, job_id: int) -> m.JobDetail:
        return self._get(m.JobDetail, lambda: self.raw.job(job_id))

    def jobs(self, *, state: str | None = None, user: str | None = None, team: str | None = None, limit: int = 100,
             offset: int = 0) -> m.JobList:
        return self._get(m.JobList, lambda: self.raw.jobs(state=state, user=user, team=team, limit=limit,
                                                          offset=offset))

    def explain(self, job_id: int) -> m.Explain:
        """Why the job waits (its reason, place and start estimate) or why it sits where it does."""
        return self._get(m.Explain, lambda: self.raw.request("GET", f"/jobs/{job_id}/explain"))

    def cancel(self, job_id: int) -> m.Job:
        return self._get(m.Job, lambda: self.raw.cancel(job_id))

    def update(self, job_id: int, **changes: Any) -> m.Job:
        return self._get(m.Job, lambda: self.raw.update_job(job_id, changes))

    def hold(self, job_id: int) -> m.Job:
        return self._get(m.Job, lambda: self.raw.hold(job_id))

    def release(self, job_id: int) -> m.Job:
        return self._get(m.Job, lambda: self.raw.release(job_id))

    def requeue(self, job_id: int, *, hold: bool = False) -> m.Job:
        return self._get(m.Job, lambda: self.raw.requeue(job_id, hold=hold))

    def logs(self, job_id: int, *, attempt: int | None = None, rank: int | None = None,
             tail: int | None = None) -> m.Logs:
        return self._get(m.Logs, lambda: self.raw.logs(job_id, attempt=attempt, rank=rank, tail=tail))

    def follow_logs(self, job_id: int, *, rank: int | None = None, tail: int = 10) -> Iterator[LogText]:
        """Like `tail -f` on the job's logs until it ends (`LogText(attempt, rank, text)`; a new run: rank None)."""
        with _typed_errors():
            yield from self.raw.follow_logs(job_id, rank=rank, tail=tail)

    def array(self, array_id: int) -> m.Array:
        return self._get(m.Array, lambda: self.raw.array(array_id))

    # ---- the cluster and its settings -----------------------------------------------------------------------------

    def health(self) -> m.Health:
        return self._get(m.Health, self.raw.health)

    def cluster(self) -> m.Cluster:
        return self._get(m.Cluster, self.raw.cluster)

    def models(self) -> list[m.Model]:
        return self._get(m.Models, lambda: {"models": self.raw.models()}).models or []

    def policies(self) -> m.Policies:
        return self._get(m.Policies, self.raw.policies)

    def accounting(self, *, since: float | None = None, until: float | None = None, by: str = "user") -> m.Accounting:
        return self._get(m.Accounting, lambda: self.raw.accounting(since=since, until=until, by=by))

    def teams(self) -> m.TeamList:
        return self._get(m.TeamList, self.raw.teams)

    def team(self, name: str) -> m.Team:
        return self._get(m.Team, lambda: self.raw.team(name))

    def time_limits(self) -> m.TimeLimits:
        return self._get(m.TimeLimits, self.raw.time_limits)
