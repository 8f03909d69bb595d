"""`corral accounting`: GPU-hours, ended jobs, waits and JCTs over a period per user, team or day, as `sacct` and
`sreport` give them (`GET /accounting`), as a table, JSON or CSV."""

from __future__ import annotations

import re
import sys
import time
from datetime import UTC, datetime

import click
from rich.table import Table

import corral.models as m
from scheduler.cli.client_io import api_errors, client, connection, console, print_json
from scheduler.cli.tables import duration_unit, format_duration
from scheduler.live.accounting_table import GROUPS, as_csv

AGO = re.compile(r"(\d+(?:\.\d+)?)([dhm])")
UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0}


def when(text: str | None, option: str, now: float) -> float | None:
    """A period's edge: a UTC date (YYYY-MM-DD), a date and time (YYYY-MM-DDTHH:MM), or how long ago (7d, 12h, 30m);
    a usage error naming the option otherwise."""
    if text is None:
        return None
    if ago := AGO.fullmatch(text.strip()):
        return now - float(ago.group(1)) * UNIT_S[ago.group(2)]
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    raise click.BadParameter(f"{text!r}: a UTC date (2026-01-31), a date and time (2026-01-31T08:00) or how long ago "
                             "(7d, 12h, 30m)", param_hint=option)


@click.command()
@click.option("--since", help="Where the period starts: a UTC date, a date and time, or how long ago (7d, 12h) "
              "[default: 30 days before --until].")
@click.option("--until", help="Where it ends, as --since [default: now].")
@click.option("--by", type=click.Choice(GROUPS), default="user", show_default=True, help="A row per user, team or "
              "UTC day.")
@click.option("--csv", "as_csv_", is_flag=True, help="CSV on stdout (the rows, then the total).")
@click.option("--json", "as_json", is_flag=True)
@connection
def accounting(since: str | None, until: str | None, by: str, as_csv_: bool, as_json: bool, url: str,
               token: str | None) -> None:
    """GPU-hours, ended jobs, waits and JCTs over a period, per user, team or day (an admin sees every job; anyone
    else their own and their team's)."""
    now = time.time()
    with api_errors():
        report = client(url, token).accounting(since=when(since, "--since", now), until=when(until, "--until", now),
                                               by=by)
    if as_json:
        print_json(report)
        return
    if as_csv_:
        sys.stdout.write(as_csv(report.to_json()))  # the server's own CSV columns (GET /accounting.csv)
        return
    total = report.total or m.AccountingRow(key="total")
    rows = [*(report.rows or []), total]

    def day(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")

    table = Table(title=f"{day(report.since or 0)} to {day(report.until or now)} UTC, by {by}", box=None,
                  header_style="bold", title_justify="left")
    for col in (by, "GPU-h", "idle GPU-h", "ended", "ok", "failed", "cancelled", "timed out", "started",
                "wait p50", "wait p95", "JCT p50", "JCT p95", "preempted"):
        table.add_column(col, justify="left" if col == by else "right")
    times = {k: [getattr(r, k) for r in rows] for k in ("wait_p50_s", "wait_p95_s", "jct_p50_s", "jct_p95_s")}
    units = {k: duration_unit(v for v in values if v is not None) for k, values in times.items()}
    for i, r in enumerate(rows):
        table.add_row(
            r.key, f"{r.gpu_hours or 0:.2f}", f"{r.idle_gpu_hours or 0:.2f}", str(r.jobs_ended), str(r.jobs_succeeded),
            str(r.jobs_failed), str(r.jobs_cancelled), str(r.jobs_timed_out), str(r.jobs_started),
            *(format_duration(v[i], units[k]) if v[i] is not None else "-" for k, v in times.items()),
            str(r.preemptions), style="bold" if r is total else None)
    console().print(table)


ACCOUNTING_COMMANDS = [accounting]
