"""The contention model against co-location measured on a Hopper GPU, and its MPS parameters refitted there.

The measurements are `benchmarks/gpu_colocation.py`'s, run on an NVIDIA H200 (the H100's chip with more and faster
memory): six training jobs and two inference services alone, alone under MPS at thread shares 25/50/75, and every pair
time-sliced and under MPS at 25/75, 50/50 and 75/25. `ingest` derives the compact table the project keeps
(`scheduler/core/data/hopper_colocation.csv`, with its provenance in its header) from the benchmark's output folders;
everything else here reads that table.

What is compared: the slowdown of a training job in a configuration (its whole-GPU, time-sliced, alone steps per
second over its steps per second there) against `ContentionModel`'s prediction for it on one GPU of the hgx-h200
preset. *Before*: the profiles of the V100 catalog's nearest models (`V100_ANALOGUES`) and the V100 fit's constants.
*After*: per-workload SM and memory-bandwidth demand and the constants (`mps_interference`, `mps_overhead`,
`mps_share_cap`) refitted by least squares on the MPS runs alone and on half of the workload pairs (all share splits of
a pair go to the same half), and scored on the other half. Inference services enter the fit as partners (what they do
to a training job); their own service times move with the GPU's clock at low load (docs/contention-model.md), so their
predictions are scored as SLO flags instead: at risk when the predicted service time exceeds the SLO, against the
measured p99 latency.

    python -m scheduler.core.calibrate.hopper [--ingest OUT_DIR ...] [--write]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import spearmanr

from scheduler.core.calibrate.fit import TR_SOLVER
from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.model import (
    GPU_TYPES,
    PRESETS,
    Cluster,
    ClusterSpec,
    JobKind,
    JobSpec,
    NodeGroupSpec,
    Placement,
    build_cluster,
)
from scheduler.core.workloads import CUDA_CONTEXT_GB, ModelProfile, catalog, profile_from_row

DATA = Path(str(resources.files("scheduler.core").joinpath("data")))
MEASURED_PATH = DATA / "hopper_colocation.csv"
PROFILES_PATH = DATA / "hopper_workloads.csv"
MEASURED_COLUMNS = ("run", "phase", "mode", "job", "kind", "share", "partner", "partner_share", "steps_per_s",
                    "offered_rps", "p50_ms", "p99_ms", "service_ms", "util_gpu", "util_mem")
PRESET = "hgx-h200"
GPU_SPEED = GPU_TYPES[PRESETS[PRESET].gpu].speed  # the measured GPU's speed over a V100's, as the catalog states it
# The V100 catalog's nearest model to each measured workload: what Corral predicted with before this fit.
V100_ANALOGUES = {
    "resnet50": "ResNet-50-bs32", "bert-base": "Transformer-bs32", "gpt2-small": "Transformer-bs64",
    "vit-b16": "Transformer-bs32", "lstm-lm": "LM-bs80", "dlrm": "DLRM", "resnet50-infer": "ResNet-50-serve",
    "bert-infer": "BERT-base-serve",
}
SLO_X_P99 = 2.0  # an inference service's SLO: this many times the p99 latency it had alone (its own headroom)
HOLDOUT_SEED = 0


# ---- the measurements --------------------------------------------------------------------------------------------


def ingest(run_dirs: Sequence[Path | str]) -> str:
    """The compact table, with its provenance, from `gpu_colocation.py` output folders (each with colocation.csv and
    meta.json): one row per job per configuration per run, the columns the analysis reads."""
    header = ["# Co-location measured on a real GPU by benchmarks/gpu_colocation.py; derived by",
              "# `python -m scheduler.core.calibrate.hopper --ingest DIR ...` (do not edit by hand).",
              "# steps_per_s: median over the timed windows; service_ms, p50_ms, p99_ms: inference requests at",
              "# offered_rps (open loop); util_*: NVML SM / memory-controller busy %, sampled alone.",
              "# share 100: time-sliced, no MPS. Runs:"]
    rows: list[dict[str, object]] = []
    for run, folder in enumerate(map(Path, run_dirs), start=1):
        meta = json.loads((folder / "meta.json").read_text())
        header.append(f"#  run {run}: {meta['date_utc']} {meta['gpu']} driver {meta['driver']} "
                      f"(CUDA driver API {meta.get('cuda_driver')}), {meta['memory_mib']} MiB, SM clock max "
                      f"{meta.get('sm_clock_max_mhz')} MHz, power limit {meta.get('power_limit_w')} W; "
                      f"{meta['configs_measured']} configurations ({meta['configs_skipped_over_budget']} left out by "
                      f"the time budget)")
        header.append(f"#    command: {meta['command']}")
        jobs = meta.get("jobs", {})
        if run == 1:
            for name, info in jobs.items():
                header.append(f"#  workload {name}: {info['kind']}, {info['items']} samples a step, "
                              f"{info['params'] / 1e6:.1f} M parameters, {info['mem_mb'] / 1024:.2f} GiB peak, "
                              f"torch {info['torch']} CUDA {info['cuda']}")
        with (folder / "colocation.csv").open() as f:
            for r in csv.DictReader(f):
                if r["error"]:
                    continue
                rows.append({"run": run, **{k: r.get(k, "") for k in MEASURED_COLUMNS if k != "run"}})
    out = io.StringIO()
    out.write("\n".join(header) + "\n")
    w = csv.DictWriter(out, fieldnames=MEASURED_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def _num(v: str) -> float | None:
    return float(v) if v not in ("", None) else None


@dataclass(frozen=True, slots=True)
class Config:
    """One job in one configuration: `share` 100 and phase "timeslice" for plain time-slicing."""

    phase: str
    job: str
    share: int
    partner: str = ""
    partner_share: int = 0


@dataclass
class Measured:
    """The table averaged over runs: geometric means of rates and service times, arithmetic of latencies."""

    kinds: dict[str, str]
    alone: dict[str, float]  # whole GPU, time-sliced, alone: steps per second (training) or service ms (inference)
    alone_p99: dict[str, float]  # inference
    rate: dict[Config, float]  # steps per second (training) or median service ms (inference)
    p99: dict[Config, float]  # inference
    runs: int
    provenance: list[str]
    peak_gib: dict[str, float]  # PyTorch's peak allocation of each workload, from the provenance


    def slowdown(self, c: Config) -> float:
        """How many times slower than alone on the whole GPU (inference: service time ratio)."""
        v = self.rate[c]
        return v / self.alone[c.job] if self.kinds[c.job] == "inference" else self.alone[c.job] / v


_PEAK = re.compile(r"workload (\S+):.* ([0-9.]+) GiB peak")  # ingest's provenance line of each workload


def load_measured(path: Path = MEASURED_PATH) -> Measured:
    text = path.read_text()
    provenance = [ln[2:] for ln in text.splitlines() if ln.startswith("#")]
    rows = list(csv.DictReader(ln for ln in text.splitlines() if ln and not ln.startswith("#")))
    kinds = {r["job"]: r["kind"] for r in rows}
    vals: dict[Config, list[float]] = defaultdict(list)
    p99s: dict[Config, list[float]] = defaultdict(list)
    for r in rows:
        if r["mode"] == "capacity":
            continue
        c = Config(r["phase"], r["job"], int(r["share"]), r["partner"],
                   int(r["partner_share"]) if r["partner_share"] else 0)
        v = _num(r["service_ms"] if r["kind"] == "inference" else r["steps_per_s"])
        if v:
            vals[c].append(v)
        if r["kind"] == "inference" and _num(r["p99_ms"]):
            p99s[c].append(float(r["p99_ms"]))
    rate = {c: float(np.exp(np.mean(np.log(v)))) for c, v in vals.items()}
    p99 = {c: float(np.mean(v)) for c, v in p99s.items()}
    alone = {j: rate[Config("timeslice", j, 100)] for j in kinds if Config("timeslice", j, 100) in rate}
    alone_p99 = {j: p99[Config("timeslice", j, 100)] for j in kinds if Config("timeslice", j, 100) in p99}
    peak = {m.group(1): float(m.group(2)) for m in map(_PEAK.search, provenance) if m}
    return Measured(kinds, alone, alone_p99, rate, p99, len({r["run"] for r in rows}), provenance, peak)



# ---- the model on one GPU ----------------------------------------------------------------------------------------


def _cluster() -> Cluster:
    """One GPU of the preset the measurements were made on."""
    spec = ClusterSpec(name="one-h200", groups=[NodeGroupSpec(count=1, preset=PRESET)])
    return build_cluster(spec)


def predict(profiles: Mapping[str, ModelProfile], params: ContentionParams, configs: Sequence[Config]
            ) -> np.ndarray:
    """`ContentionModel`'s slowdown of each configuration's job, relative to it alone on a whole GPU (time-slicing is
    modelled as two uncapped tenants, share 1 each: the model's nearest notion)."""
    model = ContentionModel(_cluster(), profiles, params)
    out = []
    for c in configs:
        spec = JobSpec(name=c.job, submit_s=0.0, num_gpus=1, duration_s=1.0, model=c.job,
                       kind=JobKind(profiles[c.job].kind))
        model.add(0, spec, Placement((0,)))
        whole = model.slowdown(0)
        model.remove(0)
        share = 1.0 if c.phase == "timeslice" else c.share / 100
        if c.partner:
            pspec = replace(spec, name=c.partner, model=c.partner, kind=JobKind(profiles[c.partner].kind))
            pshare = 1.0 if c.phase == "timeslice" else c.partner_share / 100
            model.add(1, pspec, Placement((0,), share=pshare))
        model.add(0, spec, Placement((0,), share=share))
        out.append(model.slowdown(0) / whole)
        model.remove(0)
        if c.partner:
            model.remove(1)
    return np.array(out)


def _replica(sm: np.ndarray, bw: np.ndarray, i: np.ndarray, j: np.ndarray, si: np.ndarray, sj: np.ndarray,
             interference: float, overhead: float, cap: float) -> np.ndarray:
    """The same slowdowns as `predict`, vectorised for the fit (j < 0: alone). A test checks the two agree."""
    di = np.minimum(sm[i], si)
    has = j >= 0
    jj = np.where(has, j, 0)
    dj = np.where(has, np.minimum(sm[jj], sj), 0.0)
    bi, bj = bw[i], np.where(has, bw[jj], 0.0)

    def alloc(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # two-tenant max-min fair share of one unit
        small = np.minimum(np.minimum(a, b), 0.5)
        return np.where(a <= b, small, np.minimum(a, 1.0 - small))

    fair = np.where(has, np.maximum(di / np.where(has, alloc(di, dj), 1.0), bi / np.where(has, alloc(bi, bj), 1.0)),
                    1.0)
    shared = np.where(has, fair * (1.0 + interference * bi * dj) * (1.0 + overhead), 1.0)
    capped = np.where(si < sm[i], (sm[i] / si) ** cap if cap > 0 else 1.0, 1.0)
    return np.maximum(shared * capped, np.where(has, 0.0, 1.0))


@dataclass
class HopperFit:
    profiles: dict[str, ModelProfile]
    params: ContentionParams
    cost: float


def base_profiles(meas: Measured) -> dict[str, ModelProfile]:
    """The measured workloads as catalog profiles with their V100 analogues' demands: compute from the measured step
    time on the H200 (stated, as the catalog does, on a V100: times the GPU type's speed), memory from the measured
    peak plus a CUDA context, latency and SLO for inference from the measured alone service time and p99."""
    v100 = catalog()
    speed = GPU_SPEED  # the catalog states compute on a V100
    out = {}
    for job, kind in meas.kinds.items():
        ana = v100[V100_ANALOGUES[job]]
        alone = meas.alone[job]
        step_ms = alone if kind == "inference" else 1000.0 / alone
        out[job] = ModelProfile(
            name=job, kind=JobKind(kind), compute_ms=round(step_ms * speed, 4), sm=ana.sm, membw=ana.membw,
            mem_gb=round(meas.peak_gib[job] + CUDA_CONTEXT_GB, 2) if job in meas.peak_gib else ana.mem_gb,
            grad_mb=ana.grad_mb, overlap=ana.overlap,
            latency_ms=round(alone, 4) if kind == "inference" else 0.0,
            slo_ms=round(SLO_X_P99 * meas.alone_p99[job], 3) if kind == "inference" else 0.0,
            source=f"measured on an H200 (benchmarks/gpu_colocation.py); sm/membw before the fit: {ana.name}")
    return out


def _arrays(meas: Measured, configs: Sequence[Config], names: list[str]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    pos = {n: k for k, n in enumerate(names)}
    i = np.array([pos[c.job] for c in configs])
    j = np.array([pos[c.partner] if c.partner else -1 for c in configs])
    si = np.array([1.0 if c.phase == "timeslice" else c.share / 100 for c in configs])
    sj = np.array([1.0 if c.phase == "timeslice" else (c.partner_share or 100) / 100 for c in configs])
    return i, j, si, sj


def fit(meas: Measured, configs: Sequence[Config]) -> HopperFit:
    """Least squares on relative error: per-workload SM and bandwidth demand, and the three MPS constants."""
    base = base_profiles(meas)
    names = list(base)
    n = len(names)
    i, j, si, sj = _arrays(meas, configs, names)
    y = np.array([meas.slowdown(c) for c in configs])

    def residuals(x: np.ndarray) -> np.ndarray:
        return _replica(x[:n], x[n:2 * n], i, j, si, sj, x[-3], x[-2], x[-1]) / y - 1.0

    lo = np.concatenate([np.full(2 * n, 0.02), [0.0, 0.0, 0.0]])
    hi = np.concatenate([np.ones(2 * n), [20.0, 0.5, 3.0]])
    best = None
    for start in (0.3, 0.6, 0.9):  # a fixed grid of starts: reproducible, no random restarts
        for kappa in (0.3, 1.0, 3.0):
            x0 = np.concatenate([np.full(2 * n, start), [kappa, 0.05, 1.0]])
            res = least_squares(residuals, x0, bounds=(lo, hi), max_nfev=4000, tr_solver=TR_SOLVER)
            if best is None or res.cost < best.cost - 1e-12:
                best = res
    assert best is not None
    x = best.x
    how = {"training": "sm/membw fitted on its MPS runs",
           "inference": "sm/membw fitted only as a partner at half load: weakly determined"}
    profiles = {name: replace(base[name], sm=round(float(x[k]), 4), membw=round(float(x[n + k]), 4),
                              source=base[name].source.split("; sm/membw")[0] + "; " + how[meas.kinds[name]])
                for k, name in enumerate(names)}
    params = ContentionParams(mps_overhead=round(float(x[-2]), 4), mps_interference=round(float(x[-3]), 4),
                              mps_share_cap=round(float(x[-1]), 4))
    return HopperFit(profiles, params, float(best.cost))


# ---- scoring -----------------------------------------------------------------------------------------------------


@dataclass
class Score:
    name: str
    points: int
    mae: float  # mean absolute relative error of the slowdown
    spearman: float
    worst: str = ""


def score(name: str, meas: Measured, configs: Sequence[Config], profiles: Mapping[str, ModelProfile],
          params: ContentionParams) -> Score:
    if not configs:
        return Score(name, 0, float("nan"), float("nan"))
    pred = predict(profiles, params, configs)
    y = np.array([meas.slowdown(c) for c in configs])
    err = np.abs(pred / y - 1.0)
    k = int(np.argmax(err))
    c = configs[k]
    worst = (f"{c.job}@{c.share} with {c.partner or 'nobody'}@{c.partner_share or '-'} ({c.phase}): predicted "
             f"{pred[k]:.2f}, measured {y[k]:.2f}")
    # No rank correlation of a constant prediction (the V100 model predicts no slowdown for a job alone).
    rho = float(spearmanr(pred, y).statistic) if len(configs) > 2 and np.ptp(pred) > 0 else float("nan")
    return Score(name, len(configs), float(err.mean()), rho, worst)


def slo_agreement(meas: Measured, profiles: Mapping[str, ModelProfile], params: ContentionParams,
                  configs: Sequence[Config]) -> tuple[float, int, int]:
    """Share of inference configurations where "predicted service time > SLO" matches "measured p99 > SLO", the
    number of configurations, and how many were measured at risk."""
    inf = [c for c in configs if meas.kinds[c.job] == "inference" and c in meas.p99]
    if not inf:
        return float("nan"), 0, 0
    pred = predict(profiles, params, inf)
    at_risk_pred = np.array([profiles[c.job].latency_ms * p > profiles[c.job].slo_ms for c, p in zip(inf, pred, strict=False)])
    at_risk_meas = np.array([meas.p99[c] > profiles[c.job].slo_ms for c in inf])
    return float(np.mean(at_risk_pred == at_risk_meas)), len(inf), int(at_risk_meas.sum())


def split_pairs(meas: Measured, seed: int = HOLDOUT_SEED) -> tuple[set[frozenset[str]], set[frozenset[str]]]:
    """Unordered workload pairs split in two halves (fit, held out) by a seeded permutation."""
    pairs = sorted({frozenset((c.job, c.partner)) for c in meas.rate if c.partner}, key=sorted)
    order = np.random.default_rng(seed).permutation(len(pairs))
    fit_half = {pairs[k] for k in order[: len(pairs) // 2]}
    return fit_half, set(pairs) - fit_half


def repeatability(path: Path = MEASURED_PATH) -> tuple[float, float, int]:
    """How well the runs agree with each other: the median and 90th percentile, over the MPS pair configurations of
    training jobs measured in two runs, of |slowdown in run 1 - in run 2| / their mean (each run against its own
    alone rate). The floor no model of these data can beat."""
    rows = list(csv.DictReader(ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")))
    by_run: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    for r in rows:
        if r["kind"] == "training" and r["steps_per_s"]:
            by_run[r["run"]][(r["phase"], r["mode"], r["job"], r["share"], r["partner"], r["partner_share"])] = \
                float(r["steps_per_s"])
    runs = sorted(by_run)
    if len(runs) < 2:
        return float("nan"), float("nan"), 0
    a, b = by_run[runs[0]], by_run[runs[1]]
    diffs = []
    for k in a.keys() & b.keys():
        if k[0] == "mps" and k[1] == "pair":
            alone = ("timeslice", "isolated", k[2], "100", "", "")
            sa, sb = a[alone] / a[k], b[alone] / b[k]
            diffs.append(abs(sa - sb) / ((sa + sb) / 2))
    return float(np.median(diffs)), float(np.percentile(diffs, 90)), len(diffs)


@dataclass
class Report:
    fitted: HopperFit
    scores: list[Score]
    slo: dict[str, tuple[float, int, int]]
    measured: Measured
    other_splits: list[Score]  # the held-out score for other seeds of the pair split
    repeat: tuple[float, float, int]


def held_out(meas: Measured, seed: int) -> tuple[list[Config], list[Config]]:
    """(fitted on, held out): every MPS run alone, and the MPS pairs of one half of the workload pairs; the pairs of
    the other half."""
    training = [c for c in meas.rate if meas.kinds[c.job] == "training" and c.phase == "mps"]
    _fit_half, held_half = split_pairs(meas, seed)
    held = [c for c in training if c.partner and frozenset((c.job, c.partner)) in held_half]
    return [c for c in training if c not in held], held


def evaluate(meas: Measured | None = None, seed: int = HOLDOUT_SEED, other_seeds: int = 9) -> Report:
    """Before and after, held out and in sample; the parameters kept (`fitted`) are refitted on every MPS run.
    `other_seeds` more splits of the pairs show how much the held-out figure owes to the one split."""
    meas = meas or load_measured()
    training = [c for c in meas.rate if meas.kinds[c.job] == "training"]
    mps_alone = [c for c in training if c.phase == "mps" and not c.partner]
    mps_pairs = [c for c in training if c.phase == "mps" and c.partner]
    sliced = [c for c in training if c.phase == "timeslice" and c.partner]
    train, held = held_out(meas, seed)
    before = base_profiles(meas)
    v100 = ContentionParams()
    half = fit(meas, train)
    full = fit(meas, mps_alone + mps_pairs)
    others = []
    for s in range(seed + 1, seed + 1 + other_seeds):
        t, h = held_out(meas, s)
        f = fit(meas, t)
        others.append(score(f"split seed {s}", meas, h, f.profiles, f.params))
    scores = [
        score("before: MPS pairs held out", meas, held, before, v100),
        score("after (fitted on the other half): MPS pairs held out", meas, held, half.profiles, half.params),
        score("before: every MPS pair", meas, mps_pairs, before, v100),
        score("after (fitted on every MPS run): every MPS pair", meas, mps_pairs, full.profiles, full.params),
        score("before: alone under MPS (25/50/75)", meas, mps_alone, before, v100),
        score("after: alone under MPS (25/50/75)", meas, mps_alone, full.profiles, full.params),
        score("after, not fitted on: time-sliced pairs (as two uncapped tenants)", meas, sliced, full.profiles,
              full.params),
    ]
    inference = [c for c in meas.rate if meas.kinds[c.job] == "inference" and c.partner]
    slo = {
        "before": slo_agreement(meas, before, v100, inference),
        "after": slo_agreement(meas, full.profiles, full.params, inference),
    }
    return Report(full, scores, slo, meas, others, repeatability())


def profiles_csv(fitted: HopperFit) -> str:
    """The fitted profiles as a catalog table (the columns of workloads.csv) with the constants in the header."""
    from scheduler.core.calibrate.catalog import CSV_COLUMNS

    p = fitted.params
    out = io.StringIO()
    out.write("# Corral workloads measured on an NVIDIA H200 and the MPS constants fitted there. Generated by\n"
              "# `python -m scheduler.core.calibrate.hopper --write` from hopper_colocation.csv; do not edit by hand.\n"
              "# compute_ms is stated on a V100 as in workloads.csv (the measured H200 step time x "
              f"{GPU_SPEED:g}, the H200's\n"
              "# speed in GPU_TYPES); sm, membw: fitted demands on the H200; mem_gb: PyTorch's measured peak + 0.5 GiB\n"
              "# for the CUDA context; grad_mb, overlap: the V100 analogue's (not measured: one GPU, no all-reduce).\n"
              f"# Fitted ContentionParams: mps_overhead={p.mps_overhead}, mps_interference={p.mps_interference}, "
              f"mps_share_cap={p.mps_share_cap}.\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for prof in fitted.profiles.values():
        w.writerow([prof.name, prof.kind.value, prof.compute_ms, prof.sm, prof.membw, prof.mem_gb, prof.grad_mb,
                    prof.overlap, prof.latency_ms or "", prof.slo_ms or "", prof.source])
    return out.getvalue()


def hopper_profiles(path: Path = PROFILES_PATH) -> dict[str, ModelProfile]:
    """The measured workloads' profiles as `--write` recorded them: give them, with `hopper_params()`, to
    `ContentionModel` (or `corral simulate`'s library use) to model these jobs on Hopper GPUs."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return {p.name: p for p in map(profile_from_row, csv.DictReader(lines))}


def hopper_params(path: Path = PROFILES_PATH) -> ContentionParams:
    """The constants `--write` recorded in the profiles table's header."""
    line = next(ln for ln in path.read_text().splitlines() if "Fitted ContentionParams:" in ln)
    kv = dict(part.strip().split("=") for part in line.split(":", 1)[1].rstrip(".").split(","))
    return ContentionParams(**{k: float(v) for k, v in kv.items()})


def print_report(rep: Report) -> None:
    meas = rep.measured
    print(f"Measured: {len(meas.kinds)} workloads, {len(meas.rate)} configurations averaged over {meas.runs} runs")
    for line in meas.provenance:
        if line.lstrip().startswith("run"):
            print(" ", line.strip())
    p = rep.fitted.params
    print(f"Fitted on every MPS run: mps_interference={p.mps_interference}, mps_overhead={p.mps_overhead}, "
          f"mps_share_cap={p.mps_share_cap}")
    print(f"{'workload':16s} {'sm':>6s} {'membw':>6s}  alone")
    for name, prof in rep.fitted.profiles.items():
        unit = "ms/request" if prof.kind is JobKind.INFERENCE else "steps/s"
        print(f"{name:16s} {prof.sm:6.3f} {prof.membw:6.3f}  {meas.alone[name]:.2f} {unit}")
    print()
    print(f"{'training job slowdowns':70s} {'points':>6s} {'MAE':>7s} {'Spearman':>8s}  worst")
    for s in rep.scores:
        print(f"{s.name:70s} {s.points:6d} {s.mae:7.1%} {s.spearman:8.2f}  {s.worst}")
    if rep.other_splits:
        maes = [s.mae for s in rep.other_splits]
        rhos = [s.spearman for s in rep.other_splits]
        print(f"{'after, held out, over ' + str(len(maes)) + ' other splits of the pairs':70s} {'':6s} "
              f"{np.mean(maes):7.1%} {np.mean(rhos):8.2f}  MAE {min(maes):.1%} to {max(maes):.1%}, Spearman "
              f"{min(rhos):.2f} to {max(rhos):.2f}")
    med, p90, n = rep.repeat
    print(f"Run-to-run: the two runs' slowdowns of the same MPS pair differ by {med:.1%} (median), {p90:.1%} (90th "
          f"percentile) over {n} configurations: the floor under any model's error")
    print()
    for name, (agree, n, risky) in rep.slo.items():
        print(f"SLO at-risk flags ({name}): agree with the measured p99 in {agree:.0%} of {n} inference "
              f"configurations ({risky} measured at risk; SLO = {SLO_X_P99:g} x the p99 alone)")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scheduler.core.calibrate.hopper", description=__doc__.split("\n\n")[0])
    p.add_argument("--ingest", nargs="+", metavar="DIR", help="gpu_colocation.py output folders: rewrite "
                   f"{MEASURED_PATH.name} from them")
    p.add_argument("--write", action="store_true", help=f"write the fitted profiles to {PROFILES_PATH.name}")
    args = p.parse_args(argv)
    if args.ingest:
        MEASURED_PATH.write_text(ingest(args.ingest))
        print(f"wrote {MEASURED_PATH}")
    rep = evaluate()
    print_report(rep)
    if args.write:
        PROFILES_PATH.write_text(profiles_csv(rep.fitted))
        print(f"wrote {PROFILES_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
