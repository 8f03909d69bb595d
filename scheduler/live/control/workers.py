"""The backend as one unit of work (a pass, a recovery) sees it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from scheduler.live.runs import Backend, JobStatus, Launch, NodeInfo


class Workers:
    """`stop` and `forget` (which end workers) wait, inside `after_commit()`, until the unit's transaction has
    committed, and are dropped if it does not. So a pass the fence refuses (a deposed leader's) or that fails half-way
    leaves every worker as the store says it is: the new leader adopts them, or the rebuilt state does, instead of
    finding them killed by a decision that was never recorded. Outside a unit every call goes straight through."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._queued: list[tuple[Callable[[int], None], int]] | None = None

    @contextmanager
    def after_commit(self) -> Iterator[None]:
        """A unit of work: the stops and forgets asked inside it are carried out, in order, once it ends without an
        exception (its transaction committed), and dropped otherwise."""
        self._queued = []
        try:
            yield
        except BaseException:
            self._queued = None
            raise
        queued, self._queued = self._queued, None
        for call, job_id in queued:
            call(job_id)

    def stop(self, job_id: int) -> None:
        if self._queued is None:
            self.backend.stop(job_id)
        else:
            self._queued.append((self.backend.stop, job_id))

    def forget(self, job_id: int) -> None:
        if self._queued is None:
            self.backend.forget(job_id)
        else:
            self._queued.append((self.backend.forget, job_id))

    def nodes(self) -> list[NodeInfo]:
        return self.backend.nodes()

    def launch(self, launch: Launch) -> None:
        self.backend.launch(launch)

    def adopt(self, launch: Launch) -> bool:
        return self.backend.adopt(launch)

    def reap_orphans(self, keep: set[str]) -> list[str]:
        return self.backend.reap_orphans(keep)

    def set_rate(self, job_id: int, rate: float) -> None:
        self.backend.set_rate(job_id, rate)  # only an emulated worker's pace: harmless if the pass rolls back

    def poll(self) -> list[JobStatus]:
        return self.backend.poll()

    def disown(self) -> None:
        self.backend.disown()
