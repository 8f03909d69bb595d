"""The raw measurements the calibration fits on, and the testbeds and placements they were measured on.

The raw DeepShare (ICPADS'23) and Gavel (OSDI'20) artifacts are read from `../shared/calibration` (never copied into
the project) into `DeepShareData` and `GavelData`.

Testbeds assumed (the artifacts do not state everything; the assumptions are spelled out in `TESTBED_NOTES`):

* DeepShare: 8 PCIe servers x 8 GPUs (two PCIe switches per server), one 10 Gb/s Ethernet NIC each, one switch. Their
  launch scripts set `NCCL_IB_DISABLE=1` (NCCL over TCP sockets) and place a job's GPUS evenly on NODES servers; their
  isolated table has 8-server placements, so the measurement testbed had at least 8 servers. GPU type not stated:
  taken as V100-class, so their step times are read as V100 times.
* Gavel: AWS V100-16GB servers with NVLink (p3 family); a consolidated job sits on one 8-GPU server, an unconsolidated
  one puts each worker on its own server, across a 10 Gb/s network.
"""

from __future__ import annotations

import ast
import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.core.model import (
    Cluster,
    ClusterSpec,
    JobSpec,
    NodeGroupSpec,
    NodeTypeSpec,
    Placement,
    build_cluster,
)

DEFAULT_SHARED = Path(__file__).resolve().parents[4] / "shared" / "calibration"

DEEPSHARE_SRC = "DeepShare (Ryu & Eo, ICPADS'23; github.com/gajagajago/deepshare, Apache-2.0)"
GAVEL_SRC = "Gavel (Narayanan et al., OSDI'20; github.com/stanford-futuredata/gavel, MIT), simulation_throughputs.json"

DEEPSHARE_MODELS = ("MobileNetV3", "GraphSage", "FSDP", "Transformer-XL", "DLRM", "MoE")
# Per-GPU mini-batch of each DeepShare job, from their Slurm launch scripts and script defaults
# (slurm_examples/job_launch_scripts/isolated/*.sh: timm mobilenetv3_small_075 --batch-size=16, graphsage
# --batch-size=1024, transformer-xl --batch_size 16, dlrm --mini-batch-size=48; fsdp.py and moe.py default -b 8).
# Their profiler counts batch x world size samples per step, so one step of a G-GPU job takes batch * G / throughput.
DEEPSHARE_BATCH = {"MobileNetV3": 16, "GraphSage": 1024, "FSDP": 8, "Transformer-XL": 16, "DLRM": 48, "MoE": 8}
GAVEL_FAMILIES = ("ResNet-18", "ResNet-50", "Transformer", "LM")  # the job types Gavel also ran on 2, 4 and 8 GPUs
V100_MEM_GB = 16.0  # Gavel's V100s are AWS p3 V100-SXM2-16GB: a pair "does not fit" when it exceeds 16 GB
NIC_GBPS = 10.0

TESTBED_NOTES = (
    ("DeepShare testbed: 8 servers x 8 GPUs on PCIe (2 switches of 4 GPUs, 12 GB/s each, 9 GB/s between sockets), "
     "10 Gb/s Ethernet, one switch; NCCL over TCP (their scripts set NCCL_IB_DISABLE=1); a GPUS,NODES job takes "
     "GPUS/NODES GPUs on each of NODES servers; GPU speed taken as a V100's (not stated in the artifact)."),
    ("DeepShare pairs: job A is placed first; job B takes the next free GPUs on the first NODES_B servers, so A and B "
     "share min(NODES_A, NODES_B) servers (their NICs and, where GPUs meet, PCIe switches); the ratio is A's slowdown "
     "alone on its placement divided by its slowdown with B."),
    ("Gavel testbed: 8 servers x 8 V100-16GB with NVLink (150 GB/s per GPU, AWS p3.16xlarge-like), 10 Gb/s between "
     "servers (AWS p3 'up to 10 Gigabit' class); consolidated = all workers on one server, unconsolidated = one worker "
     "per server. Co-location pairs: two 1-GPU jobs on one GPU with no MPS thread cap (share 1.0)."),
)


# ----------------------------------------------------------------------------------------------------------------------
# Raw data
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeepShareData:
    isolated: dict[tuple[str, int, int], float]  # (model, gpus, nodes) -> samples/s alone
    configs: list[tuple[str, int, int]]  # row/column order of the shared matrix
    shared: np.ndarray  # [36, 36] A's throughput with B / A alone


@dataclass(frozen=True)
class GavelData:
    isolated: dict[tuple[str, int], float]  # (job type, scale) -> steps/s, consolidated, V100
    unconsolidated: dict[tuple[str, int], float]  # (job type, scale) -> steps/s, spread, V100
    pairs: dict[tuple[str, str], tuple[float, float]]  # (this, other) 1-GPU types on one V100 -> (this, other) steps/s
    types: list[str]  # 1-GPU job types in file order


def _parse_config(text: str) -> tuple[str, int, int]:
    model, gpus, nodes = text.split(",")
    return model, int(gpus), int(nodes)


def load_deepshare(shared: Path | str | None = None) -> DeepShareData:
    root = Path(shared) if shared is not None else DEFAULT_SHARED
    isolated: dict[tuple[str, int, int], float] = {}
    with open(root / "deepshare_isolated_thp.csv", newline="") as f:
        for row in csv.DictReader(f):
            isolated[_parse_config(row[""])] = float(row["isol_thp"])
    with open(root / "deepshare_shared_thp_ratio.csv", newline="") as f:
        rows = list(csv.reader(f))
    configs = [_parse_config(c) for c in rows[0][1:]]
    if [_parse_config(r[0]) for r in rows[1:]] != configs:
        raise ValueError("deepshare_shared_thp_ratio.csv: row and column orders differ")
    shared_m = np.array([[float(x) for x in r[1:]] for r in rows[1:]])
    return DeepShareData(isolated, configs, shared_m)


def gavel_name(job_type: str) -> str:
    """Catalog name of a Gavel job type: 'ResNet-18 (batch size 64)' -> 'ResNet-18-bs64', 'A3C' -> 'A3C'."""
    if " (batch size " in job_type:
        family, bs = job_type.split(" (batch size ")
        return f"{family}-bs{bs.rstrip(')')}"
    return job_type


def gavel_family(name: str) -> str:
    return name.split("-bs")[0]


def load_gavel(shared: Path | str | None = None) -> GavelData:
    root = Path(shared) if shared is not None else DEFAULT_SHARED
    raw = json.loads((root / "gavel_simulation_throughputs.json").read_text())
    isolated: dict[tuple[str, int], float] = {}
    unconsolidated: dict[tuple[str, int], float] = {}
    pairs: dict[tuple[str, str], tuple[float, float]] = {}
    types: list[str] = []
    for key, entry in raw["v100"].items():
        job_type, scale = ast.literal_eval(key)
        name = gavel_name(job_type)
        isolated[(name, scale)] = float(entry["null"])
        if scale == 1:
            types.append(name)
            for other, value in entry.items():
                if other == "null":
                    continue
                other_type, other_scale = ast.literal_eval(other)
                if other_scale == 1:
                    pairs[(name, gavel_name(other_type))] = (float(value[0]), float(value[1]))
    for key, entry in raw["v100_unconsolidated"].items():
        job_type, scale = ast.literal_eval(key)
        unconsolidated[(gavel_name(job_type), scale)] = float(entry["null"])
    return GavelData(isolated, unconsolidated, pairs, types)


# ----------------------------------------------------------------------------------------------------------------------
# Testbeds and placements
# ----------------------------------------------------------------------------------------------------------------------


def deepshare_testbed() -> Cluster:
    node = NodeTypeSpec(
        gpu="V100-16GB", gpus_per_node=8, interconnect="pcie", pcie_switches=2, pcie_switch_gbs=12.0, socket_gbs=9.0,
        nic_gbps=NIC_GBPS,
    )
    spec = ClusterSpec(name="deepshare-testbed", nodes_per_rack=8, oversubscription=1.0,
                       groups=[NodeGroupSpec(count=8, node=node)])
    return build_cluster(spec)


def gavel_testbed() -> Cluster:
    node = NodeTypeSpec(gpu="V100-16GB", gpus_per_node=8, interconnect="nvlink", nvlink_gbs=150.0, nic_gbps=NIC_GBPS)
    spec = ClusterSpec(name="gavel-testbed", nodes_per_rack=8, oversubscription=1.0,
                       groups=[NodeGroupSpec(count=8, node=node)])
    return build_cluster(spec)


def deepshare_placement(cluster: Cluster, gpus: int, nodes: int, used: set[int] | None = None) -> Placement:
    """GPUS/NODES GPUs on each of the first NODES servers, the lowest-numbered free ones."""
    used = used or set()
    per = gpus // nodes
    chosen: list[int] = []
    for n in range(nodes):
        free = [g for g in cluster.node_gpus(n) if g not in used]
        if len(free) < per:
            raise ValueError(f"server {n} has {len(free)} free GPUs, {per} needed")
        chosen.extend(free[:per])
    return Placement(tuple(chosen))


def gavel_placement(cluster: Cluster, scale: int, consolidated: bool) -> Placement:
    if consolidated:
        return Placement(tuple(range(scale)))
    return Placement(tuple(int(cluster.node_first_gpu[n]) for n in range(scale)))


def _spec(model: str, gpus: int) -> JobSpec:
    return JobSpec(name=model, submit_s=0.0, num_gpus=float(gpus), duration_s=1.0, model=model)
