"""Job traces: loaders for the Corral CSV, Philly and Alibaba formats, and a synthetic workload generator.

* `trace`: `Trace` (the jobs a loader returns, and what it skipped) and `TraceError`;
* `models`: model assignment, the catalog model drawn for a job whose trace names none;
* `tables`: reading CSV files (line numbers kept for error messages) and telling the formats apart by their header;
* `formats`: the Corral CSV, Philly and Alibaba parsers, and `load_trace`;
* `generator`: synthetic workloads (`synthetic`, and the `synthetic:N,...` spec);
* `windows`: windows of a trace, the training / held-out split, offered load and fitting a window to a load.

Everything public is importable from here (`from scheduler.core.traces import load_trace`).
"""

from __future__ import annotations

from scheduler.core.traces.formats import FORMATS, load_trace
from scheduler.core.traces.generator import SYNTH_KEYS, SYNTH_SHARES, SYNTH_SIZES, parse_synthetic_spec, synthetic
from scheduler.core.traces.models import HEAVY_GRAD_MB, HEAVY_WEIGHT, draw_models, inference_fits
from scheduler.core.traces.tables import (
    ALIBABA_COLUMNS,
    ALIBABA_FEATURES,
    ALIBABA_USED,
    CORRAL_OPTIONAL,
    CORRAL_REQUIRED,
    PHILLY_COLUMNS,
    PHILLY_USED,
    detect_format,
)
from scheduler.core.traces.trace import SMALLEST_GPU_GB, Trace, TraceError
from scheduler.core.traces.windows import (
    HOLDOUT_FROM,
    LOAD_TOLERANCE,
    LoadFit,
    fit_load,
    nodes_for_load,
    offered_load,
    scale_to_load,
    window,
    window_starts,
)

__all__ = [
    "ALIBABA_COLUMNS",
    "ALIBABA_FEATURES",
    "ALIBABA_USED",
    "CORRAL_OPTIONAL",
    "CORRAL_REQUIRED",
    "FORMATS",
    "HEAVY_GRAD_MB",
    "HEAVY_WEIGHT",
    "HOLDOUT_FROM",
    "LOAD_TOLERANCE",
    "PHILLY_COLUMNS",
    "PHILLY_USED",
    "SMALLEST_GPU_GB",
    "SYNTH_KEYS",
    "SYNTH_SHARES",
    "SYNTH_SIZES",
    "LoadFit",
    "Trace",
    "TraceError",
    "detect_format",
    "draw_models",
    "fit_load",
    "inference_fits",
    "load_trace",
    "nodes_for_load",
    "offered_load",
    "parse_synthetic_spec",
    "scale_to_load",
    "synthetic",
    "window",
    "window_starts",
]
