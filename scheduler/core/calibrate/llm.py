"""LLM-scale training steps measured on an H100 and an H200: the table the catalog's LLM profiles are derived from.

`benchmarks/gpu_llm_profiles.py` trains GPT-1.3B, GPT-2.7B and BERT-large as data-parallel workers would (bf16
autocast, fused AdamW, flash attention) and writes `llm_profiles.json`. `--ingest` turns one or more such files (runs)
into the compact table the project keeps, `scheduler/core/data/llm_steps.csv`, one row per run and model, with the GPU,
driver and software in its header; `scheduler.core.workloads.llm_profiles` derives the catalog's profiles from the
H100's runs, and `llm_speedup` the H200's speed from its runs (`--append` adds runs to the table instead of replacing it).

    python -m scheduler.core.calibrate.llm [--ingest DIR_OR_JSON ... [--append]]

Without `--ingest` it prints the table's profiles and what they change in the published Crux figure
(`scheduler.core.calibrate.published`).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path

from scheduler.core.model import GPU_TYPES
from scheduler.core.workloads import (
    LLM_MODELS,
    LLM_STEPS_COLUMNS,
    LLM_STEPS_PATH,
    MEASURED_GPUS,
    PROFILE_GPU,
    llm_profiles,
    llm_speedup,
    llm_steps_by_gpu,
)


def _load(path: Path) -> dict:
    file = path / "llm_profiles.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no llm_profiles.json (benchmarks/gpu_llm_profiles.py --out writes it)")
    data = json.loads(file.read_text())
    if data.get("size") != "full":
        raise ValueError(f"{file}: size {data.get('size')!r} is not a real measurement (only --size full is kept)")
    return data


def ingest(runs: Sequence[Path | str], keep: str = "") -> str:
    """The text of llm_steps.csv from the benchmark's output files or folders, after the runs of `keep` (a table this
    function wrote) when given: run k is the k-th, counting kept runs first."""
    loaded = [_load(Path(r)) for r in runs]
    kept_runs = [ln for ln in keep.splitlines() if ln.startswith("#   run ")]
    kept_rows = list(csv.DictReader(ln for ln in keep.splitlines() if ln and not ln.startswith("#")))
    if {int(r["run"]) for r in kept_rows} != set(range(1, len(kept_runs) + 1)):
        raise ValueError("the table to keep is not one this command wrote: its runs are not numbered 1 to "
                         f"{len(kept_runs)}")
    out = io.StringIO()
    out.write("# LLM-scale training steps measured on one GPU by benchmarks/gpu_llm_profiles.py; derived by\n"
              "# `python -m scheduler.core.calibrate.llm --ingest DIR ...` (do not edit by hand).\n"
              "# step_ms, forward_ms, backward_ms, optimizer_ms: medians over the timed steps (CUDA events);\n"
              "# peak_mem_gib: torch.cuda.max_memory_allocated; gpu_busy, mem_busy: NVML utilization.gpu and\n"
              "# utilization.memory over the timed steps (fractions). Runs:\n")
    for line in kept_runs:
        out.write(line + "\n")
    first = len(kept_runs) + 1
    for k, data in enumerate(loaded, first):
        env = data["environment"]
        out.write(f"#   run {k}: {env.get('gpu')}, driver {env.get('driver')}, CUDA {env.get('cuda')}, PyTorch "
                  f"{env.get('torch')}, {env.get('date')}, {data['warmup']} warm-up + {data['steps']} timed steps\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(LLM_STEPS_COLUMNS)
    for row in kept_rows:
        w.writerow([row[c] for c in LLM_STEPS_COLUMNS])
    for k, data in enumerate(loaded, first):
        gpu = data["environment"].get("gpu", "")
        for m in data["models"]:
            if m["name"] not in LLM_MODELS:
                raise ValueError(f"{m['name']!r}: not one of the catalog's LLM models ({', '.join(LLM_MODELS)})")
            w.writerow([k, gpu, m["name"], m["params"], m["batch"], m["seq"], round(m["step_ms"], 2),
                        round(m["forward_ms"], 2), round(m["backward_ms"], 2), round(m["optimizer_ms"], 2),
                        round(m["model_tflops"], 1), round(m["peak_mem_gib"], 2), round(m["gpu_busy"], 3),
                        round(m["mem_busy"], 3)])
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ingest", nargs="+", metavar="DIR_OR_JSON",
                   help=f"gpu_llm_profiles.py outputs: rewrite {LLM_STEPS_PATH.name} from them")
    p.add_argument("--append", action="store_true", help=f"with --ingest: keep {LLM_STEPS_PATH.name}'s runs, add these")
    args = p.parse_args(argv)
    if args.append and not args.ingest:
        p.error("--append: nothing to append without --ingest")
    if args.ingest:
        LLM_STEPS_PATH.write_text(ingest(args.ingest, LLM_STEPS_PATH.read_text() if args.append else ""))
        llm_profiles.cache_clear()
        print(f"wrote {LLM_STEPS_PATH}")
    from scheduler.core.calibrate.published import crux_pair

    print(f"{'model':11} {'V100 ms':>8} {'sm':>5} {'membw':>6} {'mem GB':>7} {'grad MB':>8} {'overlap':>7}")
    for prof in llm_profiles().values():
        print(f"{prof.name:11} {prof.compute_ms:8.1f} {prof.sm:5.2f} {prof.membw:6.2f} {prof.mem_gb:7.1f} "
              f"{prof.grad_mb:8.0f} {prof.overlap:7.3f}")
    for gpu in sorted(set(llm_steps_by_gpu(LLM_STEPS_PATH)) - {PROFILE_GPU}):
        name = MEASURED_GPUS[gpu]
        up = llm_speedup(gpu)
        print(f"{gpu}: {up:.3f}x the {PROFILE_GPU}'s speed: a V100 speed of "
              f"{GPU_TYPES[MEASURED_GPUS[PROFILE_GPU]].speed * up:.2f} (GPU_TYPES states {GPU_TYPES[name].speed:g})")
    pair = crux_pair()
    print(f"Crux's pair with these profiles: GPT {pair.gpt_expected:.3f} (expected) / {pair.gpt_hashed:.3f} (hashed), "
          f"BERT {pair.bert_expected:.3f} / {pair.bert_hashed:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
