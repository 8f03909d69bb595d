"""How fast a running job progresses, the order the queue is asked in, and which runs a node takes down with it: rules
the simulator (and so the RL environment and what-if, which run it) and the live controller both apply, written once.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.core.model import Cluster, Job, JobKind


def progress_rate(kind: JobKind, slowdown: float, speedup: float = 1.0) -> float:
    """Isolated seconds of work a running job does per second at this predicted slowdown. A training job runs 1 /
    slowdown times as fast, times its `speedup` when it runs at another size than its work is measured at (an elastic
    job: `scheduler.core.elastic`); an inference service runs for as long as it was asked to whatever its neighbours
    do (they cost its requests latency, counted against its SLO, not its lifetime)."""
    return 1.0 if kind is JobKind.INFERENCE else speedup / slowdown


def slo_missed(latency_ms: float, slowdown: float, slo_ms: float) -> bool:
    """An inference service misses its latency SLO while its isolated latency times its predicted slowdown is over
    it: the simulator counts the time it does, and the live service shows it (`scheduler.live.slo`)."""
    return latency_ms * slowdown > slo_ms


def queue_position(job: Job) -> tuple[float, int]:
    """A job's place in queue order (`in_queue_order`'s key): submitted, then id."""
    return job.spec.submit_s, job.id


def in_queue_order(pending: Mapping[int, Job]) -> dict[int, Job]:
    """The pending jobs in the order a policy sees them: by submission time, then id. A requeued job (preempted,
    lost, checkpointed) goes back to its place rather than to the end."""
    return dict(sorted(pending.items(), key=lambda kv: (kv[1].spec.submit_s, kv[0])))


def runs_on_node(running: Mapping[int, Job], cluster: Cluster, node: int) -> list[int]:
    """The running jobs with a GPU on `node`, in the order they are held: a node that goes down takes these with it."""
    return [j for j, job in running.items() if job.placement is not None and node in job.placement.nodes(cluster)]
