"""What an emulated worker writes to its log: a progress line when its rate changes and every 5% of progress, not one
per tick (issue 10 item 11)."""

from __future__ import annotations

import json
from pathlib import Path

from scheduler.live.worker import ProgressLog


def test_a_steady_run_logs_every_five_percent() -> None:
    log = ProgressLog()
    lines = [line for i in range(201) if (line := log.line(i / 200, 1.0))]  # 200 ticks of a steady worker
    assert 20 <= len(lines) <= 21  # (the worker ends its log with "done at 100.0%" itself)
    assert lines[0] == "progress   0.0% rate 1.000" and float(lines[-1].split()[1].rstrip("%")) >= 95


def test_a_rate_change_is_logged_at_once_with_the_old_rate() -> None:
    log = ProgressLog()
    assert log.line(0.10, 1.0) is not None
    assert log.line(0.11, 1.0) is None  # nothing new to say
    assert log.line(0.12, 0.625) == "progress  12.0% rate 0.625 (rate was 1.000)"  # a neighbour arrived
    assert log.line(0.13, 0.625) is None


def test_a_stale_attempt_never_overwrites_a_later_attempt_s_checkpoint(tmp_path: Path) -> None:
    """The fence for a worker cut off from the cluster while its run was requeued (issue 14): attempt 1 keeps
    checkpointing until attempt 2 writes one, then writes nothing more, and says so in its log once."""
    from scheduler.live.runs import Launch, RankSpec
    from scheduler.live.worker import Worker

    def worker(attempt: int) -> Worker:
        return Worker(Launch(7, attempt, "emulated", (RankSpec(0, "n0", (0,), 1.0, 80.0),), 10.0, 1.0,
                             str(tmp_path / f"logs-{attempt}"), str(tmp_path / "ckpt")), 0)

    ckpt = tmp_path / "ckpt" / "emulated.json"
    stale, fresh = worker(1), worker(2)
    stale.done_s = 3.0
    stale._write_checkpoint()
    assert json.loads(ckpt.read_text()) == {"done_s": 3.0, "attempt": 1}
    fresh.done_s = 4.0
    fresh._write_checkpoint()
    for done in (9.0, 10.0):  # the stale run goes on, even to its end
        stale.done_s = done
        stale._write_checkpoint()
    assert json.loads(ckpt.read_text()) == {"done_s": 4.0, "attempt": 2}
    assert (tmp_path / "logs-1" / "rank-0.log").read_text().count("is stale") == 1


def test_finished_answers_not_yet_after_its_timeout_then_the_end(tmp_path: Path) -> None:
    """`finished` holds one of the actor's few threads: it must give it back after its timeout (the backend asks
    again), and answer at once with the final status once the rank has ended."""
    import time

    from scheduler.live.runs import Launch, RankSpec
    from scheduler.live.worker import Worker

    w = Worker(Launch(3, 1, "emulated", (RankSpec(0, "n0", (0,), 1.0, 80.0),), 1.0, 1.0, str(tmp_path / "logs"),
                      str(tmp_path / "ckpt")), 0)
    t0 = time.monotonic()
    assert w.finished(timeout_s=0.1)["phase"] == "ready"
    assert 0.1 <= time.monotonic() - t0 < 5.0
    w._finish(0)
    t0 = time.monotonic()
    st = w.finished(timeout_s=30.0)
    assert st["phase"] == "exited" and st["exit_code"] == 0 and time.monotonic() - t0 < 1.0
