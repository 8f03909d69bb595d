"""The GPUs' health as the node agent last read it, in `health.json` in the node folder: what a person reads
(`corral node health`), and what the agent pushes to the API with `--api` (`scheduler.live.node.report`). The
controller keeps new jobs off a GPU a fresh report calls faulty (`scheduler.live.nodes.gpu_faults`)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scheduler.live.node.hardware import NodeHardware
from scheduler.live.node.nvml import GpuReading, Nvml

HEALTH_FILE = "health.json"


def readings(hardware: NodeHardware, nvml: Nvml | None) -> list[GpuReading]:
    """Per-GPU readings: NVML's, or "virtual" for logical GPUs (nothing to measure)."""
    if nvml is None:
        return [GpuReading(i, "virtual") for i in range(hardware.gpus)]
    try:
        return nvml.readings()
    except Exception as exc:  # noqa: BLE001 - a failing driver must not kill the agent; the file says what happened
        return [GpuReading(i, "unreachable", error=f"{type(exc).__name__}: {exc}") for i in range(hardware.gpus)]


def write_health(node_dir: Path, name: str, hardware: NodeHardware, gpus: list[GpuReading],
                 mps: dict[str, object], agent: str = "running", now: float | None = None) -> dict[str, Any]:
    report: dict[str, object] = {
        "node": name,
        "agent": agent,  # running, or stopped: the agent has left and the readings are its last
        "updated_at": time.time() if now is None else now,
        "hardware": hardware.as_json(),
        "status": "ok" if all(g.status in ("ok", "virtual") for g in gpus) else "degraded",
        "gpus": [asdict(g) for g in gpus],
        "mps": mps,
    }
    text = json.dumps(report, indent=1)
    tmp = node_dir / (HEALTH_FILE + ".tmp")
    tmp.write_text(text)
    tmp.replace(node_dir / HEALTH_FILE)  # atomic: a reader never sees half a report
    return dict(json.loads(text))  # what a reader of the file gets (lists, not tuples)


def read_health(node_dir: Path) -> dict[str, Any]:
    return dict(json.loads((node_dir / HEALTH_FILE).read_text()))
