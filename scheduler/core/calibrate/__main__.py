"""`python -m scheduler.core.calibrate`: fit, validate and report (`scheduler.core.calibrate.reporting.main`)."""

from __future__ import annotations

from scheduler.core.calibrate.reporting import main

if __name__ == "__main__":
    raise SystemExit(main())
