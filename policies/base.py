"""The one policy interface shared by the simulator, the RL environment and the live controller.

The protocol and the decision types are defined in the core (`scheduler.core.decisions`, so the core never imports
`policies`) and re-exported here for policy authors.
"""

from scheduler.core.decisions import Decision, Place, Policy, Preempt, Wait, WakeAt

__all__ = ["Decision", "Place", "Policy", "Preempt", "Wait", "WakeAt"]
