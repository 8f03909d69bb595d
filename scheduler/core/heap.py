"""Keeping long-lived objects out of the cyclic garbage collector's way.

CPython's full collection walks every container object alive: the modules, Ray's client, torch and a loaded agent's
network come to hundreds of thousands. One took about 290 ms in the middle of a controller pass
(benchmarks/teams_live.py) and 200-600 ms in the middle of a simulated decision (benchmarks/rl.py), and a replay on a
deep queue ran 1,500 of them: the objects a decision keeps until it returns (candidates, predictions) outlive the
young collections, and their promotion triggers full ones. Freezing moves the objects alive now into a generation no
collection looks at (`gc.freeze`); what is allocated later is collected as before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_holders = 0  # who keeps the heap frozen now: `freeze_heap` for good, each `heap_frozen` block while it runs


def freeze_heap() -> None:
    """Collect, then freeze every object alive for the rest of the process: for a server once it has started (its
    modules, clients, policy and state are there to stay)."""
    global _holders
    gc.collect()
    gc.freeze()
    _holders += 1  # for good: later blocks leave the heap as it is


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Every object alive now frozen while the block runs and thawed after (both O(1); garbage among them is
    collected after the block). Nothing is done where the heap is frozen already: a server's freeze stays, and a
    block inside another is inside its freeze. (Counted here: `gc.get_freeze_count` walks the frozen objects, and
    replays nest.)"""
    global _holders
    if _holders:
        yield
        return
    gc.freeze()
    _holders += 1
    try:
        yield
    finally:
        _holders -= 1
        if not _holders:
            gc.unfreeze()
