"""Catalog assembly: the fitted parameters as the workload catalog and the contention constants.

`calibrate` runs the fits and turns them (plus the estimates no measurement constrains, reasoned below) into
`ModelProfile`s and `ContentionParams`; `catalog_csv` writes them as the text of `scheduler/core/data/workloads.csv`,
with comment lines citing the sources and how each column was derived.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scheduler.core.calibrate.data import (
    DEEPSHARE_MODELS,
    DEEPSHARE_SRC,
    GAVEL_SRC,
    gavel_family,
    load_deepshare,
    load_gavel,
)
from scheduler.core.calibrate.fit import NetworkFit, SharingFit, fit_memory, fit_network, fit_sharing
from scheduler.core.contention import ContentionParams
from scheduler.core.model import JobKind
from scheduler.core.workloads import ModelProfile

CATALOG_PATH = Path(__file__).resolve().parents[1] / "data" / "workloads.csv"

# Profiles not constrained by any measurement here, with the reasoning (marked "estimate" in the catalog's source).
_GAVEL_ONLY_1GPU = {
    # name prefix: (grad_mb, overlap, why)
    "A3C": (3.0, 0.5, "grad from a ~0.8M-parameter Atari conv+LSTM net"),
    "Recommendation": (100.0, 0.3, "grad from a ~26M-parameter autoencoder over ML-20M items"),
    "CycleGAN": (108.0, 0.5, "grad from ~28M parameters (2 ResNet generators + 2 PatchGAN discriminators)"),
}
# DeepShare models have no co-location data: SM / bandwidth demands are taken from the fitted Gavel type closest in
# kind, memory from model size and batch.
_DEEPSHARE_ANALOGUE = {
    "MobileNetV3": ("ResNet-18-bs32", 1.5, "small CNN, batch 16: ~1.5 GB"),
    "GraphSage": ("Recommendation-bs512", 2.5, "sampled mini-batches of 1024 nodes: ~2.5 GB"),
    "FSDP": ("Transformer-bs64", 8.0, "fp16 sharded LM, batch 8: ~8 GB"),
    "Transformer-XL": ("Transformer-bs128", 12.0, "36 layers, d_model 410, batch 16 x 150 tokens: ~12 GB"),
    "DLRM": ("Recommendation-bs2048", 5.0, "Criteo Kaggle embeddings (~2.2 GB fp32) replicated by DDP: ~5 GB"),
    "MoE": ("Transformer-bs128", 10.0, "10-layer MoE LM, batch 8: ~10 GB"),
}
_INFERENCE = (
    # name, latency_ms (= compute_ms), slo_ms, Gavel type whose fitted sm/membw it takes, mem_gb, source.
    # SM / bandwidth demands are on the scale the co-location fit sets (with mps_interference), so they are copied
    # from the fitted type of the same architecture at its smallest batch rather than guessed in absolute terms.
    ("ResNet-50-serve", 7.0, 15.0, "ResNet-50-bs16", 2.0,
     ("estimate: batch-1 FP32 ResNet-50 on a V100 ~7 ms; SLO = MLPerf Inference server bound for ResNet-50 "
      "(15 ms); sm/membw as Gavel ResNet-50-bs16")),
    ("BERT-base-serve", 6.0, 50.0, "Transformer-bs16", 2.0,
     ("estimate: batch-1 BERT-base seq 128 on a V100 ~6 ms; SLO 50 ms (interactive NLP target; MLPerf BERT-large: "
      "130 ms); sm/membw as Gavel Transformer-bs16")),
    ("LLaMA-7B-serve", 20.0, 100.0, "LM-bs5", 15.0,
     ("estimate: per output token, 13.5 GB of FP16 weights read at ~900 GB/s = 15 ms + overhead; SLO 100 ms/token "
      "(MLPerf Llama-2-70B server: 200 ms); 15 GB with KV cache; sm/membw as Gavel LM-bs5 (small-batch decoding)")),
)


@dataclass
class Calibration:
    profiles: dict[str, ModelProfile]
    params: ContentionParams
    network: NetworkFit
    sharing: SharingFit
    memory: dict[str, float]


def _sig(x: float, digits: int = 4) -> float:
    """Round to `digits` significant digits; values within 1e-4 of zero (at a bound of the fit) become 0."""
    if abs(x) < 1e-4 or not math.isfinite(x):
        return 0.0 if math.isfinite(x) else x
    return float(f"{x:.{digits}g}")


def calibrate(shared: Path | str | None = None) -> Calibration:
    ds, gv = load_deepshare(shared), load_gavel(shared)
    net = fit_network(ds, gv)
    share = fit_sharing(gv)
    mem = fit_memory(gv)
    params = ContentionParams(
        mps_overhead=_sig(share.mps_overhead, 3), mps_interference=_sig(share.mps_interference, 3),
        ring_straggler=_sig(net.ring_straggler, 3),
    )
    idx = {m: k for k, m in enumerate(net.models)}
    sm = dict(zip(share.types, share.sm, strict=False))
    bw = dict(zip(share.types, share.membw, strict=False))
    profiles: dict[str, ModelProfile] = {}
    for m in DEEPSHARE_MODELS:
        k = idx[m]
        analogue, mem_gb, why = _DEEPSHARE_ANALOGUE[m]
        profiles[m] = ModelProfile(
            name=m, kind=JobKind.TRAINING, compute_ms=_sig(net.compute_s[k] * 1000), sm=_sig(sm[analogue], 3),
            membw=_sig(bw[analogue], 3), mem_gb=mem_gb, grad_mb=_sig(net.grad_gb[k] * 1024),
            overlap=_sig(net.overlap[k], 3),
            source=f"DeepShare fit (compute, grad, overlap); sm/membw as Gavel {analogue}; mem estimate ({why})",
        )
    for t in gv.types:
        fam = gavel_family(t)
        if fam in idx:
            grad, ov = net.grad_gb[idx[fam]] * 1024, net.overlap[idx[fam]]
            src = f"Gavel fit (compute, sm, membw, mem; grad/overlap fitted for the {fam} family)"
        else:
            grad, ov, why = _GAVEL_ONLY_1GPU[fam]
            src = f"Gavel fit (compute, sm, membw, mem); grad/overlap estimate ({why}; no multi-GPU runs)"
        profiles[t] = ModelProfile(
            name=t, kind=JobKind.TRAINING, compute_ms=_sig(1000.0 / gv.isolated[(t, 1)]), sm=_sig(sm[t], 3),
            membw=_sig(bw[t], 3), mem_gb=_sig(mem[t], 3), grad_mb=_sig(grad), overlap=_sig(ov, 3), source=src,
        )
    for name, lat, slo, analogue, gb, src in _INFERENCE:
        profiles[name] = ModelProfile(
            name=name, kind=JobKind.INFERENCE, compute_ms=lat, sm=_sig(sm[analogue], 3), membw=_sig(bw[analogue], 3),
            mem_gb=gb, grad_mb=0.0, overlap=0.0, latency_ms=lat, slo_ms=slo, source=src,
        )
    return Calibration(profiles, params, net, share, mem)


CSV_COLUMNS = ("name", "kind", "compute_ms", "sm", "membw", "mem_gb", "grad_mb", "overlap", "latency_ms", "slo_ms",
               "source")


def catalog_csv(profiles: Mapping[str, ModelProfile], params: ContentionParams) -> str:
    out = io.StringIO()
    header = [
        "Corral workload catalog. Generated by `python -m scheduler.core.calibrate --write`; do not edit by hand.",
        f"Sources: {DEEPSHARE_SRC}: deepshare_isolated_thp.csv, deepshare_shared_thp_ratio.csv.",
        f"         {GAVEL_SRC}: v100 and v100_unconsolidated.",
        "Columns (per worker, on one V100):",
        "  compute_ms  Gavel types: measured isolated V100 step time (1000 / steps per s). DeepShare models: fitted",
        "              compute part of the step time (batch x GPUs / samples per s, batch from their launch scripts),",
        "              jointly with grad_mb and overlap on their 6 isolated placements and 36x36 pairs.",
        "  sm, membw   SM and memory-bandwidth demand (fraction of a GPU), fitted on Gavel's V100 co-location pairs",
        "              (DeepShare and inference models: copied from the Gavel type named in source).",
        "  mem_gb      Gavel types: fitted so that a pair fits in a 16 GB V100 exactly when Gavel measured it",
        "              running (hinge loss); others: estimates from model size and batch.",
        "  grad_mb     gradient all-reduced per step and overlap = fraction of compute that hides communication:",
        "              fitted per model (DeepShare) or per family on spread penalties (Gavel ResNet-18/50,",
        "              Transformer, LM: every batch size shares them); A3C, Recommendation, CycleGAN: estimates",
        "              from parameter counts.",
        "  latency_ms, slo_ms  inference only: estimates, reasoning in source.",
        (f"Fitted ContentionParams: mps_overhead={params.mps_overhead}, "
         f"mps_interference={params.mps_interference}, ring_straggler={params.ring_straggler}."),
        "Testbeds assumed: see scheduler/core/calibrate/data.py TESTBED_NOTES.",
    ]
    for line in header:
        out.write(f"# {line}\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for p in profiles.values():
        inf = p.kind is JobKind.INFERENCE
        writer.writerow([
            p.name, p.kind.value, f"{p.compute_ms:g}", f"{p.sm:g}", f"{p.membw:g}", f"{p.mem_gb:g}", f"{p.grad_mb:g}",
            f"{p.overlap:g}", f"{p.latency_ms:g}" if inf else "", f"{p.slo_ms:g}" if inf else "", p.source,
        ])
    return out.getvalue()
