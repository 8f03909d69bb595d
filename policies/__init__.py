"""Placement policies: a registry, heuristics and learned policies. The one protocol they implement, and the decisions
they return, are `scheduler.core.decisions` (the only import path for them: the core defines them so that it never
imports `policies`)."""

from policies import (  # noqa: F401  (importing registers them)
    contention_greedy,
    deepshare,
    gittins,
    guarded,
    heuristics,
    marginal_gain,
    rl,
    sizing,
    tiresias,
    topology,
)
from policies.registry import available, make_policy

__all__ = ["available", "make_policy"]
