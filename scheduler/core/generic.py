"""The profile of a job that names no model of the catalog (a command job running its user's own code), and its
refinement from what runs of jobs alike measured on their GPUs.

Without a model the contention model still needs a job's compute, SM and memory-bandwidth demand, memory and
gradient traffic. The generic profile is a typical job of the catalog; where NVML measured runs of jobs alike (the
node's worker samples the job's processes: `scheduler.live.node.usage`), their memory and their SM and memory-bandwidth
use replace the typical figures. Compute time, gradient size and overlap are not measurable from outside the job and
stay the generic's; the profile's `source` says which figures are whose.

Every profile a job may name is `known_profiles()`: the catalog's and the generic one. A refined profile is named
`generic~<figures>` in a `ProfileBook`, the mapping the simulator's and the controller's models read, so that jobs
refined alike share one entry.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from scheduler.core.model import JobKind
from scheduler.core.workloads import ModelProfile, catalog

GENERIC_MODEL = "generic"
MIN_UTIL_SAMPLES = 3  # fewer utilisation samples than this refine nothing: a run of seconds says little
MEM_MARGIN = 1.10  # a share is sized on the measured peak plus this margin (allocators grow; the peak was sampled)
MEM_MARGIN_MIN_GB = 0.5


@cache
def generic_profile() -> ModelProfile:
    """What the contention model assumes of a job that names no model: each figure the median over the catalog's
    training profiles, so that it is a typical job rather than a best or worst case, except its memory, the upper
    quartile, so that a GPU share is not given where most jobs would not fit."""
    train = [p for p in catalog().values() if p.kind is JobKind.TRAINING]

    def median(field: str) -> float:
        return round(statistics.median(getattr(p, field) for p in train), 4)

    return ModelProfile(
        name=GENERIC_MODEL, kind=JobKind.TRAINING, compute_ms=median("compute_ms"), sm=median("sm"),
        membw=median("membw"), mem_gb=round(statistics.quantiles([p.mem_gb for p in train], n=4)[2], 2),
        grad_mb=median("grad_mb"), overlap=median("overlap"),
        source=f"generic: no model named; the median of the catalog's {len(train)} training profiles (memory: their "
               "upper quartile)")


@cache
def known_profiles() -> dict[str, ModelProfile]:
    """Every profile a job may name, the catalog's and the generic one. One dict, shared as `catalog()`'s is: read
    it (per request, per listed job), never extend it (the controller's `ProfileBook` is its own copy)."""
    return catalog() | {GENERIC_MODEL: generic_profile()}


@dataclass(frozen=True, slots=True)
class MeasuredUsage:
    """What NVML saw of a job's processes on its GPUs over one or more runs. `util_samples`: samples with a
    utilisation reading (NVML gives none for an MPS client, so a run on a share measures memory only); `sm` and
    `membw`: their means, as fractions of a GPU; `mem_gb`: the largest memory one GPU held for it; `runs`: how many
    runs these come from."""

    samples: int = 0
    util_samples: int = 0
    sm: float = 0.0
    membw: float = 0.0
    mem_gb: float = 0.0
    runs: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "util_samples": self.util_samples, "sm": round(self.sm, 4),
                "membw": round(self.membw, 4), "mem_gb": round(self.mem_gb, 3), "runs": self.runs}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> MeasuredUsage | None:
        """The stored form back (None for none, or for a malformed one: a measurement is advice, never an error)."""
        if not d:
            return None
        try:
            out = cls(int(d["samples"]), int(d["util_samples"]), float(d["sm"]), float(d["membw"]),
                      float(d["mem_gb"]), int(d["runs"]))
        except (KeyError, TypeError, ValueError):
            return None
        ok = out.samples >= 0 and 0 <= out.util_samples <= out.samples and out.runs >= 0
        return out if ok and 0 <= out.sm <= 1 and 0 <= out.membw <= 1 and out.mem_gb >= 0 else None


def merged(usages: Iterable[MeasuredUsage | None]) -> MeasuredUsage | None:
    """Several measurements as one: utilisation means weighted by their samples, memory the largest peak."""
    got = [u for u in usages if u is not None and u.samples > 0]
    if not got:
        return None
    util = sum(u.util_samples for u in got)
    return MeasuredUsage(
        samples=sum(u.samples for u in got), util_samples=util,
        sm=sum(u.sm * u.util_samples for u in got) / util if util else 0.0,
        membw=sum(u.membw * u.util_samples for u in got) / util if util else 0.0,
        mem_gb=max(u.mem_gb for u in got), runs=sum(u.runs for u in got))


def refined_profile(usage: MeasuredUsage | None, whose: str = "jobs alike") -> ModelProfile:
    """The generic profile with what `usage` measured in place of its typical figures: memory (the peak plus a
    margin) wherever memory was sampled, SM and memory-bandwidth demand where at least `MIN_UTIL_SAMPLES`
    utilisation samples were taken. Figures are rounded to two significant digits, so that jobs measured alike share
    a profile (`ProfileBook`). `whose`: the runs' owner, in the source's words."""
    base = generic_profile()
    if usage is None or usage.samples == 0:
        return base
    got = {"mem_gb": _two_digits(max(usage.mem_gb * MEM_MARGIN, usage.mem_gb + MEM_MARGIN_MIN_GB))}
    if usage.util_samples >= MIN_UTIL_SAMPLES:
        got |= {"sm": _two_digits(min(max(usage.sm, 0.01), 1.0)), "membw": _two_digits(min(max(usage.membw, 0.01),
                                                                                             1.0))}
    named = ", ".join(f"{k} {v:g}" for k, v in got.items())
    runs = f"{usage.runs} run{'s' if usage.runs != 1 else ''}"
    source = (f"generic, refined from {usage.samples} NVML samples over {runs} of {whose}: {named} measured; "
              "compute, gradient size and overlap the generic's (not measurable from outside the job)")
    return replace(base, name=_name(got), source=source, mem_gb=got["mem_gb"], sm=got.get("sm", base.sm),
                   membw=got.get("membw", base.membw))


def _two_digits(x: float) -> float:
    return float(f"{x:.2g}")


def _name(got: Mapping[str, float]) -> str:
    return GENERIC_MODEL + "~" + ",".join(f"{k}={v:g}" for k, v in sorted(got.items()))


class ProfileBook(dict[str, ModelProfile]):
    """The profiles by name that the controller's models read: `known_profiles()` and the refined generic ones added
    to it (`add`). A refined profile's name states its figures, so jobs refined alike share one entry and the book
    grows with the distinct measurements (two significant digits each), not with the jobs. A dict, so that the
    contention model's lookups cost what they cost with the catalog's."""

    def add(self, profile: ModelProfile) -> str:
        """`profile` under its name (kept if one is there already); returns the name."""
        self.setdefault(profile.name, profile)
        return profile.name
