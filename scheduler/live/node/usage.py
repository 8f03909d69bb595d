"""What a run's processes use of their GPUs, sampled through NVML while they run: the measurement a job that names no
model has its generic profile refined from (`scheduler.core.generic`).

A rank's worker starts a `UsageSampler` beside its command. Every `SAMPLE_S` it asks NVML, for each of the rank's
GPUs, which processes hold memory there and how busy each kept the SMs and the memory controller, and counts those of
the job's process group (the command runs in a session of its own: `Worker._command`), so another job's processes on
a shared GPU are never counted as this one's. On a node without NVML (no driver, no bindings: CI, the emulated
cluster) nothing is sampled and the run reports no usage.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from scheduler.core.generic import MeasuredUsage
from scheduler.live.node.nvml import Nvml, NvmlUnavailable

log = logging.getLogger(__name__)

NVML_MODULE: ModuleType | Any | None = None  # pynvml; a test sets a stand-in here
SAMPLE_S = 5.0  # NVML keeps per-process utilisation samples for a few seconds; sampling slower would lose none of
# the memory peak's order of magnitude and costs a few NVML calls a GPU per sample


class UsageSampler:
    """Samples, every `every_s` until `stop`, what NVML attributes to the process group `pgid` on the node's GPUs
    `gpus` (NVML indices)."""

    def __init__(self, nvml: Nvml, gpus: Sequence[int], pgid: int, every_s: float = SAMPLE_S) -> None:
        self._nvml, self._gpus, self._pgid, self._every_s = nvml, tuple(gpus), pgid, every_s
        self._since = dict.fromkeys(self._gpus, 0)  # the newest utilisation sample read, per GPU (us)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"usage-{pgid}", daemon=True)
        self.samples = self.util_samples = 0
        self._sm = self._membw = self._mem_gb = 0.0

    @classmethod
    def start_for(cls, gpus: Sequence[int], pgid: int, module: ModuleType | Any | None = None,
                  every_s: float | None = None) -> UsageSampler | None:
        """A started sampler, or None where NVML cannot be used here (said once in the log, at debug level: most
        clusters Corral emulates have no GPU)."""
        try:
            nvml = Nvml(module if module is not None else NVML_MODULE, xid_events=False)
        except NvmlUnavailable as exc:
            log.debug("no GPU usage measured for process group %s: %s", pgid, exc)
            return None
        sampler = cls(nvml, gpus, pgid, every_s if every_s is not None else SAMPLE_S)
        sampler._thread.start()
        return sampler

    def stop(self) -> MeasuredUsage | None:
        """Ends the sampling (one last sample first) and closes NVML; what was measured, or None if nothing was."""
        self._stop.set()
        self._thread.join(timeout=self._every_s + 5.0)
        self._nvml.close()
        return self.usage()

    def usage(self) -> MeasuredUsage | None:
        if self.samples == 0:
            return None
        n = self.util_samples
        return MeasuredUsage(self.samples, n, self._sm / n if n else 0.0, self._membw / n if n else 0.0,
                             self._mem_gb, runs=1)

    def _loop(self) -> None:
        while True:
            stopping = self._stop.wait(self._every_s)
            try:
                self.sample()
            except Exception:  # a measurement is advice: a fault in it never touches the job
                log.exception("sampling GPU usage of process group %s", self._pgid)
                return
            if stopping:
                return

    def _ours(self, pid: int) -> bool:
        try:
            return os.getpgid(pid) == self._pgid
        except OSError:  # gone since NVML listed it, or another PID namespace's: not ours to count
            return False

    def sample(self) -> None:
        """One sample of every GPU: the group's memory (its largest on one GPU), and its SM and memory-controller
        busy fractions averaged over the GPUs NVML gave a reading for."""
        mem_gb = 0.0
        sm: list[float] = []
        membw: list[float] = []
        for gpu in self._gpus:
            held = sum(mib for pid, mib in self._nvml.process_memory(gpu).items() if self._ours(pid))
            mem_gb = max(mem_gb, held / 1024.0)
            latest: dict[int, tuple[int, float, float]] = {}
            for pid, ts, s, m in self._nvml.process_utilization(gpu, self._since[gpu]):
                self._since[gpu] = max(self._since[gpu], ts)
                if self._ours(pid) and ts >= latest.get(pid, (-1, 0.0, 0.0))[0]:
                    latest[pid] = (ts, s, m)
            if latest:
                sm.append(min(sum(v[1] for v in latest.values()) / 100.0, 1.0))
                membw.append(min(sum(v[2] for v in latest.values()) / 100.0, 1.0))
        if mem_gb <= 0 and not sm:
            return  # the job holds nothing on its GPUs yet (starting, or CPU-only work): not a sample of its use
        self.samples += 1
        self._mem_gb = max(self._mem_gb, mem_gb)
        if sm:
            self.util_samples += 1
            self._sm += sum(sm) / len(sm)
            self._membw += sum(membw) / len(membw)
