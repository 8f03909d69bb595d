"""Placement policies: one protocol (`policies.base.Policy`), a registry, heuristics and learned policies."""

from policies import contention_greedy, deepshare, gittins, heuristics, rl, tiresias  # noqa: F401  (importing registers them)
from policies.base import Decision, Place, Policy, Preempt, Wait, WakeAt
from policies.registry import available, make_policy

__all__ = ["Decision", "Place", "Policy", "Preempt", "Wait", "WakeAt", "available", "make_policy"]
