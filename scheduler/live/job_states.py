"""A live job's state, kind and restart policy: plain enums shared by the store, the API and the command line. They
live apart from the store's tables so that the HTTP client commands can use them without importing SQLAlchemy."""

from __future__ import annotations

from enum import StrEnum

from scheduler.core.dependencies import Outcome


class JobState(StrEnum):
    """A live job's state, as the API reports it (the model's `scheduler.core.model.JobPhase` has no failures)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"  # its run reached its time limit: stopped (SIGTERM, the grace period, SIGKILL)

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT)


def outcome(state: str) -> Outcome | None:
    """How a job in `state` ended, as dependencies count it (`scheduler.core.dependencies`): succeeded, or not (failed,
    timed out, cancelled); None while it is pending or running."""
    if state in (JobState.PENDING, JobState.RUNNING):
        return None
    return Outcome.SUCCEEDED if state == JobState.SUCCEEDED else Outcome.FAILED


class JobType(StrEnum):
    EMULATED = "emulated"  # runs for the time the contention model predicts for its placement (demos, tests)
    COMMAND = "command"  # a real entrypoint, run by a shell


# A submission that names no kind: the API's default, the CLI's and the docs' (no GPU, no command: safe for anyone).
DEFAULT_JOB_KIND = JobType.EMULATED


class RestartPolicy(StrEnum):
    REQUEUE = "requeue"  # a lost or preempted run goes back to the queue (up to max_restarts losses)
    FAIL = "fail"  # a lost run fails the job
