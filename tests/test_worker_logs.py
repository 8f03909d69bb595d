"""What an emulated worker writes to its log: a progress line when its rate changes and every 5% of progress, not one
per tick (issue 10 item 11)."""

from __future__ import annotations

from scheduler.live.ray_backend import ProgressLog


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
