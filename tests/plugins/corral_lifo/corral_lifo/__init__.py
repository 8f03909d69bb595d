"""`lifo`: the newest pending job first, on its best-fit placement. An example of a policy from another package: it
uses only the policy interface (`scheduler.core.decisions`, the view) and the placement helpers of `policies`."""

from __future__ import annotations

from collections.abc import Collection

from policies.placement import Planner
from scheduler.core.decisions import Decision, Place
from scheduler.core.model import Job
from scheduler.core.state import ClusterView


class Lifo:
    """Starts the newest pending job that fits, best fit; one placement per call (the caller asks again)."""

    name = "lifo"
    oracle = False

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def schedule(self, view: ClusterView, queue: Collection[Job], now: float) -> list[Decision]:
        planner = Planner(view)
        for job in reversed(list(queue)):
            placement = planner.best_fit(job.spec) if planner.may_fit(job.spec) else None
            if placement is not None:
                return [Place(job.id, placement, "lifo: the newest job that fits")]
        return []
