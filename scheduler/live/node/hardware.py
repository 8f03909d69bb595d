"""What a node's GPUs are in Corral's terms: NVML product names matched to Corral's GPU types and server presets, or
described as they are when nothing matches (the node still joins: its resources do not depend on the model)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field

from scheduler.core.errors import SpecError
from scheduler.core.model import GPU_TYPES, PRESETS
from scheduler.live.cluster import node_type
from scheduler.live.node.nvml import GpuDevice

# NVML product names -> Corral GPU types. NVML names vary with the form factor and the driver ("NVIDIA A100-SXM4-80GB",
# "NVIDIA A100 80GB PCIe", "Tesla V100-PCIE-32GB", "Tesla T4"), so these are patterns, most specific first; the
# memory NVML reports must also agree with the type's (within MEMORY_TOLERANCE), so an unknown variant that happens to
# contain "A100" (e.g. a 94 GB part) is described rather than mislabelled.
NVML_MODELS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p, re.IGNORECASE), t) for p, t in (
    (r"\bA100\b.*80\s*GB", "A100-80GB"),
    (r"\bA100\b", "A100-40GB"),
    (r"\bH100\b", "H100-80GB"),
    (r"\bH200\b", "H200-141GB"),
    (r"\bV100\b.*32\s*GB", "V100-32GB"),
    (r"\bV100\b", "V100-16GB"),
    (r"\bA10\b", "A10"),
    (r"\bT4\b", "T4"),
    (r"\bP100\b", "P100"),
    (r"\bK80\b", "K80"),
))
MEMORY_TOLERANCE = 0.15  # a "16 GB" T4 reports 15,360 MiB; an "80 GB" A100 81,920 MiB


def gpu_type_of(device: GpuDevice) -> str | None:
    """The Corral GPU type of an NVML device, or None when no known type has its name and memory."""
    for pattern, type_name in NVML_MODELS:
        if pattern.search(device.name):
            want = GPU_TYPES[type_name].memory_gb
            have = device.memory_mib / 1024
            return type_name if abs(have - want) <= MEMORY_TOLERANCE * want else None
    return None


def interconnect_of(device: GpuDevice) -> str:
    # SXM boards sit on NVLink (NVSwitch on HGX/DGX); every other form factor is a PCIe card. NVML names most SXM boards
    # "SXM" ("NVIDIA A100-SXM4-80GB"), but Hopper's SXM parts go by their memory ("NVIDIA H100 80GB HBM3", "NVIDIA
    # H200"), and their PCIe cards say "PCIe" or "NVL" (a PCIe card with an NVLink bridge: not on NVSwitch).
    name = device.name.upper()
    if "PCIE" in name or re.search(r"\bNVL\b", name):
        return "pcie"
    if "SXM" in name or "HBM3" in name or re.search(r"\bH200\b", name):
        return "nvlink"
    return "pcie"


@dataclass(frozen=True, slots=True)
class NodeHardware:
    """A node's GPUs as the agent joins with them. `preset` is None when no preset fits: the node then offers its GPUs
    as generic ones (Corral's resources name GPUs, not models) and `summary` says what they are."""

    gpus: int
    preset: str | None
    source: str  # "nvml" (discovered) or "virtual" (--gpus N: logical GPUs, no driver involved)
    summary: str
    devices: tuple[GpuDevice, ...] = field(default=())
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {"gpus": self.gpus, "preset": self.preset, "source": self.source, "summary": self.summary,
                "devices": [asdict(d) for d in self.devices], "notes": list(self.notes)}


def describe(devices: list[GpuDevice]) -> str:
    """"8 x NVIDIA A100-SXM4-80GB (80.0 GiB)", one entry per distinct model."""
    kinds = Counter((d.name, d.memory_mib) for d in devices)
    return ", ".join(f"{n} x {name} ({mib / 1024:.1f} GiB)" for (name, mib), n in kinds.items())


def match_preset(devices: list[GpuDevice]) -> tuple[str | None, str]:
    """The preset these GPUs are, and why (or why none): every GPU of one known type and form factor, a preset with
    that GPU and interconnect, and that preset allowing this many GPUs."""
    if not devices:
        return None, "NVML sees no GPU"
    types = {gpu_type_of(d) for d in devices}
    links = {interconnect_of(d) for d in devices}
    if len(types) > 1 or len(links) > 1:
        return None, "the GPUs are not all of one model"
    (gpu_type,) = types
    (link,) = links
    if gpu_type is None:
        return None, f"Corral knows no GPU type named like {devices[0].name!r} with {devices[0].memory_mib} MiB"
    for name, spec in PRESETS.items():
        if spec.gpu == gpu_type and spec.interconnect == link:
            try:
                node_type(name, len(devices))
            except SpecError as exc:
                return None, f"preset {name} has {gpu_type} on {link} but not {len(devices)} of them ({exc})"
            return name, f"{gpu_type} on {link}"
    return None, f"no preset has {gpu_type} on {link} (presets: {', '.join(PRESETS)})"


def discovered(devices: list[GpuDevice], preset: str | None = None) -> NodeHardware:
    """The hardware NVML found; `preset` (from --preset) overrides the match, after a check that it allows the count."""
    found, why = match_preset(devices)
    notes: list[str] = []
    chosen: str | None
    if preset is not None:
        node_type(preset, len(devices))  # SpecError if the preset cannot have this many GPUs
        if found != preset:
            notes.append(f"--preset {preset} given; the GPUs themselves match {found or 'no preset'} ({why})")
        chosen = preset
    else:
        chosen = found
        if found is None:
            notes.append(f"no Corral preset matches: {why}. The node joins with {len(devices)} generic GPU(s); "
                         "pass --preset to name the closest server model")
    return NodeHardware(len(devices), chosen, "nvml", describe(devices), tuple(devices), tuple(notes))


def virtual(gpus: int, preset: str | None) -> NodeHardware:
    """`--gpus N [--preset P]`: N logical GPUs, as `corral node-resources` gives (no NVML, nothing checked on the
    machine)."""
    if preset is not None:
        node_type(preset, gpus)
    what = f" ({PRESETS[preset].gpu})" if preset else ""
    return NodeHardware(gpus, preset, "virtual", f"{gpus} virtual GPU(s){what}")
