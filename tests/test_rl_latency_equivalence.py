"""`rl:default` decides exactly as it did before its decision path was made faster (encoding 4, commit 88f2dc5).

Every decision of three high-load simulations is hashed: the observation's bytes, the action mask's bytes, the chosen
action, every call's returned decisions (their reprs: placements, victims, reasons, the candidates weighed with their
predicted slowdowns) and the final metrics. The digests below were recorded with the code as it was before the speed-ups
(the trained agent in agents/zoo/default.zip depends on the encoding being bit for bit the same). They also depend on
the floating-point behaviour of the locked numpy and torch (requirements.lock); after upgrading those, re-record them
from a checkout of that commit before trusting a mismatch to mean the encoding changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from agents.scenarios import SYNTHETIC_MIXES
from policies import make_policy
from scheduler.model import parse_cluster
from scheduler.simulator import Simulator
from scheduler.traces import scale_to_load, synthetic

# name: (cluster, synthetic mix, jobs, offered load, seed, digest)
CASES: dict[str, tuple[str, dict[str, Any], int, float, int, str]] = {
    "default": ("dgx-a100:8", {}, 350, 1.6, 1,
                "58ffa35250eedaebd989fcc116bfced5db554bd10334c840e6ee102aeb105352"),
    "fractional": ("dgx-a100:8", SYNTHETIC_MIXES["fractional"], 350, 1.8, 2,
                   "905702b3933e9d0f67f2130229a77cd19b4328afc206f61b09dad8eae978e3e4"),
    "multinode": ("dgx-a100:8", SYNTHETIC_MIXES["multinode"], 350, 1.6, 3,
                  "74ca1bd7d155c81434bbb73adf5a1c38decc9c1bfadba2e5bd269856cd9ffbeb"),
}


def decision_digest(cluster: str, mix: dict[str, Any], n_jobs: int, load: float, seed: int) -> tuple[str, int, int]:
    """(digest, decisions the agent took, preemptions) of `rl:default` on one synthetic simulation."""
    policy: Any = make_policy("rl:default", seed=0)
    h = hashlib.sha256()
    counts = [0, 0]
    act, schedule = policy.act, policy.schedule

    def recording_act(obs, mask):  # type: ignore[no-untyped-def]
        action = act(obs, mask)
        h.update(obs.tobytes())
        h.update(mask.tobytes())
        h.update(str(action).encode())
        counts[0] += 1
        return action

    def recording_schedule(view, queue, now):  # type: ignore[no-untyped-def]
        out = schedule(view, queue, now)
        text = repr(out)
        h.update(text.encode())
        counts[1] += text.count("Preempt(")
        return out

    policy.act, policy.schedule = recording_act, recording_schedule
    c = parse_cluster(cluster)
    jobs = scale_to_load(synthetic(n_jobs, seed=seed, **mix).jobs, c.num_gpus, load)
    sim = Simulator(c, jobs, policy)
    sim.run()
    h.update(json.dumps(sim.metrics(), sort_keys=True, default=repr).encode())
    return h.hexdigest(), counts[0], counts[1]


@pytest.mark.parametrize("name", list(CASES))
def test_rl_default_decides_bit_for_bit_as_before(name: str) -> None:
    cluster, mix, n_jobs, load, seed, expected = CASES[name]
    digest, decisions, preemptions = decision_digest(cluster, mix, n_jobs, load, seed)
    assert decisions > 500 and preemptions > 20  # the runs queue, preempt and decide often enough to mean something
    assert digest == expected
