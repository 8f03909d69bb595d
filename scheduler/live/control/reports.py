"""What the workers did, and the limits on runs: workers up (the run starts counting), exits (success, failure, a
retry), losses, a run past its time limit, a run whose workers never came up. Each end goes through the life cycle."""

from __future__ import annotations

import logging

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from scheduler.core.generic import MeasuredUsage, merged
from scheduler.core.reasons import Code, Reason
from scheduler.live import metrics
from scheduler.live.control.health import SUSPECT_S, NodeHealth
from scheduler.live.control.memory import Memory
from scheduler.live.control.workers import Workers
from scheduler.live.environments import PREPARE_TIMEOUT_S
from scheduler.live.lifecycle import LifeCycle
from scheduler.live.retries import retry_delay, retry_reason
from scheduler.live.runs import JobStatus
from scheduler.live.store import queries
from scheduler.live.store.models import Job as JobRow
from scheduler.live.store.models import JobState as S
from scheduler.live.store.models import JobType
from scheduler.live.worker import STOP_GRACE_S

log = logging.getLogger("scheduler.live.controller")

_JOBS_BY_ID = select(JobRow).where(JobRow.id.in_(bindparam("ids", expanding=True)))


class Reports:
    def __init__(self, memory: Memory, lifecycle: LifeCycle, workers: Workers, health: NodeHealth) -> None:
        self.m = memory
        self.lifecycle = lifecycle
        self.workers = workers
        self.health = health  # (which holds `corral serve --start-timeout`, for the start strikes too)

    def collect(self, s: Session, statuses: list[JobStatus], now: float) -> int:
        """Take in what the workers reported; returns the runs that ended. A status the backend repeats unchanged (no
        worker answered since) was taken in already: skipped, so a settled pass writes no row."""
        m = self.m
        current = [st for st in statuses if st.job_id in m.running and st.attempt == m.attempt.get(st.job_id)
                   and m.reported.get(st.job_id) != st]
        # One query for every run's row (not one `get` each, which autoflushes the previous row's progress first).
        rows = {r.id: r for r in s.scalars(_JOBS_BY_ID, {"ids": [st.job_id for st in current]})} if current else {}
        ended = 0
        for st in current:
            job = m.running[st.job_id]
            row = rows.get(st.job_id)
            if row is None:
                continue
            if row.duration_s > 0 and row.kind == "emulated":
                row.work_done_s = st.done_s
                row.progress = min(1.0, st.done_s / row.duration_s)
            if st.phase in ("running", "succeeded", "failed") and row.started_at is None:
                started = [t for t in st.started_at if t is not None]
                row.started_at = min(started) if started else now
                if row.first_started_at is None:
                    row.first_started_at = row.started_at
                if job.resized_s is None:  # (a resized run goes on: its time limit counts from its first workers)
                    job.start_s = row.started_at
                m.started[row.id] = True
                m.slowdowns.started(row.id, row.started_at)
                if st.prepared_s is not None:  # its environment's preparation: before its start, not run time
                    queries.add_event(s, row.id, "prepared", f"environment prepared in {st.prepared_s:.1f} s "
                                      "(not run time; its log opens the job's)", at=row.started_at,
                                      attempt=st.attempt, preparing_s=round(st.prepared_s, 3))
                queries.add_event(s, row.id, "started", f"{len(started)} worker(s) started", at=row.started_at,
                                  attempt=st.attempt, ranks_started_at=st.started_at)
            m.reported[st.job_id] = st
            if st.usage is not None:  # an ended command run NVML measured: the job's own runs, merged
                own = merged([MeasuredUsage.from_dict(row.measured_usage), MeasuredUsage.from_dict(st.usage)])
                row.measured_usage = own.as_dict() if own is not None else None
            if st.phase == "succeeded":
                self.finish(s, row, S.SUCCEEDED, 0, None, now, st.ended_at)
                ended += 1
            elif st.phase == "failed":
                code = next((c for c in st.exit_codes if c not in (None, 0)), 1)
                delay = None if row.cancel_requested else retry_delay(
                    row.max_retries, row.retries, row.retry_on, row.retry_backoff_s, code)
                if delay is not None:
                    self.retry(s, row, code, st.error, delay, now, st.ended_at)
                else:
                    why = Reason(Code.EXIT_CODE, {"exit_code": code, "error": st.error or None, "retries": row.retries})
                    self.finish(s, row, S.FAILED, code, why, now, st.ended_at)
                ended += 1
            elif st.phase == "lost":
                self.health.suspect_nodes(job, now)
                self.workers.stop(row.id)
                self.lifecycle.lose(s, row, st.error or "its workers were lost", now)
                ended += 1
        return ended

    def finish(self, s: Session, row: JobRow, state: S, code: int, why: Reason | None, now: float,
               ranks_ended_at: list[float | None]) -> None:
        """The run ended: `why` is a failed job's reason (the worker's error, or at least its exit code: users read it
        in `corral jobs`), None for a success."""
        self.workers.forget(row.id)
        self.lifecycle.to_terminal(s, row, state, now, event=str(state),
                                   message=why.text if why else f"exit code {code}", why=why, exit_code=code,
                                   attempt=row.attempt, ranks_ended_at=ranks_ended_at)
        if state is S.SUCCEEDED:
            row.progress = 1.0
            # Only an emulated job's duration_s is its isolated run time; a command job's is the user's estimate, and
            # "1 s over an estimate of 10 s" is no slowdown (calibration infers theirs from the predictions instead).
            if row.run_s > 0 and row.kind == JobType.EMULATED:
                row.observed_slowdown = row.run_s / row.duration_s
                metrics.OBSERVED_SLOWDOWN.observe(row.observed_slowdown)

    def retry(self, s: Session, row: JobRow, code: int, error: str, delay: float, now: float,
              ranks_ended_at: list[float | None]) -> None:
        """A run that exited non-zero, of a job with retries left for its exit code: the job goes back to the queue in
        its old place, held there for its backoff (`scheduler.live.retries`)."""
        self.workers.forget(row.id)
        row.retries += 1
        row.exit_code, row.not_before = code, now + delay
        why = retry_reason(row.retries, row.max_retries, code, delay)
        self.lifecycle.to_pending(s, row, now, event="retrying", message=f"{error}; {why.text}" if error else why.text,
                                  reason=why, attempt=row.attempt, exit_code=code, ranks_ended_at=ranks_ended_at)
        self.m.gates.backoff[row.id] = now + delay

    def enforce_time_limits(self, s: Session, now: float) -> None:
        """Stop every run that has reached its job's time limit, counted from when its workers started: SIGTERM, the
        stop's grace period, then SIGKILL (the backend's stop), and the job ends `timed_out` with that reason. Checked
        at every pass, so a run overstays its limit by at most a tick."""
        for job_id, job in list(self.m.running.items()):
            limit = job.spec.time_limit_s
            if limit is None or job.start_s is None or not self.m.started.get(job_id) or now < job.start_s + limit:
                continue
            row = s.get(JobRow, job_id)
            assert row is not None
            ran = now - job.start_s
            self.workers.stop(job_id)
            why = Reason(Code.TIME_LIMIT, {"limit_s": limit, "ran_s": ran, "grace_s": STOP_GRACE_S})
            self.lifecycle.to_terminal(s, row, S.TIMED_OUT, now, event="timed_out", why=why, attempt=row.attempt,
                                       time_limit_s=limit)
            log.info("job %d: %s", job_id, why.text)

    def enforce_start_deadline(self, s: Session, now: float) -> None:
        """Take back every run whose workers are not all up `start_timeout_s` after it was placed: Ray could not start
        them (something Corral does not know of holds the GPU's Ray resource, or the node hangs), and the job would
        otherwise show `running` forever with no process, while the loop polls at its starting tick. Its
        workers are stopped, its nodes held out for SUSPECT_S (as after a lost run), and it is requeued in its old
        place without spending a restart: it never ran, and the fault is not the job's."""
        timeout = self.health.start_timeout_s
        for job_id, job in list(self.m.running.items()):
            placed = job.sized_since  # (a resized run's workers were placed at its resize)
            if self.m.started.get(job_id) or placed is None or now < placed + timeout:
                continue
            row = s.get(JobRow, job_id)
            assert row is not None
            if row.environment and now < placed + timeout + PREPARE_TIMEOUT_S:  # its environment is being built
                continue
            assert job.placement is not None
            nodes = ", ".join(self.health.nodes.node_names[i] for i in job.placement.nodes(self.health.nodes.cluster))
            why = Reason(Code.NOT_STARTED, {"timeout_s": timeout, "nodes": nodes})
            self.workers.stop(job_id)
            self.health.suspect_nodes(job, now, f"did not start within {timeout:g} s")
            status = self.m.reported.get(job.id)
            self.health.strike(s, job, tuple(status.up) if status is not None else (), now)
            self.lifecycle.to_pending(s, row, now, event="evicted", reason=why, attempt=row.attempt)
            log.warning("job %d: %s; %s held out for %g s", job_id, why.text, nodes, SUSPECT_S)
