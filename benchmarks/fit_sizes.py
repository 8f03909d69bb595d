"""Fit the job-size distribution the `gittins` policy ships with: `policies/data/size_distribution.json`.

    python benchmarks/fit_sizes.py [--synthetic 3000] [--seed 0] [--out policies/data/size_distribution.json]

Samples are jobs' total service in GPU-seconds (isolated duration x GPUs) by GPU class, from the FIRST THREE QUARTERS
ONLY (`scheduler.core.traces.HOLDOUT_FROM`: the part training and tuning may see; evaluations hold out the rest) of

* the Microsoft Philly trace, day-60 slice (`../shared/traces/philly_day60.csv`; ATC'19, CC BY 4.0),
* the Alibaba GPU-sharing trace v2023, pods created before day 130 (`../shared/traces/alibaba_openb_before_day130.csv`;
  ATC'23),

plus a synthetic workload (`scheduler.core.traces.synthetic`, whose draws training also uses). The traces are read in
place, never copied; the JSON keeps only quantile tables and says where they came from.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policies.gittins import CLASS_LABELS, CLASSES, DEFAULT_PATH, SizeDistribution, size_class
from scheduler.core.model import JobSpec
from scheduler.core.traces import HOLDOUT_FROM, load_trace, synthetic

TRACES = (
    ("philly_day60.csv", "Microsoft Philly job-level trace, day-60 slice (ATC'19, CC BY 4.0)"),
    ("alibaba_openb_before_day130.csv",
     "Alibaba GPU-sharing cluster trace v2023, pods created before day 130 (ATC'23)"),
)


def training_part(jobs: list[JobSpec]) -> list[JobSpec]:
    """The jobs before the hold-out: the ones `window_starts(..., "train")` windows are drawn from."""
    return jobs[: int(len(jobs) * HOLDOUT_FROM)]


def fit(traces_dir: Path, synthetic_jobs: int, seed: int) -> SizeDistribution:
    jobs: list[JobSpec] = []
    sources: list[dict[str, object]] = []
    for name, what in TRACES:
        path = traces_dir / name
        if not path.is_file():
            raise SystemExit(f"{path} not found: the shared traces must sit beside the project (../shared/traces)")
        everything = load_trace(str(path), seed=seed).jobs
        part = training_part(everything)
        jobs += part
        sources.append({"trace": f"../shared/traces/{name}", "description": what, "jobs_used": len(part),
                        "jobs_loaded": len(everything), "part": f"first {HOLDOUT_FROM:g} (before the hold-out)"})
    if synthetic_jobs:
        syn = synthetic(synthetic_jobs, seed=seed).jobs
        jobs += syn
        sources.append({"synthetic": f"scheduler.core.traces.synthetic({synthetic_jobs}, seed={seed})",
                        "jobs_used": len(syn)})
    return SizeDistribution.from_jobs(jobs, sources=sources)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--synthetic", type=int, default=3000, help="synthetic jobs added to the traces' samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_PATH)
    args = ap.parse_args()
    dist = fit(args.traces, args.synthetic, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    dist.save(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.1f} KB)")
    probe = {"frac": 0.5, "1": 1, "2-4": 4, "5-8": 8, "9+": 16}
    for c in CLASSES:
        info = dist.classes[c]
        spec = JobSpec(name="probe", submit_s=0.0, num_gpus=probe[c], duration_s=1.0, model="")
        assert size_class(spec) == c
        tab = dist.table(dist.table_key(spec))
        print(f"  {CLASS_LABELS[c]:>22}: {info.samples:5d} samples{' (pooled)' if info.fallback else ''}, median "
              f"{tab.t[len(tab.t) // 2]:.4g} GPU-s, E[S] {dist.expected_remaining(0.0, spec):.4g} GPU-s, "
              f"rank at 0 {1 / dist.index(0.0, spec):.4g} GPU-s")


if __name__ == "__main__":
    main()
