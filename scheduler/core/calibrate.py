"""Fit the workload catalog and the contention constants to published measurements, and validate the model.

    python -m scheduler.core.calibrate [--shared DIR] [--write]

reads the raw DeepShare (ICPADS'23) and Gavel (OSDI'20) artifacts in `../shared/calibration` (never copied into the
project), fits every profile parameter with `scipy.optimize.least_squares` (deterministic: fixed starting points, no
random restarts), prints a fit report, and with `--write` regenerates `scheduler/data/workloads.csv` with comment lines
citing the sources and how each column was derived.

What is fitted on what (few parameters per model, so the model has to generalise):

* network (`compute_ms`, `grad_mb`, `overlap` of the six DeepShare models; `grad_mb`, `overlap` of the four Gavel model
  families that have multi-GPU runs, shared by every batch size of a family; `ContentionParams.ring_straggler`), jointly
  on: DeepShare isolated iteration times (6 placements per model), DeepShare pairs sharing servers (36 x 36), Gavel V100
  spread penalties (unconsolidated / consolidated throughput, 2, 4 and 8 GPUs);
* GPU sharing (`sm`, `membw` of the 26 Gavel job types; `ContentionParams.mps_interference`, `mps_overhead`) on Gavel's
  V100 co-location pairs; `mem_gb` of the Gavel job types on which pairs did not fit in a 16 GB V100 (hinge loss);
* `compute_ms` of a Gavel job type is its measured isolated V100 step time (1 / steps per second).

Testbeds assumed (the artifacts do not state everything; the assumptions are spelled out in `TESTBED_NOTES`):

* DeepShare: 8 PCIe servers x 8 GPUs (two PCIe switches per server), one 10 Gb/s Ethernet NIC each, one switch. Their
  launch scripts set `NCCL_IB_DISABLE=1` (NCCL over TCP sockets) and place a job's GPUS evenly on NODES servers; their
  isolated table has 8-server placements, so the measurement testbed had at least 8 servers. GPU type not stated:
  taken as V100-class, so their step times are read as V100 times.
* Gavel: AWS V100-16GB servers with NVLink (p3 family); a consolidated job sits on one 8-GPU server, an unconsolidated
  one puts each worker on its own server, across a 10 Gb/s network.

The validation functions below place jobs on these testbeds with the real `ContentionModel` (the fit uses a
vectorised replica of the same formulas, `_NetworkCases`; a test checks the two agree).
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import spearmanr

from scheduler.core.contention import ContentionModel, ContentionParams, collective_traffic
from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    JobKind,
    JobSpec,
    LinkKind,
    NodeGroupSpec,
    NodeTypeSpec,
    Placement,
    build_cluster,
)
from scheduler.core.workloads import ModelProfile, catalog

DEFAULT_SHARED = Path(__file__).resolve().parents[3] / "shared" / "calibration"
CATALOG_PATH = Path(__file__).resolve().parent / "data" / "workloads.csv"

DEEPSHARE_SRC = "DeepShare (Ryu & Eo, ICPADS'23; github.com/gajagajago/deepshare, Apache-2.0)"
GAVEL_SRC = "Gavel (Narayanan et al., OSDI'20; github.com/stanford-futuredata/gavel, MIT), simulation_throughputs.json"

DEEPSHARE_MODELS = ("MobileNetV3", "GraphSage", "FSDP", "Transformer-XL", "DLRM", "MoE")
# Per-GPU mini-batch of each DeepShare job, from their Slurm launch scripts and script defaults
# (slurm_examples/job_launch_scripts/isolated/*.sh: timm mobilenetv3_small_075 --batch-size=16, graphsage
# --batch-size=1024, transformer-xl --batch_size 16, dlrm --mini-batch-size=48; fsdp.py and moe.py default -b 8).
# Their profiler counts batch x world size samples per step, so one step of a G-GPU job takes batch * G / throughput.
DEEPSHARE_BATCH = {"MobileNetV3": 16, "GraphSage": 1024, "FSDP": 8, "Transformer-XL": 16, "DLRM": 48, "MoE": 8}
GAVEL_FAMILIES = ("ResNet-18", "ResNet-50", "Transformer", "LM")  # the job types Gavel also ran on 2, 4 and 8 GPUs
V100_MEM_GB = 16.0  # Gavel's V100s are AWS p3 V100-SXM2-16GB: a pair "does not fit" when it exceeds 16 GB
NIC_GBPS = 10.0
OVERLAP_PRIOR_WEIGHT = 0.02
MEM_PRIOR_GB = 2.0
# The iterative trust-region solver: same answer whatever the BLAS thread count (the dense one's SVDs differ in the last
# digits with threading, and multithreaded BLAS on these small matrices is 40x slower on a busy machine).
TR_SOLVER = "lsmr"

TESTBED_NOTES = (
    "DeepShare testbed: 8 servers x 8 GPUs on PCIe (2 switches of 4 GPUs, 12 GB/s each, 9 GB/s between sockets), "
    "10 Gb/s Ethernet, one switch; NCCL over TCP (their scripts set NCCL_IB_DISABLE=1); a GPUS,NODES job takes "
    "GPUS/NODES GPUs on each of NODES servers; GPU speed taken as a V100's (not stated in the artifact).",
    "DeepShare pairs: job A is placed first; job B takes the next free GPUs on the first NODES_B servers, so A and B "
    "share min(NODES_A, NODES_B) servers (their NICs and, where GPUs meet, PCIe switches); the ratio is A's slowdown "
    "alone on its placement divided by its slowdown with B.",
    "Gavel testbed: 8 servers x 8 V100-16GB with NVLink (150 GB/s per GPU, AWS p3.16xlarge-like), 10 Gb/s between "
    "servers (AWS p3 'up to 10 Gigabit' class); consolidated = all workers on one server, unconsolidated = one worker "
    "per server. Co-location pairs: two 1-GPU jobs on one GPU with no MPS thread cap (share 1.0).",
)


# ----------------------------------------------------------------------------------------------------------------------
# Raw data
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeepShareData:
    isolated: dict[tuple[str, int, int], float]  # (model, gpus, nodes) -> samples/s alone
    configs: list[tuple[str, int, int]]  # row/column order of the shared matrix
    shared: np.ndarray  # [36, 36] A's throughput with B / A alone


@dataclass(frozen=True)
class GavelData:
    isolated: dict[tuple[str, int], float]  # (job type, scale) -> steps/s, consolidated, V100
    unconsolidated: dict[tuple[str, int], float]  # (job type, scale) -> steps/s, spread, V100
    pairs: dict[tuple[str, str], tuple[float, float]]  # (this, other) 1-GPU types on one V100 -> (this, other) steps/s
    types: list[str]  # 1-GPU job types in file order


def _parse_config(text: str) -> tuple[str, int, int]:
    model, gpus, nodes = text.split(",")
    return model, int(gpus), int(nodes)


def load_deepshare(shared: Path | str | None = None) -> DeepShareData:
    root = Path(shared) if shared is not None else DEFAULT_SHARED
    isolated: dict[tuple[str, int, int], float] = {}
    with open(root / "deepshare_isolated_thp.csv", newline="") as f:
        for row in csv.DictReader(f):
            isolated[_parse_config(row[""])] = float(row["isol_thp"])
    with open(root / "deepshare_shared_thp_ratio.csv", newline="") as f:
        rows = list(csv.reader(f))
    configs = [_parse_config(c) for c in rows[0][1:]]
    if [_parse_config(r[0]) for r in rows[1:]] != configs:
        raise ValueError("deepshare_shared_thp_ratio.csv: row and column orders differ")
    shared_m = np.array([[float(x) for x in r[1:]] for r in rows[1:]])
    return DeepShareData(isolated, configs, shared_m)


def gavel_name(job_type: str) -> str:
    """Catalog name of a Gavel job type: 'ResNet-18 (batch size 64)' -> 'ResNet-18-bs64', 'A3C' -> 'A3C'."""
    if " (batch size " in job_type:
        family, bs = job_type.split(" (batch size ")
        return f"{family}-bs{bs.rstrip(')')}"
    return job_type


def gavel_family(name: str) -> str:
    return name.split("-bs")[0]


def load_gavel(shared: Path | str | None = None) -> GavelData:
    root = Path(shared) if shared is not None else DEFAULT_SHARED
    raw = json.loads((root / "gavel_simulation_throughputs.json").read_text())
    isolated: dict[tuple[str, int], float] = {}
    unconsolidated: dict[tuple[str, int], float] = {}
    pairs: dict[tuple[str, str], tuple[float, float]] = {}
    types: list[str] = []
    for key, entry in raw["v100"].items():
        job_type, scale = ast.literal_eval(key)
        name = gavel_name(job_type)
        isolated[(name, scale)] = float(entry["null"])
        if scale == 1:
            types.append(name)
            for other, value in entry.items():
                if other == "null":
                    continue
                other_type, other_scale = ast.literal_eval(other)
                if other_scale == 1:
                    pairs[(name, gavel_name(other_type))] = (float(value[0]), float(value[1]))
    for key, entry in raw["v100_unconsolidated"].items():
        job_type, scale = ast.literal_eval(key)
        unconsolidated[(gavel_name(job_type), scale)] = float(entry["null"])
    return GavelData(isolated, unconsolidated, pairs, types)


# ----------------------------------------------------------------------------------------------------------------------
# Testbeds and placements
# ----------------------------------------------------------------------------------------------------------------------


def deepshare_testbed() -> Cluster:
    node = NodeTypeSpec(
        gpu="V100-16GB", gpus_per_node=8, interconnect="pcie", pcie_switches=2, pcie_switch_gbs=12.0, socket_gbs=9.0,
        nic_gbps=NIC_GBPS,
    )
    spec = ClusterSpec(name="deepshare-testbed", nodes_per_rack=8, oversubscription=1.0,
                       groups=[NodeGroupSpec(count=8, node=node)])
    return build_cluster(spec)


def gavel_testbed() -> Cluster:
    node = NodeTypeSpec(gpu="V100-16GB", gpus_per_node=8, interconnect="nvlink", nvlink_gbs=150.0, nic_gbps=NIC_GBPS)
    spec = ClusterSpec(name="gavel-testbed", nodes_per_rack=8, oversubscription=1.0,
                       groups=[NodeGroupSpec(count=8, node=node)])
    return build_cluster(spec)


def deepshare_placement(cluster: Cluster, gpus: int, nodes: int, used: set[int] | None = None) -> Placement:
    """GPUS/NODES GPUs on each of the first NODES servers, the lowest-numbered free ones."""
    used = used or set()
    per = gpus // nodes
    chosen: list[int] = []
    for n in range(nodes):
        free = [g for g in cluster.node_gpus(n) if g not in used]
        if len(free) < per:
            raise ValueError(f"server {n} has {len(free)} free GPUs, {per} needed")
        chosen.extend(free[:per])
    return Placement(tuple(chosen))


def gavel_placement(cluster: Cluster, scale: int, consolidated: bool) -> Placement:
    if consolidated:
        return Placement(tuple(range(scale)))
    return Placement(tuple(int(cluster.node_first_gpu[n]) for n in range(scale)))


def _spec(model: str, gpus: int) -> JobSpec:
    return JobSpec(name=model, submit_s=0.0, num_gpus=float(gpus), duration_s=1.0, model=model)


# ----------------------------------------------------------------------------------------------------------------------
# A vectorised replica of the contention model's network formulas, for fitting
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class _Jobs:
    """Padded per-job link tables: seconds per iteration per GB of gradient on each link (before the straggler term)."""

    model: np.ndarray  # [J] index into the fit's model list
    base: np.ndarray  # [J, L] traffic per GB of gradient / link capacity
    inter: np.ndarray  # [J, L] 1 on inter-server links
    servers: np.ndarray  # [J]
    links: list[list[int]]  # link ids, in column order


def _job_tables(cluster: Cluster, jobs: Sequence[tuple[int, Placement]]) -> _Jobs:
    cap = cluster.link_capacity
    inter_kind = np.array([k in (LinkKind.NIC, LinkKind.UPLINK) for k in cluster.link_kind], dtype=float)
    rows = []
    for model, placement in jobs:
        traffic = collective_traffic(cluster, placement.gpus, 1.0)
        links = list(traffic)
        rows.append((model, links, [traffic[lk] / cap[lk] for lk in links], [inter_kind[lk] for lk in links],
                     len(placement.nodes(cluster))))
    width = max(1, max(len(r[1]) for r in rows))
    base = np.zeros((len(rows), width))
    inter = np.zeros((len(rows), width))
    for i, (_m, links, b, e, _k) in enumerate(rows):
        base[i, : len(links)] = b
        inter[i, : len(links)] = e
    return _Jobs(
        model=np.array([r[0] for r in rows], dtype=int), base=base, inter=inter,
        servers=np.array([r[4] for r in rows], dtype=float), links=[r[1] for r in rows],
    )


def _alone(jobs: _Jobs, compute: np.ndarray, grad_gb: np.ndarray, overlap: np.ndarray, straggler: float,
           ) -> tuple[np.ndarray, np.ndarray]:
    """(iteration seconds alone, [J, L] link seconds) for every job, as ContentionModel.footprint computes them."""
    c = compute[jobs.model]
    stretch = 1.0 + straggler * np.maximum(jobs.servers - 2.0, 0.0)[:, None] * jobs.inter
    link_time = grad_gb[jobs.model][:, None] * jobs.base * stretch
    comm = link_time.max(axis=1)
    return c + np.maximum(0.0, comm - overlap[jobs.model] * c), link_time


class _NetworkCases:
    """Every placement the network fit needs, tabulated once: DeepShare configs alone and in pairs, Gavel spreads."""

    def __init__(self, ds: DeepShareData, gv: GavelData, models: list[str]) -> None:
        self.models = models
        idx = {m: i for i, m in enumerate(models)}
        dcl, gcl = deepshare_testbed(), gavel_testbed()
        # DeepShare: each config alone (isolated times, spread penalties) ...
        self.ds_configs = ds.configs
        self.ds_alone = _job_tables(dcl, [(idx[m], deepshare_placement(dcl, g, n)) for m, g, n in ds.configs])
        self.ds_measured_s = np.array(
            [DEEPSHARE_BATCH[m] * g / ds.isolated[(m, g, n)] for m, g, n in ds.configs])
        # ... and every ordered pair: A placed first, B on the next free GPUs of its servers.
        a_jobs, b_jobs = [], []
        for ma, ga, na in ds.configs:
            pa = deepshare_placement(dcl, ga, na)
            for mb, gb, nb in ds.configs:
                pb = deepshare_placement(dcl, gb, nb, used=set(pa.gpus))
                a_jobs.append((idx[ma], pa))
                b_jobs.append((idx[mb], pb))
        self.pair_a = _job_tables(dcl, a_jobs)
        self.pair_b = _job_tables(dcl, b_jobs)
        width = self.pair_a.base.shape[1]
        self.pair_map = np.full((len(a_jobs), width), -1, dtype=int)  # column of B's table holding A's link
        for p, (la, lb) in enumerate(zip(self.pair_a.links, self.pair_b.links)):
            pos = {lk: i for i, lk in enumerate(lb)}
            for i, lk in enumerate(la):
                self.pair_map[p, i] = pos.get(lk, -1)
        self.pair_measured = ds.shared.ravel()
        n = len(ds.configs)
        self.pair_rows = np.repeat(np.arange(n), n)
        self.pair_cols = np.tile(np.arange(n), n)
        # Gavel: consolidated and unconsolidated placements of every multi-GPU job type.
        self.gv_points = sorted(
            (name, scale) for (name, scale) in gv.unconsolidated
            if scale > 1 and gv.isolated.get((name, scale), 0) > 0 and gv.unconsolidated[(name, scale)] > 0)
        self.gv_packed = _job_tables(gcl, [(idx[gavel_family(nm)], gavel_placement(gcl, s, True))
                                           for nm, s in self.gv_points])
        self.gv_spread = _job_tables(gcl, [(idx[gavel_family(nm)], gavel_placement(gcl, s, False))
                                           for nm, s in self.gv_points])
        self.gv_compute = np.array([1.0 / gv.isolated[(nm, 1)] for nm, _s in self.gv_points])
        self.gv_measured = np.array([gv.unconsolidated[p] / gv.isolated[p] for p in self.gv_points])

    def pair_ratios(self, compute: np.ndarray, grad: np.ndarray, overlap: np.ndarray, straggler: float) -> np.ndarray:
        ta, lta = _alone(self.pair_a, compute, grad, overlap, straggler)
        tb, ltb = _alone(self.pair_b, compute, grad, overlap, straggler)
        duty_b = ltb / tb[:, None]
        rows = np.arange(len(ta))[:, None]
        on_a = np.where(self.pair_map >= 0, duty_b[rows, np.maximum(self.pair_map, 0)], 0.0)
        comm = (lta * (1.0 + on_a)).max(axis=1)
        c = compute[self.pair_a.model]
        shared = c + np.maximum(0.0, comm - overlap[self.pair_a.model] * c)
        return ta / shared

    def gavel_spread(self, grad: np.ndarray, overlap: np.ndarray, straggler: float) -> np.ndarray:
        out = []
        for tables in (self.gv_packed, self.gv_spread):
            c = self.gv_compute
            stretch = 1.0 + straggler * np.maximum(tables.servers - 2.0, 0.0)[:, None] * tables.inter
            comm = (grad[tables.model][:, None] * tables.base * stretch).max(axis=1)
            out.append(c + np.maximum(0.0, comm - overlap[tables.model] * c))
        return out[0] / out[1]


# ----------------------------------------------------------------------------------------------------------------------
# Fits
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class NetworkFit:
    models: list[str]  # DeepShare models, then Gavel families
    compute_s: np.ndarray  # DeepShare models only meaningful
    grad_gb: np.ndarray
    overlap: np.ndarray
    ring_straggler: float
    cost: float


def fit_network(ds: DeepShareData, gv: GavelData, *, pair_mask: np.ndarray | None = None,
                gavel_mask: np.ndarray | None = None, isolated_mask: np.ndarray | None = None,
                cases: _NetworkCases | None = None) -> NetworkFit:
    """Joint least-squares fit of the network parameters; masks select the points fitted on (default: all)."""
    models = list(DEEPSHARE_MODELS) + list(GAVEL_FAMILIES)
    cases = cases or _NetworkCases(ds, gv, models)
    nd, nf = len(DEEPSHARE_MODELS), len(GAVEL_FAMILIES)
    pm = np.ones(len(cases.pair_measured), bool) if pair_mask is None else pair_mask
    gm = np.ones(len(cases.gv_measured), bool) if gavel_mask is None else gavel_mask
    im = np.ones(len(cases.ds_measured_s), bool) if isolated_mask is None else isolated_mask
    w_pair, w_gv, w_iso = 1.0 / math.sqrt(pm.sum()), 1.0 / math.sqrt(gm.sum()), 1.0 / math.sqrt(im.sum())
    # The fastest measured step of a DeepShare model bounds its compute from above: start at half of it.
    t_min = {m: min(t for (mm, _g, _n), t in zip(cases.ds_configs, cases.ds_measured_s) if mm == m)
             for m in DEEPSHARE_MODELS}

    def unpack(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        compute = np.zeros(nd + nf)
        compute[:nd] = np.exp(x[:nd])
        grad = np.exp(x[nd: 2 * nd + nf])
        overlap = x[2 * nd + nf: 3 * nd + 2 * nf]
        return compute, grad, overlap, float(x[-1])

    def residuals(x: np.ndarray) -> np.ndarray:
        compute, grad, overlap, straggler = unpack(x)
        t_iso, _ = _alone(cases.ds_alone, compute, grad, overlap, straggler)
        r_iso = np.log(t_iso / cases.ds_measured_s)[im] * w_iso
        r_pair = (cases.pair_ratios(compute, grad, overlap, straggler) - cases.pair_measured)[pm] * w_pair
        r_gv = (cases.gavel_spread(grad, overlap, straggler) - cases.gv_measured)[gm] * w_gv
        # Overlap is barely identifiable for communication-bound models (it scales a term the comm time swamps): a
        # weak pull to 0.5 picks one value where the data do not care, instead of wherever the start happened to be.
        r_reg = OVERLAP_PRIOR_WEIGHT * (overlap - 0.5)
        return np.concatenate([r_iso, r_pair, r_gv, r_reg])

    x0 = np.concatenate([
        np.log([0.5 * t_min[m] for m in DEEPSHARE_MODELS]),
        np.log(np.full(nd + nf, 0.1)),
        np.full(nd + nf, 0.3),
        [0.1],
    ])
    lo = np.concatenate([np.full(nd, -12.0), np.full(nd + nf, math.log(1e-4)), np.zeros(nd + nf), [0.0]])
    hi = np.concatenate([np.log([t_min[m] for m in DEEPSHARE_MODELS]), np.full(nd + nf, math.log(20.0)),
                         np.ones(nd + nf), [2.0]])
    res = least_squares(residuals, x0, bounds=(lo, hi), x_scale="jac", max_nfev=4000, tr_solver=TR_SOLVER)
    compute, grad, overlap, straggler = unpack(res.x)
    return NetworkFit(models, compute, grad, overlap, straggler, float(res.cost))


@dataclass
class SharingFit:
    types: list[str]
    sm: np.ndarray
    membw: np.ndarray
    mps_interference: float
    mps_overhead: float
    cost: float


def _pair_arrays(gv: GavelData) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(types, i, j, measured ratio, fits) over ordered 1-GPU pairs; ratio is nan where the pair did not fit."""
    types = gv.types
    pos = {t: k for k, t in enumerate(types)}
    ii, jj, y, fits = [], [], [], []
    for (a, b), (ta, _tb) in gv.pairs.items():
        ii.append(pos[a])
        jj.append(pos[b])
        fits.append(ta > 0)
        y.append(min(1.0, ta / gv.isolated[(a, 1)]) if ta > 0 else np.nan)
    return types, np.array(ii), np.array(jj), np.array(y), np.array(fits)


def _two_tenant_ratio(sm: np.ndarray, bw: np.ndarray, i: np.ndarray, j: np.ndarray, interference: float,
                      overhead: float) -> np.ndarray:
    """Throughput ratio of tenant i sharing a GPU with tenant j (no thread cap): ContentionModel.gpu_slowdowns."""
    def alloc(d_self: np.ndarray, d_other: np.ndarray) -> np.ndarray:
        small = np.minimum(np.minimum(d_self, d_other), 0.5)  # max-min: the smaller demand gets up to half
        return np.where(d_self <= d_other, small, np.minimum(d_self, 1.0 - small))

    cap = np.maximum(sm[i] / alloc(sm[i], sm[j]), bw[i] / alloc(bw[i], bw[j]))
    return 1.0 / (cap * (1.0 + interference * bw[i] * sm[j]) * (1.0 + overhead))


def fit_sharing(gv: GavelData, mask: np.ndarray | None = None) -> SharingFit:
    types, i, j, y, fits = _pair_arrays(gv)
    keep = fits if mask is None else fits & mask
    i, j, y = i[keep], j[keep], y[keep]
    n = len(types)

    def residuals(x: np.ndarray) -> np.ndarray:
        return _two_tenant_ratio(x[:n], x[n: 2 * n], i, j, x[-2], x[-1]) - y

    lo = np.concatenate([np.full(2 * n, 0.02), [0.0, 0.0]])
    hi = np.concatenate([np.ones(2 * n), [20.0, 0.5]])
    best = None
    for start in (0.3, 0.6, 0.9):  # a fixed grid of starts: least squares is local, the grid makes it reproducible
        for kappa in (0.3, 1.0, 3.0, 8.0):
            x0 = np.concatenate([np.full(2 * n, start), [kappa, 0.02]])
            res = least_squares(residuals, x0, bounds=(lo, hi), max_nfev=3000, tr_solver=TR_SOLVER)
            if best is None or res.cost < best.cost - 1e-12:
                best = res
    assert best is not None
    x = best.x
    return SharingFit(types, x[:n], x[n: 2 * n], float(x[-2]), float(x[-1]), float(best.cost))


def fit_memory(gv: GavelData, gpu_gb: float = V100_MEM_GB) -> dict[str, float]:
    """GPU memory per job type such that a pair fits in one V100 exactly when Gavel measured it running.

    Hinge residuals (margin 0.5 GB) on every pair, plus a weak pull towards 2 GB (a CUDA context and framework for a
    small job): among the footprints that explain which pairs failed, the smallest ones.
    """
    types, i, j, _y, fits = _pair_arrays(gv)
    n = len(types)
    margin = 0.5

    def residuals(m: np.ndarray) -> np.ndarray:
        total = m[i] + m[j]
        over = np.where(fits, np.maximum(0.0, total - (gpu_gb - margin)), np.maximum(0.0, (gpu_gb + margin) - total))
        return np.concatenate([over, 0.02 * (m - MEM_PRIOR_GB)])

    res = least_squares(residuals, np.full(n, MEM_PRIOR_GB), bounds=(0.3, gpu_gb - 0.5), max_nfev=5000,
                        tr_solver=TR_SOLVER)
    return {t: float(v) for t, v in zip(types, res.x)}


# ----------------------------------------------------------------------------------------------------------------------
# Catalog assembly
# ----------------------------------------------------------------------------------------------------------------------

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
     "estimate: batch-1 FP32 ResNet-50 on a V100 ~7 ms; SLO = MLPerf Inference server bound for ResNet-50 (15 ms); "
     "sm/membw as Gavel ResNet-50-bs16"),
    ("BERT-base-serve", 6.0, 50.0, "Transformer-bs16", 2.0,
     "estimate: batch-1 BERT-base seq 128 on a V100 ~6 ms; SLO 50 ms (interactive NLP target; MLPerf BERT-large: "
     "130 ms); sm/membw as Gavel Transformer-bs16"),
    ("LLaMA-7B-serve", 20.0, 100.0, "LM-bs5", 15.0,
     "estimate: per output token, 13.5 GB of FP16 weights read at ~900 GB/s = 15 ms + overhead; SLO 100 ms/token "
     "(MLPerf Llama-2-70B server: 200 ms); 15 GB with KV cache; sm/membw as Gavel LM-bs5 (small-batch decoding)"),
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
    sm = dict(zip(share.types, share.sm))
    bw = dict(zip(share.types, share.membw))
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
    for name, lat, slo, analogue, m, src in _INFERENCE:
        profiles[name] = ModelProfile(
            name=name, kind=JobKind.INFERENCE, compute_ms=lat, sm=_sig(sm[analogue], 3), membw=_sig(bw[analogue], 3),
            mem_gb=m, grad_mb=0.0, overlap=0.0, latency_ms=lat, slo_ms=slo, source=src,
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
        f"Fitted ContentionParams: mps_overhead={params.mps_overhead}, mps_interference={params.mps_interference}, "
        f"ring_straggler={params.ring_straggler}.",
        "Testbeds assumed: see scheduler/core/calibrate.py TESTBED_NOTES.",
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


# ----------------------------------------------------------------------------------------------------------------------
# Validation with the real contention model
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class Validation:
    name: str
    points: int
    mae: float
    spearman: float
    basis: str  # what the parameters were fitted on, relative to these points
    predicted: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    measured: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    extra: dict[str, float] = field(default_factory=dict)


def _summary(name: str, pred: Sequence[float], meas: Sequence[float], basis: str, **extra: float) -> Validation:
    p, m = np.asarray(pred, dtype=float), np.asarray(meas, dtype=float)
    rho = float(spearmanr(p, m)[0]) if len(p) > 2 else float("nan")
    return Validation(name, len(p), float(np.mean(np.abs(p - m))), rho, basis, p, m, dict(extra))


def _resolve(profiles: Mapping[str, ModelProfile] | None, params: ContentionParams | None
             ) -> tuple[Mapping[str, ModelProfile], ContentionParams]:
    return (profiles if profiles is not None else catalog()), (params if params is not None else ContentionParams())


def deepshare_pair_predictions(shared: Path | str | None = None, profiles: Mapping[str, ModelProfile] | None = None,
                               params: ContentionParams | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, measured) throughput ratio of A while B shares its servers, row-major over the 36 x 36 matrix."""
    ds = load_deepshare(shared)
    profiles, params = _resolve(profiles, params)
    cluster = deepshare_testbed()
    model = ContentionModel(cluster, profiles, params)
    pred = []
    for ma, ga, na in ds.configs:
        pa = deepshare_placement(cluster, ga, na)
        model.add(0, _spec(ma, ga), pa)
        alone = model.slowdown(0)
        for mb, gb, nb in ds.configs:
            pb = deepshare_placement(cluster, gb, nb, used=set(pa.gpus))
            pred.append(alone / model.predict(_spec(mb, gb), pb).others_after[0])
        model.remove(0)
    return np.array(pred), ds.shared.ravel().copy()


def validate_deepshare_pairs(shared: Path | str | None = None, profiles: Mapping[str, ModelProfile] | None = None,
                             params: ContentionParams | None = None) -> Validation:
    pred, meas = deepshare_pair_predictions(shared, profiles, params)
    return _summary("DeepShare pairs sharing servers (A with B / A alone)", pred, meas,
                    "fitted on the same data (see holdout for half the pairs held out)")


def deepshare_spread_predictions(shared: Path | str | None = None,
                                 profiles: Mapping[str, ModelProfile] | None = None,
                                 params: ContentionParams | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Throughput on more servers / on 2 servers, same GPU count: (labels, predicted, measured)."""
    ds = load_deepshare(shared)
    profiles, params = _resolve(profiles, params)
    cluster = deepshare_testbed()
    model = ContentionModel(cluster, profiles, params)

    def slow(m: str, g: int, n: int) -> float:
        model.add(0, _spec(m, g), deepshare_placement(cluster, g, n))
        s = model.slowdown(0)
        model.remove(0)
        return s

    labels, pred, meas = [], [], []
    for m, g, n in ds.configs:
        if n > 2 and (m, g, 2) in ds.isolated:
            labels.append(f"{m} {g} GPUs {n} vs 2 servers")
            pred.append(slow(m, g, 2) / slow(m, g, n))
            meas.append(ds.isolated[(m, g, n)] / ds.isolated[(m, g, 2)])
    return labels, np.array(pred), np.array(meas)


def validate_deepshare_spread(shared: Path | str | None = None, profiles: Mapping[str, ModelProfile] | None = None,
                              params: ContentionParams | None = None) -> Validation:
    _labels, pred, meas = deepshare_spread_predictions(shared, profiles, params)
    return _summary("DeepShare spread penalties (more servers / 2 servers)", pred, meas,
                    "fitted on the same isolated runs (see holdout: predicted from 2-server runs and pairs only)")


def gavel_pair_predictions(shared: Path | str | None = None, profiles: Mapping[str, ModelProfile] | None = None,
                           params: ContentionParams | None = None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ordered 1-GPU pairs on one V100: (predicted ratio, measured ratio or nan, measured fits, rule says fits)."""
    gv = load_gavel(shared)
    profiles, params = _resolve(profiles, params)
    cluster = build_cluster(ClusterSpec(name="one-v100", groups=[NodeGroupSpec(count=1, node=NodeTypeSpec(
        gpu="V100-16GB", gpus_per_node=1, interconnect="nvlink"))]))
    model = ContentionModel(cluster, profiles, params)
    gpu_gb = float(cluster.gpu_mem[0])
    pred, meas, fits, rule = [], [], [], []
    for (a, b), (ta, _tb) in gv.pairs.items():
        model.add(0, _spec(a, 1), Placement((0,)))
        alone = model.slowdown(0)
        pred.append(alone / model.predict(_spec(b, 1), Placement((0,))).others_after[0])
        model.remove(0)
        meas.append(min(1.0, ta / gv.isolated[(a, 1)]) if ta > 0 else np.nan)
        fits.append(ta > 0)
        rule.append(profiles[a].mem_gb + profiles[b].mem_gb <= gpu_gb)  # the schedulers' memory rule on one GPU
    return np.array(pred), np.array(meas), np.array(fits), np.array(rule)


def validate_gavel_pairs(shared: Path | str | None = None, profiles: Mapping[str, ModelProfile] | None = None,
                         params: ContentionParams | None = None) -> Validation:
    pred, meas, fits, rule = gavel_pair_predictions(shared, profiles, params)
    nofit = ~fits
    return _summary(
        "Gavel co-location pairs on one V100 (pairs that fit)", pred[fits], meas[fits],
        "fitted on the same data (see holdout for half the pairs held out)",
        memory_accuracy=float(np.mean(rule == fits)), memory_points=float(len(fits)),
        nofit_points=float(nofit.sum()), nofit_recall=float(np.mean(~rule[nofit])) if nofit.any() else float("nan"),
    )


def gavel_spread_predictions(shared: Path | str | None = None, profiles: Mapping[str, ModelProfile] | None = None,
                             params: ContentionParams | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    gv = load_gavel(shared)
    profiles, params = _resolve(profiles, params)
    cluster = gavel_testbed()
    model = ContentionModel(cluster, profiles, params)
    labels, pred, meas = [], [], []
    for (name, scale), spread in sorted(gv.unconsolidated.items()):
        packed = gv.isolated.get((name, scale), 0.0)
        if scale == 1 or spread <= 0 or packed <= 0:
            continue
        slows = []
        for consolidated in (True, False):
            model.add(0, _spec(name, scale), gavel_placement(cluster, scale, consolidated))
            slows.append(model.slowdown(0))
            model.remove(0)
        labels.append(f"{name} x{scale}")
        pred.append(slows[0] / slows[1])
        meas.append(spread / packed)
    return labels, np.array(pred), np.array(meas)


def validate_gavel_spread(shared: Path | str | None = None, profiles: Mapping[str, ModelProfile] | None = None,
                          params: ContentionParams | None = None) -> Validation:
    _labels, pred, meas = gavel_spread_predictions(shared, profiles, params)
    return _summary("Gavel V100 spread penalties (unconsolidated / consolidated)", pred, meas,
                    "fitted on the same data (see holdout: batch sizes held out)")


def validate_all(shared: Path | str | None = None, profiles: Mapping[str, ModelProfile] | None = None,
                 params: ContentionParams | None = None) -> list[Validation]:
    return [f(shared, profiles, params) for f in (validate_deepshare_pairs, validate_deepshare_spread,
                                                 validate_gavel_pairs, validate_gavel_spread)]


# ----------------------------------------------------------------------------------------------------------------------
# Hold-out: refit without part of a dataset, score on that part
# ----------------------------------------------------------------------------------------------------------------------


def _half_split(keys: Sequence[object], seed: int = 0) -> set[object]:
    """A fixed, reproducible half of the keys (the training half)."""
    uniq = sorted(set(keys), key=repr)
    order = np.random.default_rng(seed).permutation(len(uniq))
    return {uniq[k] for k in order[: len(uniq) // 2]}


def holdout(shared: Path | str | None = None) -> list[Validation]:
    """Refit each dataset's parameters on a part of it and score the part left out (fast replica of the model)."""
    ds, gv = load_deepshare(shared), load_gavel(shared)
    models = list(DEEPSHARE_MODELS) + list(GAVEL_FAMILIES)
    cases = _NetworkCases(ds, gv, models)
    out = []

    # (a) DeepShare pairs: train on half of the unordered config pairs, test on the others.
    unordered = [tuple(sorted((int(r), int(c)))) for r, c in zip(cases.pair_rows, cases.pair_cols)]
    train_keys = _half_split(unordered)
    train = np.array([k in train_keys for k in unordered])
    net = fit_network(ds, gv, pair_mask=train, cases=cases)
    pred = cases.pair_ratios(net.compute_s, net.grad_gb, net.overlap, net.ring_straggler)
    out.append(_summary("DeepShare pairs, held-out half", pred[~train], cases.pair_measured[~train],
                        "held out: fitted on the other half of the pairs"))

    # (b) DeepShare spread: fit without the 4- and 8-server isolated runs; predict their penalties.
    two = np.array([n == 2 for _m, _g, n in cases.ds_configs])
    net = fit_network(ds, gv, isolated_mask=two, cases=cases)
    t, _ = _alone(cases.ds_alone, net.compute_s, net.grad_gb, net.overlap, net.ring_straggler)
    at = {cfg: k for k, cfg in enumerate(cases.ds_configs)}
    pred, meas = [], []
    for (m, g, n), k in at.items():
        if n > 2:
            base = at[(m, g, 2)]
            pred.append(t[base] / t[k])
            meas.append(ds.isolated[(m, g, n)] / ds.isolated[(m, g, 2)])
    out.append(_summary("DeepShare spread, from 2-server runs + pairs", pred, meas,
                        "held out: 4- and 8-server isolated runs not fitted on"))

    # (c) Gavel co-location: train on half of the unordered type pairs.
    types, i, j, y, fits = _pair_arrays(gv)
    unordered = [tuple(sorted((int(a), int(b)))) for a, b in zip(i, j)]
    train_keys = _half_split(unordered)
    train = np.array([k in train_keys for k in unordered])
    share = fit_sharing(gv, mask=train)
    pred = _two_tenant_ratio(share.sm, share.membw, i, j, share.mps_interference, share.mps_overhead)
    test = ~train & fits
    out.append(_summary("Gavel co-location pairs, held-out half", pred[test], y[test],
                        "held out: fitted on the other half of the pairs"))

    # (d) Gavel spread: family parameters fitted on alternate batch sizes, scored on the others.
    by_family: dict[str, list[int]] = {}
    for name, _s in cases.gv_points:
        bs = int(name.split("-bs")[1])
        by_family.setdefault(gavel_family(name), [])
        if bs not in by_family[gavel_family(name)]:
            by_family[gavel_family(name)].append(bs)
    train_bs = {(f, bs) for f, sizes in by_family.items() for bs in sorted(sizes)[::2]}
    train = np.array([(gavel_family(nm), int(nm.split("-bs")[1])) in train_bs for nm, _s in cases.gv_points])
    net = fit_network(ds, gv, gavel_mask=train, cases=cases)
    pred = cases.gavel_spread(net.grad_gb, net.overlap, net.ring_straggler)
    out.append(_summary("Gavel spread, held-out batch sizes", pred[~train], cases.gv_measured[~train],
                        "held out: each family fitted on alternate batch sizes"))
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------------------------------


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
    parser.add_argument("--write", action="store_true", help="regenerate scheduler/data/workloads.csv")
    parser.add_argument("--no-holdout", action="store_true", help="skip the hold-out refits")
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    raise SystemExit(main())
