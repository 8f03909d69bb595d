"""Shared fixtures: small clusters built inline, job factories, and the path to ../shared (skip when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.model import Cluster, ClusterSpec, JobKind, JobSpec, NodeGroupSpec, NodeTypeSpec, build_cluster

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def shared_file(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: these tests need the shared traces/calibration data beside the repo")
    return path


def small_cluster(
    nodes: int = 2, gpus: int = 4, interconnect: str = "nvlink", nodes_per_rack: int = 16, gpu: str = "V100-32GB",
    switches: int = 1,
) -> Cluster:
    node = NodeTypeSpec(gpu=gpu, gpus_per_node=gpus, interconnect=interconnect, pcie_switches=switches,  # type: ignore[arg-type]
                        nic_gbps=100.0)
    return build_cluster(ClusterSpec(name=f"test-{nodes}x{gpus}", nodes_per_rack=nodes_per_rack,
                                     groups=[NodeGroupSpec(count=nodes, node=node)]))


def job(name: str, submit: float, gpus: float, duration: float, model: str = "ResNet-50-bs64",
        kind: JobKind = JobKind.TRAINING) -> JobSpec:
    return JobSpec(name=name, submit_s=submit, num_gpus=gpus, duration_s=duration, model=model, kind=kind)


@pytest.fixture
def tiny_cluster() -> Cluster:
    """One node of four GPUs: small enough to compute schedules by hand."""
    return small_cluster(nodes=1, gpus=4)
