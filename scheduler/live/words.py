"""Durations and GPU numbers as every view writes them: the API's texts, the CLI and the explanations use these (the
dashboard's `Corral.duration` in web/static/js/core.js follows the same rules, and tests hold both to one table).

No imports beyond the standard library: the `corral` client commands import this module.

* Durations are rounded to whole seconds first, then split ("1 min 00 s", never "0 min 60 s"); from an hour on, to
  whole minutes first ("1 h 00 min", never "0 h 60 min"); from a day on, to whole hours ("1 d 0 h").
* GPUs are named by node and index on that node, as the node itself (and CUDA_VISIBLE_DEVICES) numbers them:
  "node2: GPU 0-7". The cluster-wide numbers, which decisions and candidates record, follow in parentheses where they
  help tell the two apart: "node2: GPU 0-7 (cluster GPUs 16-23)".
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def duration_text(seconds: float | None) -> str:
    """`seconds` in words: "9.5 s", "42 s", "1 min 00 s", "1 h 05 min", "2 d 3 h"; "-" when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = max(0.0, float(seconds))
    if s < 10:
        tenths = round(s * 10) / 10
        if tenths < 10:
            return f"{tenths:.1f} s"
    whole = round(s)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    minutes = round(whole / 60)
    if minutes < 24 * 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    hours = round(whole / 3600)
    return f"{hours // 24} d {hours % 24} h"


def ranges(numbers: Iterable[int]) -> str:
    """"0-3, 6": sorted, runs of consecutive numbers joined."""
    xs = sorted(set(numbers))
    out: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ", ".join(out)


def share_text(share: float | None) -> str:
    return "" if share is None or share >= 1 - 1e-9 else f" ×{share:g}"


def gpus_text(where: Iterable[tuple[str, int, int | None]], share: float | None = None, *,
              cluster_ids: bool = False) -> str:
    """GPUs given as (node, index on the node, cluster-wide index or None), by node in the order they first come:
    "node1: GPU 6-7; node2: GPU 0-1", with " ×0.5" for a share of one GPU, and with `cluster_ids` the cluster-wide
    numbers after them: "node2: GPU 0-7 (cluster GPUs 16-23)"."""
    by_node: dict[str, list[int]] = {}
    cluster: list[int] = []
    for node, local, index in where:
        by_node.setdefault(node, []).append(local)
        if index is not None:
            cluster.append(index)
    text = "; ".join(f"{node}: GPU {ranges(locals_)}" for node, locals_ in by_node.items()) + share_text(share)
    if cluster_ids and cluster:
        text += f" (cluster GPU{'s' if len(set(cluster)) > 1 else ''} {ranges(cluster)})"
    return text
