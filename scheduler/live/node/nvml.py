"""The one boundary to NVML (`nvidia-ml-py`, imported as `pynvml`): everything the node agent learns of its GPUs
passes through `Nvml`, so tests replace the module here (the `module` parameter) and nowhere else."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

_MIB = 1024 * 1024


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine (no library, no driver, no permission); the message says which."""


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    name: str  # NVML's product name, e.g. "NVIDIA A100-SXM4-80GB"
    memory_mib: int
    uuid: str
    # What else NVML says of the board, where it says it (None: this board, driver or stand-in does not report it).
    driver: str | None = None
    compute_capability: str | None = None  # "9.0" for Hopper
    mig_mode: bool | None = None  # MIG enabled: the GPU is split into instances and takes no MPS client as a whole
    cuda_cores: int | None = None  # nvmlDeviceGetNumGpuCores (SMs x cores per SM: 132 x 128 on an H100 SXM)


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's state at one moment. `status`: ok, degraded (uncorrected ECC errors or a critical XID since the agent
    started) or unreachable (NVML cannot query it: fallen off the bus, or a driver fault)."""

    index: int
    status: str
    temperature_c: int | None = None
    ecc_uncorrected: int | None = None  # volatile count (since the last driver reload); None: not supported
    xid_errors: tuple[int, ...] = ()  # critical XID codes seen since the agent started
    error: str = ""


class Nvml:
    """An initialised NVML session. `module` is `pynvml` unless a test gives a stand-in with the same functions."""

    def __init__(self, module: ModuleType | Any | None = None, *, xid_events: bool = True) -> None:
        if module is None:
            try:
                module = importlib.import_module("pynvml")
            except ImportError:
                raise NvmlUnavailable("the NVML bindings are not installed (pip install nvidia-ml-py)") from None
        self._nv = module
        try:
            module.nvmlInit()
        except module.NVMLError as exc:
            raise NvmlUnavailable(f"NVML did not start ({exc}): is the NVIDIA driver installed and loaded?") from None
        self._handles = [module.nvmlDeviceGetHandleByIndex(i) for i in range(module.nvmlDeviceGetCount())]
        self._xids: dict[int, list[int]] = {i: [] for i in range(len(self._handles))}
        self._events = self._register_xid_events() if xid_events else None

    def _register_xid_events(self) -> Any | None:
        # Critical XIDs (e.g. 79, fallen off the bus; 48, double-bit ECC) only arrive as events. Not every GPU or
        # driver supports them (consumer boards, some vGPUs): health then goes without.
        nv = self._nv
        try:
            events = nv.nvmlEventSetCreate()
            for h in self._handles:
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, events)
            return events
        except (nv.NVMLError, AttributeError):
            return None

    def _optional(self, fn: str, *args: Any) -> Any:
        """An NVML query that older drivers, some boards and NVML stand-ins do not answer: None then."""
        try:
            value = getattr(self._nv, fn)(*args)
        except (self._nv.NVMLError, AttributeError):
            return None
        return value.decode() if isinstance(value, bytes) else value

    def devices(self) -> list[GpuDevice]:
        nv = self._nv
        driver = self._optional("nvmlSystemGetDriverVersion")
        out = []
        for i, h in enumerate(self._handles):
            name = nv.nvmlDeviceGetName(h)
            uuid = nv.nvmlDeviceGetUUID(h)
            cc = self._optional("nvmlDeviceGetCudaComputeCapability", h)
            mig = self._optional("nvmlDeviceGetMigMode", h)  # (current, pending)
            cores = self._optional("nvmlDeviceGetNumGpuCores", h)
            out.append(GpuDevice(i, name.decode() if isinstance(name, bytes) else str(name),
                                 int(nv.nvmlDeviceGetMemoryInfo(h).total) // _MIB,
                                 uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                                 driver=str(driver) if driver is not None else None,
                                 compute_capability=f"{cc[0]}.{cc[1]}" if isinstance(cc, tuple | list) else None,
                                 mig_mode=bool(mig[0]) if isinstance(mig, tuple | list) else None,
                                 cuda_cores=int(cores) if isinstance(cores, int) else None))
        return out

    def readings(self) -> list[GpuReading]:
        nv = self._nv
        self._drain_xid_events()
        out = []
        for i, h in enumerate(self._handles):
            try:
                temp = int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            except nv.NVMLError as exc:  # the GPU does not answer: nothing else about it can be trusted
                out.append(GpuReading(i, "unreachable", error=str(exc)))
                continue
            try:
                ecc: int | None = int(nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                                     nv.NVML_VOLATILE_ECC))
            except nv.NVMLError:  # ECC off or not supported on this board
                ecc = None
            xids = tuple(self._xids[i])
            status = "degraded" if (ecc or 0) > 0 or xids else "ok"
            out.append(GpuReading(i, status, temp, ecc, xids))
        return out

    def process_memory(self, index: int) -> dict[int, float]:
        """MiB each compute process holds on GPU `index`, by pid (a process NVML gives no figure for is left out;
        an error reads as none: a measurement is advice)."""
        got = self._optional("nvmlDeviceGetComputeRunningProcesses", self._handles[index]) or []
        return {int(p.pid): int(p.usedGpuMemory) / _MIB for p in got if getattr(p, "usedGpuMemory", None) is not None}

    def process_utilization(self, index: int, since_us: int) -> list[tuple[int, int, float, float]]:
        """(pid, timestamp in us, SM busy %, memory-controller busy %) for each sample NVML took of a process on GPU
        `index` after `since_us`; none where it keeps no per-process samples (MPS clients, some boards) or took none
        since (NVML then answers NOT_FOUND)."""
        got = self._optional("nvmlDeviceGetProcessUtilization", self._handles[index], since_us) or []
        return [(int(u.pid), int(u.timeStamp), float(u.smUtil), float(u.memUtil)) for u in got]

    def _drain_xid_events(self) -> None:
        nv = self._nv
        if self._events is None:
            return
        for _ in range(1000):  # bounded: a storm of events must not stall the health loop
            try:
                data = nv.nvmlEventSetWait(self._events, 0)
            except nv.NVMLError:  # NVML_ERROR_TIMEOUT: no event waiting
                return
            try:
                # The event's handle is a new ctypes pointer, equal to none of ours: ask NVML which GPU it is.
                i = int(nv.nvmlDeviceGetIndex(data.device))
            except nv.NVMLError:
                continue
            if i in self._xids:
                self._xids[i].append(int(data.eventData))

    def close(self) -> None:
        nv = self._nv
        try:
            if self._events is not None:
                nv.nvmlEventSetFree(self._events)
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass
