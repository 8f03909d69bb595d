"""Fit the workload catalog and the contention constants to published measurements, and validate the model.

* `data`: the raw DeepShare and Gavel measurements, and the testbeds and placements they were measured on;
* `fit`: a vectorised replica of the contention model's formulas, and the least-squares fits on it;
* `catalog`: the fits assembled into the catalog's profiles and `ContentionParams` (`calibrate`), and its CSV text;
* `validate`: the real contention model scored on the measurements, and hold-out refits;
* `reporting`: the fit report and `main`, the command `python -m scheduler.core.calibrate [--shared DIR] [--write]`.

Everything public is importable from here (`from scheduler.core.calibrate import calibrate`).
"""

from __future__ import annotations

from scheduler.core.calibrate.catalog import CATALOG_PATH, CSV_COLUMNS, Calibration, calibrate, catalog_csv
from scheduler.core.calibrate.data import (
    DEEPSHARE_BATCH,
    DEEPSHARE_MODELS,
    DEEPSHARE_SRC,
    DEFAULT_SHARED,
    GAVEL_FAMILIES,
    GAVEL_SRC,
    NIC_GBPS,
    TESTBED_NOTES,
    V100_MEM_GB,
    DeepShareData,
    GavelData,
    deepshare_placement,
    deepshare_testbed,
    gavel_family,
    gavel_name,
    gavel_placement,
    gavel_testbed,
    load_deepshare,
    load_gavel,
)
from scheduler.core.calibrate.fit import (
    MEM_PRIOR_GB,
    OVERLAP_PRIOR_WEIGHT,
    TR_SOLVER,
    NetworkFit,
    SharingFit,
    fit_memory,
    fit_network,
    fit_sharing,
)
from scheduler.core.calibrate.reporting import main, report
from scheduler.core.calibrate.validate import (
    Validation,
    deepshare_pair_predictions,
    deepshare_spread_predictions,
    gavel_pair_predictions,
    gavel_spread_predictions,
    holdout,
    validate_all,
    validate_deepshare_pairs,
    validate_deepshare_spread,
    validate_gavel_pairs,
    validate_gavel_spread,
)

__all__ = [
    "CATALOG_PATH",
    "CSV_COLUMNS",
    "DEEPSHARE_BATCH",
    "DEEPSHARE_MODELS",
    "DEEPSHARE_SRC",
    "DEFAULT_SHARED",
    "GAVEL_FAMILIES",
    "GAVEL_SRC",
    "MEM_PRIOR_GB",
    "NIC_GBPS",
    "OVERLAP_PRIOR_WEIGHT",
    "TESTBED_NOTES",
    "TR_SOLVER",
    "V100_MEM_GB",
    "Calibration",
    "DeepShareData",
    "GavelData",
    "NetworkFit",
    "SharingFit",
    "Validation",
    "calibrate",
    "catalog_csv",
    "deepshare_pair_predictions",
    "deepshare_placement",
    "deepshare_spread_predictions",
    "deepshare_testbed",
    "fit_memory",
    "fit_network",
    "fit_sharing",
    "gavel_family",
    "gavel_name",
    "gavel_pair_predictions",
    "gavel_placement",
    "gavel_spread_predictions",
    "gavel_testbed",
    "holdout",
    "load_deepshare",
    "load_gavel",
    "main",
    "report",
    "validate_all",
    "validate_deepshare_pairs",
    "validate_deepshare_spread",
    "validate_gavel_pairs",
    "validate_gavel_spread",
]
