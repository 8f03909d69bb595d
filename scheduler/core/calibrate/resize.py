"""The pauses of real resizes, timed on a GPU: the table the elastic model's resize cost is fitted from.

`benchmarks/gpu_resize.py` moves a training job between MPS shares the way Corral resizes one (SIGTERM, the checkpoint
in the grace period, the next run at the new size resuming from it) and times every part of each pause. `--ingest`
turns its output folder (`resize.csv`, `meta.json`) into the compact table the project keeps,
`scheduler/core/data/resize_pauses.csv`: one row per resize (a job's first start is not a resize and is left out),
with the GPU, driver, software, file system and command in its header, and each workload's memory footprint from the
Hopper profiles measured on the same GPU (`hopper_workloads.csv`), which the fit reads the checkpoint's cost against.
`scheduler.core.elastic.pause_fit` fits the model's pause from that table; without `--ingest` this prints the fit and,
per workload, the measured pauses beside the model's.

    python -m scheduler.core.calibrate.resize [--ingest DIR]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from scheduler.core.elastic import RESIZE_PAUSES_COLUMNS, RESIZE_PAUSES_PATH, measured_pauses, pause_fit

# The benchmark's columns the table keeps, besides the footprint it adds (RESIZE_PAUSES_COLUMNS names them all).
KEPT = [c for c in RESIZE_PAUSES_COLUMNS if c != "footprint_gb"]


def ingest(folder: Path | str) -> str:
    """The text of resize_pauses.csv from one `gpu_resize.py --out` folder. ValueError for a run that is not a real
    measurement (`--size tiny`, a CPU), a resize that failed, or a workload without a Hopper profile."""
    from scheduler.core.calibrate.hopper import hopper_profiles

    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    settings = meta.get("settings", {})
    if settings.get("size") != "full" or settings.get("device") != "cuda":
        raise ValueError(f"{folder}: size {settings.get('size')!r} on {settings.get('device')!r} is not a real "
                         "measurement (only --size full on cuda is kept)")
    footprints = {name: prof.mem_gb for name, prof in hopper_profiles().items()}
    rows = []
    with (folder / "resize.csv").open() as f:
        for r in csv.DictReader(f):
            if r["change"].startswith("start->"):
                continue  # a first start: no checkpoint saved or loaded, not a resize
            if r["error"]:
                raise ValueError(f"{folder}: {r['workload']} {r['change']} failed ({r['error']}): run it again")
            if r["workload"] not in footprints:
                raise ValueError(f"{r['workload']!r} has no Hopper profile (hopper_workloads.csv) to read its "
                                 "memory footprint from")
            rows.append({**{c: r[c] for c in KEPT}, "footprint_gb": footprints[r["workload"]]})
    out = io.StringIO()
    out.write("# Resizes of real training jobs timed by benchmarks/gpu_resize.py; derived by\n"
              "# `python -m scheduler.core.calibrate.resize --ingest DIR` (do not edit by hand).\n"
              "# A resize: SIGTERM, the checkpoint saved in the grace period, the next run at the new size (RxS: R\n"
              "# ranks at an MPS share of S% each, independent replicas on one GPU) resuming from it. Seconds:\n"
              "# save_s torch.save, load_s torch.load, pause_s SIGTERM to every new rank's first step done (the\n"
              "# whole time the job made no progress); ckpt_mb the checkpoint; footprint_gb the workload's memory\n"
              "# footprint from hopper_workloads.csv (measured on the same GPU). Run:\n"
              f"#   {meta.get('gpu')}, driver {meta.get('driver')}, CUDA {meta.get('cuda')}, PyTorch "
              f"{meta.get('torch')}, {meta.get('date_utc')}; checkpoints on {meta.get('checkpoint_fs')}\n"
              f"#   (page cache, no fsync); MPS: {meta.get('mps')}\n"
              f"#   command: {meta.get('command')}\n")
    w = csv.DictWriter(out, fieldnames=RESIZE_PAUSES_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def report() -> list[tuple[str, int, float, float, float]]:
    """Per workload: how many resizes, the median measured pause, the shortest, and the model's pause."""
    fit = pause_fit()
    pauses: dict[str, list[float]] = defaultdict(list)
    footprint: dict[str, float] = {}
    for r in measured_pauses():
        pauses[str(r["workload"])].append(float(r["pause_s"]))
        footprint[str(r["workload"])] = float(r["footprint_gb"])
    return [(name, len(ps), statistics.median(ps), min(ps), fit.pause_s(footprint[name])) for name, ps in pauses.items()]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ingest", metavar="DIR", help=f"a gpu_resize.py --out folder: rewrite {RESIZE_PAUSES_PATH.name}")
    args = p.parse_args(argv)
    if args.ingest:
        RESIZE_PAUSES_PATH.write_text(ingest(args.ingest))
        measured_pauses.cache_clear()
        pause_fit.cache_clear()
        print(f"wrote {RESIZE_PAUSES_PATH}")
    fit = pause_fit()
    print(f"pause = {fit.restart_s:.2f} s + {fit.checkpoint_s_per_gb:.3f} s per GB of the job's memory footprint "
          f"(from {fit.resizes} resizes)")
    print(f"{'workload':12} {'resizes':>7} {'median s':>9} {'shortest s':>10} {'model s':>8}")
    for name, n, median, fastest, model in report():
        print(f"{name:12} {n:7d} {median:9.2f} {fastest:10.2f} {model:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
