"""Compactness waits: a job that fits now only spread over more servers than it needs waits, a bounded time, for
room on the fewest servers (Slurm's `--switches=N@max-time`, Kueue's required topology).

One rule for every policy that holds jobs so: `topology` and the `rl:` frame (`policies.rl_encoding`). A spread gang
shares NICs and rack uplinks with others for its whole run, and its ring runs at the pace of its most crowded link;
starting it on the fragments free now also leaves fragments for the jobs after it.

* A whole-GPU job one server can hold waits up to `node_wait_s` from its submission for one server; a larger gang up
  to `gang_wait_s` for the fewest servers it fits on. GPU shares never wait (one GPU is one server).
* A job that outranks a running preemptible job never waits: the priority rules (`scheduler.core.priorities`) would
  preempt for it were there no room, so it does not wait for better room either.
* Waiting, it may start only on the fewest servers; when its wait ends it starts wherever it fits.

`topology` applies it on every cluster and never preempts. The `rl:` frame applies it on a fabric only, and
preempts for a waiting job only where it fits nowhere, taking only victims that free the fewest servers (`room`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from policies.placement import Planner
from scheduler.core.model import Cluster, Job, JobSpec, Placement
from scheduler.core.reasons import duration_words
from scheduler.core.state import ClusterView

NODE_WAIT_S = 3600.0  # how long a job one server holds waits for one server
GANG_WAIT_S = 86400.0  # how long a gang larger than a server waits for the fewest servers


def fewest_servers(cluster: Cluster, spec: JobSpec) -> int:
    return cluster.fewest_nodes(spec.workers)


def servers(cluster: Cluster, placement: Placement) -> int:
    node = cluster.gpu_node_list  # (a gang's few GPUs read from a list: faster than an array's gather)
    return len({node[g] for g in placement.gpus})


@dataclass(frozen=True)
class CompactnessWait:
    """The two waits (seconds from submission; 0: none), and what a job may start on while one lasts."""

    node_wait_s: float = NODE_WAIT_S
    gang_wait_s: float = GANG_WAIT_S

    def end(self, cluster: Cluster, spec: JobSpec) -> float | None:
        """When `spec`'s wait for the fewest servers ends, whether or not it is waiting (None: a GPU share, which
        never waits)."""
        if spec.num_gpus < 1:
            return None
        return spec.submit_s + (self.node_wait_s if fewest_servers(cluster, spec) == 1 else self.gang_wait_s)

    def until(self, view: ClusterView, spec: JobSpec, lowest: float) -> float | None:
        """When `spec`'s wait ends if it is waiting now, else None: a GPU share, a job that outranks a preemptible run
        (`lowest`: `scheduler.core.priorities.lowest_preemptible` now), or a wait over."""
        end = self.end(view.cluster, spec)
        if end is None or spec.priority > lowest or view.now >= end:
            return None
        return end

    @staticmethod
    def compact(cluster: Cluster, spec: JobSpec, placement: Placement, spans: int | None = None) -> bool:
        """Whether `placement` is on the fewest servers `spec` fits on (`spans`: its servers, where known)."""
        if spec.num_gpus < 1:
            return True
        return (servers(cluster, placement) if spans is None else spans) <= fewest_servers(cluster, spec)

    @staticmethod
    def room(planner: Planner, spec: JobSpec, victims: Sequence[Job] = ()) -> bool:
        """Whether the fewest servers with memory enough hold as many whole free GPUs as `spec` has workers, now or
        once `victims` leave: necessary for a placement on them, and cheap beside a placement search (on a busy
        cluster most waiting gangs have no such room)."""
        k = fewest_servers(planner.cluster, spec)
        free = planner.free_once_freed(spec, victims)
        top = np.partition(free, len(free) - k)[len(free) - k:] if k < len(free) else free
        return int(top.sum()) >= spec.workers

    @staticmethod
    def words(cluster: Cluster, spec: JobSpec, until: float, now: float, spans: int | None = None) -> str:
        """A held job's pending reason: what it waits for, and until when (`spans`: the servers it would span now,
        where known)."""
        fewest = fewest_servers(cluster, spec)
        what = "one server" if fewest == 1 else f"{fewest} servers"
        now_words = f"now they would span {spans} servers" if spans is not None else "now they would span more"
        return (f"waits for {what} to hold its {spec.workers} GPUs ({now_words}, sharing their NICs and uplinks); "
                f"starts spread in {duration_words(until - now)} at the latest")

    def candidates(self, planner: Planner, spec: JobSpec) -> list[Placement]:
        """`Planner.candidates` on the fewest servers, with a gang larger than a server on whole servers in as few
        racks as they allow (`Planner.whole_servers_fit`, as `topology` places it), for a job that is waiting."""
        if not self.room(planner, spec):
            return []
        c = planner.cluster
        found = [p for p in planner.candidates(spec) if self.compact(c, spec, p)]
        if fewest_servers(c, spec) > 1:
            whole = planner.whole_servers_fit(spec)
            if whole is not None and self.compact(c, spec, whole) and all(p.gpus != whole.gpus for p in found):
                found.append(whole)
        return found
