"""Validation of the contention model on the calibration data, and hold-out refits.

The validation functions place jobs on the testbeds of `scheduler.core.calibrate.data` with the real
`ContentionModel` (the fit uses a vectorised replica of the same formulas, `_NetworkCases`; a test checks the two
agree). `holdout` refits each dataset's parameters on a part of it and scores the part left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import spearmanr

from scheduler.core.calibrate.data import (
    DEEPSHARE_MODELS,
    GAVEL_FAMILIES,
    _spec,
    deepshare_placement,
    deepshare_testbed,
    gavel_family,
    gavel_placement,
    gavel_testbed,
    load_deepshare,
    load_gavel,
)
from scheduler.core.calibrate.fit import (
    _alone,
    _NetworkCases,
    _pair_arrays,
    _two_tenant_ratio,
    fit_network,
    fit_sharing,
)
from scheduler.core.contention import ContentionModel, ContentionParams
from scheduler.core.model import ClusterSpec, NodeGroupSpec, NodeTypeSpec, Placement, build_cluster
from scheduler.core.workloads import ModelProfile, catalog

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


def _summary(name: str, pred: ArrayLike, meas: ArrayLike, basis: str, **extra: float) -> Validation:
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
    unordered = [tuple(sorted((int(r), int(c)))) for r, c in zip(cases.pair_rows, cases.pair_cols, strict=False)]
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
    spread_pred, spread_meas = [], []
    for (m, g, n), k in at.items():
        if n > 2:
            base = at[(m, g, 2)]
            spread_pred.append(t[base] / t[k])
            spread_meas.append(ds.isolated[(m, g, n)] / ds.isolated[(m, g, 2)])
    out.append(_summary("DeepShare spread, from 2-server runs + pairs", spread_pred, spread_meas,
                        "held out: 4- and 8-server isolated runs not fitted on"))

    # (c) Gavel co-location: train on half of the unordered type pairs.
    _types, i, j, y, fits = _pair_arrays(gv)
    unordered = [tuple(sorted((int(a), int(b)))) for a, b in zip(i, j, strict=False)]
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
