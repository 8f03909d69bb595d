"""Least-squares fits of the catalog's parameters and the contention constants to the raw measurements.

What is fitted on what (few parameters per model, so the model has to generalise):

* network (`compute_ms`, `grad_mb`, `overlap` of the six DeepShare models; `grad_mb`, `overlap` of the four Gavel model
  families that have multi-GPU runs, shared by every batch size of a family; `ContentionParams.ring_straggler`), jointly
  on: DeepShare isolated iteration times (6 placements per model), DeepShare pairs sharing servers (36 x 36), Gavel V100
  spread penalties (unconsolidated / consolidated throughput, 2, 4 and 8 GPUs);
* GPU sharing (`sm`, `membw` of the 26 Gavel job types; `ContentionParams.mps_interference`, `mps_overhead`) on Gavel's
  V100 co-location pairs; `mem_gb` of the Gavel job types on which pairs did not fit in a 16 GB V100 (hinge loss);
* `compute_ms` of a Gavel job type is its measured isolated V100 step time (1 / steps per second).

The fits use `scipy.optimize.least_squares` (deterministic: fixed starting points, no random restarts). The network
and GPU-sharing fits evaluate a vectorised replica of the contention model's formulas (`_NetworkCases`,
`_two_tenant_ratio`) rather than placing jobs with `ContentionModel`; a test checks the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from scheduler.core.calibrate.data import (
    DEEPSHARE_BATCH,
    DEEPSHARE_MODELS,
    GAVEL_FAMILIES,
    V100_MEM_GB,
    DeepShareData,
    GavelData,
    deepshare_placement,
    deepshare_testbed,
    gavel_family,
    gavel_placement,
    gavel_testbed,
)
from scheduler.core.collectives import collective_traffic
from scheduler.core.model import INTER_SERVER, Cluster, Placement

OVERLAP_PRIOR_WEIGHT = 0.02
MEM_PRIOR_GB = 2.0
# The iterative trust-region solver: same answer whatever the BLAS thread count (the dense one's SVDs differ in the last
# digits with threading, and multithreaded BLAS on these small matrices is 40x slower on a busy machine).
TR_SOLVER = "lsmr"


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
    inter_kind = np.array([k in INTER_SERVER for k in cluster.link_kind], dtype=float)
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
        for p, (la, lb) in enumerate(zip(self.pair_a.links, self.pair_b.links, strict=False)):
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
    t_min = {m: min(t for (mm, _g, _n), t in zip(cases.ds_configs, cases.ds_measured_s, strict=False) if mm == m)
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
    return {t: float(v) for t, v in zip(types, res.x, strict=False)}
