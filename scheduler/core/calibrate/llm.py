"""LLM-scale training steps measured on an H100, as the table the catalog's LLM profiles are derived from.

`benchmarks/gpu_llm_profiles.py` trains GPT-1.3B, GPT-2.7B and BERT-large as data-parallel workers would (bf16
autocast, fused AdamW, flash attention) and writes `llm_profiles.json`. `--ingest` turns one or more such files (runs)
into the compact table the project keeps, `scheduler/core/data/llm_steps.csv`, one row per run and model, with the GPU,
driver and software in its header; `scheduler.core.workloads.llm_profiles` derives the catalog's profiles from it.

    python -m scheduler.core.calibrate.llm [--ingest DIR_OR_JSON ...]

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

from scheduler.core.workloads import LLM_MODELS, LLM_STEPS_COLUMNS, LLM_STEPS_PATH, llm_profiles


def _load(path: Path) -> dict:
    file = path / "llm_profiles.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no llm_profiles.json (benchmarks/gpu_llm_profiles.py --out writes it)")
    data = json.loads(file.read_text())
    if data.get("size") != "full":
        raise ValueError(f"{file}: size {data.get('size')!r} is not a real measurement (only --size full is kept)")
    return data


def ingest(runs: Sequence[Path | str]) -> str:
    """The text of llm_steps.csv from the benchmark's output files or folders (run k is the k-th given)."""
    loaded = [_load(Path(r)) for r in runs]
    out = io.StringIO()
    out.write("# LLM-scale training steps measured on one GPU by benchmarks/gpu_llm_profiles.py; derived by\n"
              "# `python -m scheduler.core.calibrate.llm --ingest DIR ...` (do not edit by hand).\n"
              "# step_ms, forward_ms, backward_ms, optimizer_ms: medians over the timed steps (CUDA events);\n"
              "# peak_mem_gib: torch.cuda.max_memory_allocated; gpu_busy, mem_busy: NVML utilization.gpu and\n"
              "# utilization.memory over the timed steps (fractions). Runs:\n")
    for k, data in enumerate(loaded, 1):
        env = data["environment"]
        out.write(f"#   run {k}: {env.get('gpu')}, driver {env.get('driver')}, CUDA {env.get('cuda')}, PyTorch "
                  f"{env.get('torch')}, {env.get('date')}, {data['warmup']} warm-up + {data['steps']} timed steps\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(LLM_STEPS_COLUMNS)
    for k, data in enumerate(loaded, 1):
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
    args = p.parse_args(argv)
    if args.ingest:
        LLM_STEPS_PATH.write_text(ingest(args.ingest))
        llm_profiles.cache_clear()
        print(f"wrote {LLM_STEPS_PATH}")
    from scheduler.core.calibrate.published import crux_pair

    print(f"{'model':11} {'V100 ms':>8} {'sm':>5} {'membw':>6} {'mem GB':>7} {'grad MB':>8} {'overlap':>7}")
    for prof in llm_profiles().values():
        print(f"{prof.name:11} {prof.compute_ms:8.1f} {prof.sm:5.2f} {prof.membw:6.2f} {prof.mem_gb:7.1f} "
              f"{prof.grad_mb:8.0f} {prof.overlap:7.3f}")
    pair = crux_pair()
    print(f"Crux's pair with these profiles: GPT {pair.gpt_expected:.3f} (expected) / {pair.gpt_hashed:.3f} (hashed), "
          f"BERT {pair.bert_expected:.3f} / {pair.bert_hashed:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
