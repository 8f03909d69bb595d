"""Numbers as `corral` prints them in tables (`scheduler.cli.tables`): a row of durations in one unit, counts that
average to fractions without a decimal where they are whole."""

from __future__ import annotations

import math

from click.testing import CliRunner

from scheduler.cli.commands import main
from scheduler.cli.tables import duration_unit, format_duration, table_cell


def test_a_duration_alone_takes_the_unit_that_reads_best() -> None:
    assert [format_duration(s) for s in (59.4, 119, 120, 7199, 7200, 172799, 172800)] == [
        "59s", "119s", "2.0m", "120.0m", "2.00h", "48.00h", "2.00d"]
    assert format_duration(math.inf) == "-" and format_duration(math.nan) == "-"


def test_a_row_of_durations_is_written_in_its_largest_value_s_unit() -> None:
    row = [7308.0, 6468.0, math.nan]  # alone: 2.03h and 107.8m, the smaller looking larger
    unit = duration_unit(row)
    assert unit == "h"
    assert [format_duration(s, unit) for s in row] == ["2.03h", "1.80h", "-"]
    assert duration_unit([30.0, 90.0]) == "s" and duration_unit([]) == "s"
    assert table_cell(1800.0, "dur", "h") == "0.50h"


def test_a_count_that_averages_to_a_whole_number_has_no_decimal() -> None:
    assert [table_cell(v, "count") for v in (300.0, 299.5, 0.0)] == ["300", "299.5", "0"]
    assert table_cell(3, "{:d}") == "3" and table_cell(0.123, "{:.1%}") == "12.3%"


DURATION_ROWS = ("avg JCT", "p50 JCT", "p95 JCT", "p99 JCT", "avg queue", "makespan")


def test_corral_simulate_writes_each_row_of_durations_in_one_unit() -> None:
    result = CliRunner().invoke(main, ["simulate", "--trace", "synthetic:200,iat=300", "--cluster", "dgx-a100:2",
                                       "--policy", "fifo,tiresias", "--seed", "0"])
    assert result.exit_code == 0, result.output
    rows = {cells[0]: cells[1:] for line in result.output.splitlines()
            if len(cells := [c.strip() for c in line.strip("│ ").split("│")]) == 3}
    assert set(DURATION_ROWS) <= set(rows)
    for name in DURATION_ROWS:
        units = {cell[-1] for cell in rows[name] if cell != "-"}
        assert len(units) == 1, f"{name}: {rows[name]}"
