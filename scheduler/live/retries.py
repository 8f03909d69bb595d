"""Retries: whether a run that exited non-zero runs again, and when. Ray's Jobs API has `max_retries`, Slurm
`--requeue`; here a job says how many times (`max_retries`), on which exit codes (`retry_on`; None: any), and the
first backoff (`retry_backoff_s`, doubled for each retry used before, so a job that fails at once does not spin).
A lost run (its node or controller gone) is no failure of the job's: the restart policy covers it
(`JobRow.max_restarts`), not this."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.reasons import Code, Reason

MAX_BACKOFF_S = 3600.0  # however many retries came before, a job waits at most this long for its next


def retry_delay(max_retries: int, retries: int, retry_on: Sequence[int] | None, backoff_s: float,
                exit_code: int) -> float | None:
    """Seconds until the next run of a job whose run just exited with `exit_code`, having used `retries` of its
    `max_retries`; None when it does not run again."""
    if retries >= max_retries:
        return None
    if retry_on is not None and exit_code not in retry_on:
        return None
    return min(MAX_BACKOFF_S, backoff_s * 2.0 ** retries)


def retry_reason(retries: int, max_retries: int, exit_code: int, delay_s: float) -> Reason:
    """The pending reason of a job waiting to run again (its `.text`, the event's words)."""
    return Reason(Code.RETRY_BACKOFF, {"exit_code": exit_code, "retry": retries, "max_retries": max_retries,
                                       "delay_s": delay_s})
