"""Model assignment: which catalog model a job of a trace that names none runs.

Model assignment (traces that name no model): one uniform number per job, drawn from `numpy.random.default_rng(seed)`
in arrival order over all kept jobs before `limit` applies, so a seed gives the same models, and a shorter `limit`
gives the same models to the jobs it keeps. Pools hold only models that fit the smallest GPU we ship (16 GB): a trace
that names no model ran on the GPUs of its day, and the catalog's LLM-scale profiles (measured on an H100, 20-62 GB)
would not have fitted them. The number picks a model from the job's pool by weight:

* inference jobs: inference models (each weight 1); the job takes the model's `slo_ms`;
* fractional jobs (share s): only models with `mem_gb <= s * 16`, i.e. that fit in that share of the smallest GPU we
  ship (16 GB); if none fits (a share below ~0.1), the model of the job's kind with the smallest footprint (the
  share's MPS memory cap is then too small on a 16 GB GPU: admission refuses the job where no GPU's cap holds it,
  `scheduler.core.colocation`). Corral CSV rows get an error instead;
* one-GPU training jobs: every such training model, weight 1 (no communication, so only compute and memory matter);
* multi-GPU training jobs: every such training model, communication-heavy ones (`grad_mb >= 500`: FSDP, MoE,
  Transformer-XL in the current catalog) at weight 2, others at weight 1 (about 3/8 heavy), so that jobs sharing
  links contend as DeepShare measured, without every large job being the worst case.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from scheduler.core.traces.trace import SMALLEST_GPU_GB
from scheduler.core.workloads import catalog, inference_models, training_models

HEAVY_GRAD_MB = 500.0  # gradient MB per iteration from which a model counts as communication-heavy
HEAVY_WEIGHT = 2.0  # draw weight of a communication-heavy model for multi-GPU jobs (others: 1)


@cache
def _pool(inference: bool, multi: bool, share: float) -> tuple[tuple[str, ...], np.ndarray]:
    """Models a job may draw and their cumulative weights; empty when no model of its kind fits its share."""
    profiles = catalog()
    names = [m for m in (inference_models() if inference else training_models())
             if profiles[m].mem_gb <= SMALLEST_GPU_GB + 1e-9]
    if share < 1.0:
        names = [m for m in names if profiles[m].mem_gb <= share * SMALLEST_GPU_GB + 1e-9]
    weights = [
        HEAVY_WEIGHT if (multi and not inference and profiles[m].grad_mb >= HEAVY_GRAD_MB) else 1.0 for m in names
    ]
    return tuple(names), np.cumsum(np.array(weights, dtype=np.float64))


def _smallest(inference: bool) -> str:
    names = inference_models() if inference else training_models()
    return min(names, key=lambda m: catalog()[m].mem_gb)


def inference_fits(share: float) -> bool:
    """Whether some inference model fits in `share` of the smallest GPU (decides if an LS pod can be a service)."""
    return bool(_pool(True, False, min(share, 1.0))[0])


def draw_models(num_gpus: np.ndarray, inference: np.ndarray, u: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Pick a model per job from its pool (see the module docstring) with the uniform numbers `u`.

    Vectorised over groups of jobs with the same pool, so a 100,000-job trace costs a few searchsorted calls.
    Returns the names and a mask of jobs whose share no model of their kind fits (given the smallest-footprint model).
    """
    n = len(num_gpus)
    share = np.where(num_gpus < 1, num_gpus, 1.0)
    multi = num_gpus >= 2
    keys = np.stack([inference.astype(np.float64), multi.astype(np.float64), share])
    uniq, inverse = np.unique(keys, axis=1, return_inverse=True)
    inverse = inverse.reshape(-1)
    out = np.empty(n, dtype=object)
    nofit = np.zeros(n, dtype=bool)
    for k in range(uniq.shape[1]):
        inf_k, multi_k, share_k = bool(uniq[0, k]), bool(uniq[1, k]), float(uniq[2, k])
        idx = np.flatnonzero(inverse == k)
        names, cum = _pool(inf_k, multi_k, share_k)
        if not names:
            out[idx] = _smallest(inf_k)
            nofit[idx] = True
            continue
        pick = np.searchsorted(cum, u[idx] * cum[-1], side="right")
        out[idx] = np.array(names, dtype=object)[np.minimum(pick, len(names) - 1)]
    return out.tolist(), nofit
