"""Fit the workload catalog and the contention constants to published measurements, and validate the model.

    python -m scheduler.core.calibrate [--shared DIR] [--write]

reads the raw DeepShare (ICPADS'23) and Gavel (OSDI'20) artifacts in `../shared/calibration` (never copied into the
project), fits every profile parameter with `scipy.optimize.least_squares` (deterministic: fixed starting points, no
random restarts), prints a fit report, and with `--write` regenerates `scheduler/core/data/workloads.csv` with comment lines
citing the sources and how each column was derived.

This module prints that report (`report`) and is the command (`main`; `scheduler/core/calibrate/__main__.py` runs it).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from scheduler.core.calibrate.catalog import CATALOG_PATH, Calibration, calibrate, catalog_csv
from scheduler.core.calibrate.data import DEEPSHARE_MODELS, DEFAULT_SHARED, TESTBED_NOTES
from scheduler.core.calibrate.published import print_checks
from scheduler.core.calibrate.validate import Validation, holdout, validate_all
from scheduler.core.contention import ContentionParams
from scheduler.core.workloads import catalog


def _print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text
        print(f"\n{title}")
        print("  ".join(f"{h:>12}" for h in header))
        for r in rows:
            print("  ".join(f"{x!s:>12}" for x in r))
        return
    table = Table(title=title)
    for h in header:
        table.add_column(h)
    for r in rows:
        table.add_row(*(str(x) for x in r))
    Console().print(table)


def report(cal: Calibration, validations: Sequence[Validation], held: Sequence[Validation]) -> None:
    print("Testbeds assumed:")
    for note in TESTBED_NOTES:
        print(f"  - {note}")
    p = cal.params
    print(f"\nFitted ContentionParams: mps_overhead={p.mps_overhead} mps_interference={p.mps_interference} "
          f"ring_straggler={p.ring_straggler}")
    defaults = ContentionParams()
    if defaults != p:
        print(f"  NOTE: scheduler/core/contention.py defaults differ ({defaults}); update them to the fitted values.")
    net = cal.network
    _print_table("Network fit", ("model", "compute_ms", "grad_mb", "overlap"), [
        (m, f"{net.compute_s[k] * 1000:.4g}" if k < len(DEEPSHARE_MODELS) else "(measured)",
         f"{net.grad_gb[k] * 1024:.4g}", f"{net.overlap[k]:.3f}") for k, m in enumerate(net.models)])
    k18, k50 = net.models.index("ResNet-18"), net.models.index("ResNet-50")
    print(f"Sanity: fitted grad_mb vs fp32 parameters: ResNet-18 (CIFAR-10, 11.2M) {net.grad_gb[k18] * 1024:.0f} vs 43"
          f" MB, ResNet-50 (ImageNet, 25.6M) {net.grad_gb[k50] * 1024:.0f} vs 98 MB: the spread penalties pin the gradient"
          " to within a few x given the assumed 10 Gb/s network (ResNet-50's long compute hides most of its traffic).")
    _print_table("Validation with the contention model (shipped catalog and default ContentionParams)",
                 ("dataset", "points", "MAE", "Spearman", "basis"),
                 [(v.name, v.points, f"{v.mae:.3f}", f"{v.spearman:.2f}", v.basis) for v in validations])
    for v in validations:
        if "memory_accuracy" in v.extra:
            print(f"Memory rule (pair fits in 16 GB iff sum of mem_gb <= 16): accuracy {v.extra['memory_accuracy']:.3f}"
                  f" over {int(v.extra['memory_points'])} ordered pairs; {int(v.extra['nofit_points'])} did not fit,"
                  f" the rule flags {v.extra['nofit_recall']:.0%} of them")
    _print_table("Hold-out (refit without the scored points)", ("dataset", "points", "MAE", "Spearman", "basis"),
                 [(v.name, v.points, f"{v.mae:.3f}", f"{v.spearman:.2f}", v.basis) for v in held])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.core.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="directory with the raw measurements")
    parser.add_argument("--write", action="store_true", help="regenerate scheduler/core/data/workloads.csv")
    parser.add_argument("--no-holdout", action="store_true", help="skip the hold-out refits")
    parser.add_argument("--published", action="store_true",
                        help="only the published datacentre figures (Crux, CASSINI) against the fabric model")
    args = parser.parse_args(argv)
    if args.published:
        print_checks()
        return 0
    if not args.shared.is_dir():
        parser.error(f"{args.shared} is not a directory (expected the raw DeepShare and Gavel files)")
    cal = calibrate(args.shared)
    if args.write:
        CATALOG_PATH.write_text(catalog_csv(cal.profiles, cal.params))
        catalog.cache_clear()
        print(f"wrote {CATALOG_PATH} ({len(cal.profiles)} profiles)")
    # Validate what the simulator will use: the written catalog, or the fresh fit when not written.
    profiles = catalog() if args.write else cal.profiles
    validations = validate_all(args.shared, profiles, replace(cal.params))
    held = [] if args.no_holdout else holdout(args.shared)
    report(cal, validations, held)
    return 0
