"""The heap freezes of `scheduler.core.heap`: what they keep from the collector, for how long, and that every replay
runs inside one."""

from __future__ import annotations

import gc
import weakref

import pytest
from conftest import job, small_cluster

from policies import make_policy
from scheduler.core import heap
from scheduler.core.heap import freeze_heap, heap_frozen
from scheduler.core.simulator import Simulator


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture(autouse=True)
def thawed(monkeypatch):
    if gc.get_freeze_count():
        pytest.skip("this test process's heap is frozen already: the freezes under test would do nothing")
    monkeypatch.setattr(heap, "_holders", 0)  # restored after: a `freeze_heap` here holds it for this test only
    yield
    gc.unfreeze()


@pytest.mark.slow  # full collections of a test process's heap: seconds where it is large
def test_garbage_alive_when_the_block_starts_is_collected_only_after_it() -> None:
    cycle = Node()
    ref = weakref.ref(cycle)
    with heap_frozen():
        assert gc.get_freeze_count() > 0
        del cycle
        gc.collect()
        assert ref() is not None  # frozen: no collection looks at it
        later = Node()
        later_ref = weakref.ref(later)
        del later
        gc.collect()
        assert later_ref() is None  # made inside the block: collected as ever
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None


@pytest.mark.slow  # full collections of a test process's heap: seconds where it is large
def test_a_block_inside_a_freeze_leaves_it_as_it_was() -> None:
    # Judged by what the collector frees, not by counts of frozen objects: other threads of a test process free
    # frozen objects by reference counting at any time.
    cycle = Node()
    ref = weakref.ref(cycle)
    with heap_frozen():
        del cycle
        with heap_frozen():
            pass
        gc.collect()
        assert ref() is not None  # the inner block did not thaw what the outer one froze
    gc.collect()
    assert ref() is None
    kept = Node()
    kept_ref = weakref.ref(kept)
    freeze_heap()  # a server's freeze, for good
    del kept
    with heap_frozen():
        pass
    gc.collect()
    assert kept_ref() is not None  # the block left the server's freeze as it was


def test_every_replay_runs_with_the_heap_it_started_with_frozen() -> None:
    seen: list[int] = []
    policy = make_policy("fifo")
    schedule = policy.schedule

    def counting(view, queue, now):
        seen.append(gc.get_freeze_count())
        return schedule(view, queue, now)

    policy.schedule = counting  # type: ignore[method-assign]
    result = Simulator(small_cluster(nodes=1, gpus=4), [job("a", 0, 2, 60), job("b", 10, 4, 60)], policy).run()
    assert len(result.jobs) == 2 and seen and min(seen) > 0
    assert gc.get_freeze_count() == 0
