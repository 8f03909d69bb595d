"""Admission is one rule (`scheduler.core.admission`): the simulator, the controller's intake (`live.rows`), the API's
422 (`live.nodes.capacity_admission`) and what-if refuse the same jobs for the same reason (elastic jobs:
test_elastic_admission.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import job, small_cluster

from policies import make_policy
from scheduler.core.admission import Refusal, admission
from scheduler.core.model import JobPhase
from scheduler.core.simulator import Simulator
from scheduler.core.workloads import catalog
from scheduler.live.rows import admission_of

CASES = [("NoSuchNet", 1, "model", "unknown model 'NoSuchNet'"),
         ("ResNet-50-bs64", 16, "num_gpus", "needs 16 GPUs, the cluster has 8"),
         ("ResNet-50-bs64", 0.5, None, None),
         ("ResNet-50-bs64", 8, None, None)]


@pytest.mark.parametrize(("model", "gpus", "field", "why"), CASES)
def test_every_caller_takes_the_core_s_decision(model: str, gpus: float, field: str | None, why: str | None) -> None:
    cluster = small_cluster(nodes=2, gpus=4)
    profiles = catalog()
    refusal = admission(model, gpus, gpus=cluster.num_gpus, largest_gpu_gb=float(cluster.gpu_mem.max()),
                        profiles=profiles)
    assert ((refusal.field, refusal.why) if refusal else (None, None)) == (field, why)
    # The controller's intake, on a row.
    row = SimpleNamespace(name="j", model=model, num_gpus=gpus, duration_s=10.0, min_gpus=None, max_gpus=None,
                          sizes=None, constraints=None)
    verdict = admission_of(row, cluster, profiles)  # type: ignore[arg-type]
    assert (verdict.why if isinstance(verdict, Refusal) else verdict) == why
    # The simulator, on arrival (an unknown model cannot even be simulated: its profile is needed for the rest).
    if model in profiles:
        sim = Simulator(cluster, [job("j", 0, gpus, 10, model=model)], make_policy("fifo"))
        result = sim.run()
        (j,) = result.jobs
        assert (j.state is JobPhase.REJECTED) == (why is not None) and (j.reject_reason or None) == why


def test_a_model_too_big_for_every_gpu_is_refused_by_memory() -> None:
    cluster = small_cluster(nodes=1, gpus=2)
    big = max(catalog().values(), key=lambda m: m.mem_gb)
    refusal = admission(big.name, 1, gpus=2, largest_gpu_gb=big.mem_gb - 1, profiles=catalog())
    assert refusal is not None and refusal.field == "model" and f"needs {big.mem_gb:g} GB per GPU" in refusal.why
    assert admission(big.name, 1, gpus=cluster.num_gpus, largest_gpu_gb=big.mem_gb, profiles=catalog()) is None
