"""Datacentre fabrics: nodes under leaf switches, leaves under spines, rails; and the links a collective's flows cross.

A cluster YAML without a `fabric` section keeps the model of earlier versions: one uplink per rack, as wide as the
rack's NICs over the oversubscription, which flows share perfectly (ideal load balancing). With one, the network
above the servers is built port by port, as production clusters are (Alibaba HPN, SIGCOMM'24; ByteDance MegaScale,
NSDI'24; NVIDIA's DGX SuperPOD reference architecture):

* **Tiers.** Tier 0 is the leaf: in a fat-tree, one leaf group per rack (`nodes_per_rack` nodes); in a
  rail-optimised fabric, one leaf per rail per rack (NIC k of every node of the rack, i.e. the NIC of GPU k, on rail
  leaf k: a scalable unit). Tier 1, when `racks_per_pod` is given, groups racks into pods under pod spines. Above the
  top tier sits a non-blocking core.
* **Links.** A group of tier t has U_t uplinks and U_t downlinks, each one switch port (`port_gbps`, default the
  fastest NIC) wide: U_0 = the group's NIC ports / `oversubscription` (3:1 means a third as many uplinks as server
  ports), U_1 = the pod's leaf uplinks / `pod_oversubscription`.
* **Paths.** A flow between NICs whose groups differ at tiers 0..t-1 and agree at tier t goes up through one uplink of
  each of the sender's groups and down through one downlink of each of the receiver's, below tier t; the same leaf
  (same rack, and in a rail fabric the same rail) crosses none. ECMP picks the link by a hash of the flow, so two
  flows can land on one link while others sit idle (the collisions HPN and MegaScale measure on all-reduce traffic):
  `flow_links` with a flow key hashes (the simulator's world); without one it spreads the flows' bytes evenly over the
  group's links and states the expected cost of the hashing separately (`collision_factor`): what a scheduler, which
  cannot know the hash of a flow that does not exist yet, can predict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

UP, DOWN = 0, 1


class FabricSpec(BaseModel):
    """The `fabric` section of a cluster YAML: the network above the servers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["fat-tree", "rail-optimised"] = "fat-tree"
    oversubscription: float = Field(1.0, ge=1.0, le=64.0, description="leaf tier: server ports per uplink")
    racks_per_pod: int | None = Field(None, ge=1, description="a third tier: racks grouped into pods under pod spines")
    pod_oversubscription: float = Field(1.0, ge=1.0, le=64.0, description="pod tier: leaf uplinks per pod uplink")
    port_gbps: float | None = Field(None, gt=0, description="speed of one switch port, Gb/s (default: fastest NIC)")
    flows_per_nic: int = Field(1, ge=1, le=64, description="flows (NCCL channels) each NIC's ring hop is split into")
    ecmp_seed: int = Field(0, ge=0, description="seed of the ECMP hash (the simulator's flows)")


@dataclass(frozen=True, slots=True)
class FabricPreset:
    """A named fabric for `--cluster PRESET:N@NAME`: its spec, and leaf switches of `radix` ports, which fix how many
    servers share a leaf group (the down ports: radix x o / (o + 1) at o:1, over the server's NICs per leaf)."""

    spec: FabricSpec
    radix: int = 64  # a 64-port 400 Gb/s switch (NVIDIA QM9700, the SuperPOD's leaf)
    about: str = ""

    def nodes_per_rack(self, nics: int) -> int:
        o = self.spec.oversubscription
        down = int(self.radix * o / (o + 1))
        # A rail leaf takes one NIC of each server; a fat-tree leaf all of them.
        return max(1, down if self.spec.kind == "rail-optimised" else down // nics)


FABRICS: dict[str, FabricPreset] = {
    "fat-tree": FabricPreset(FabricSpec(), about="2-tier leaf-spine, 1:1 (non-blocking but for ECMP collisions)"),
    "fat-tree-3:1": FabricPreset(FabricSpec(oversubscription=3.0), about="2-tier leaf-spine, 3:1 at the leaves"),
    "rail-optimised": FabricPreset(FabricSpec(kind="rail-optimised"),
                                   about="NIC k of each server on rail leaf k, 32-server units, 1:1 spine"),
}


@dataclass(frozen=True, eq=False)
class Fabric:
    """A built fabric: for each tier, each NIC's group and each group's uplink and downlink ids."""

    spec: FabricSpec
    tiers: tuple[str, ...]  # names, bottom up: ("rack",), ("rail",), ("rack", "pod"), ...
    nic_group: tuple[np.ndarray, ...]  # per tier: [NICs] the NIC's group at that tier
    links: tuple[tuple[tuple[np.ndarray, np.ndarray], ...], ...]  # per tier, per group: (uplink ids, downlink ids)
    oversubscription: tuple[float, ...]  # per tier

    def crossed(self, a: int, b: int) -> int:
        """How many tiers a flow from NIC `a` to NIC `b` climbs: 0 on one leaf, len(tiers) through the core."""
        for t, groups in enumerate(self.nic_group):
            if groups[a] == groups[b]:
                return t
        return len(self.tiers)

    def describe(self) -> dict[str, object]:
        return {"kind": self.spec.kind, "tiers": list(self.tiers),
                "oversubscription": [f"{o:g}:1" for o in self.oversubscription],
                "uplinks": [int(sum(len(up) for up, _down in tier)) for tier in self.links]}


def build_fabric(spec: FabricSpec, nic_node: np.ndarray, nic_rail: np.ndarray, nic_gbps: np.ndarray,
                 node_rack: np.ndarray, new_link: Callable[[str, float], int]) -> Fabric:
    """The tiers over the NICs (`nic_node`, `nic_rail`: each NIC's node and index within it; `nic_gbps`: its speed;
    `node_rack`: each node's rack); `new_link(kind, GB/s)` adds a link and returns its id."""
    port = spec.port_gbps if spec.port_gbps is not None else float(nic_gbps.max())
    rack = node_rack[nic_node]
    if spec.kind == "rail-optimised":
        rails = int(nic_rail.max()) + 1
        leaf = rack * rails + nic_rail
        names = ["rail"]
    else:
        leaf = rack.copy()
        names = ["rack"]
    groups = [_dense(leaf)]
    ports = [np.bincount(groups[0], weights=nic_gbps / port)]  # each leaf group's server ports
    over = [spec.oversubscription]
    if spec.racks_per_pod is not None:
        groups.append(_dense(rack // spec.racks_per_pod))
        names.append("pod")
        over.append(spec.pod_oversubscription)
    links: list[tuple[tuple[np.ndarray, np.ndarray], ...]] = []
    for t, g in enumerate(groups):
        if t > 0:  # a pod's down ports are the uplinks of the leaf groups below it
            below = np.array([len(up) for up, _down in links[t - 1]], dtype=np.float64)
            ports.append(np.bincount(_parent(groups[t - 1], g), weights=below))
        tier = []
        for down_ports in ports[t]:
            n = max(1, round(float(down_ports) / over[t]))
            up = np.array([new_link("uplink", port / 8.0) for _ in range(n)], dtype=np.int64)
            down = np.array([new_link("downlink", port / 8.0) for _ in range(n)], dtype=np.int64)
            tier.append((_ro(up), _ro(down)))
        links.append(tuple(tier))
    return Fabric(spec=spec, tiers=tuple(names), nic_group=tuple(_ro(g) for g in groups), links=tuple(links),
                  oversubscription=tuple(over))


def flow_links(fabric: Fabric, flows: Iterable[tuple[int, int]], gb: float,
               key: int | None) -> tuple[dict[int, float], dict[int, float]]:
    """GB per iteration the `flows` (pairs of NICs, `gb` each) put on the fabric's links, and the factor each link's
    time is stretched by for the hashing's expected imbalance (empty when hashed).

    `key` None: the expected form. Each group's flows are spread evenly over its links (the load other jobs see, in
    expectation), and the job's own time on them is stretched by `collision_factor` (its n flows over the group's U
    links load the busiest one E[max] / (n / U) times the mean). `key` an int (a job id): the flows are hashed.
    """
    per_group: dict[tuple[int, int, int], list[int]] = {}
    for i, (a, b) in enumerate(flows):
        climb = fabric.crossed(a, b)
        for t in range(climb):
            h = _mix(fabric.spec.ecmp_seed, key, i, t) if key is not None else 0
            per_group.setdefault((t, UP, int(fabric.nic_group[t][a])), []).append(h)
            per_group.setdefault((t, DOWN, int(fabric.nic_group[t][b])), []).append(h)
    traffic: dict[int, float] = {}
    stretch: dict[int, float] = {}
    for (t, way, group), hashes in per_group.items():
        ids = fabric.links[t][group][way]
        u = len(ids)
        if key is not None:
            for h in hashes:
                link = int(ids[h % u])
                traffic[link] = traffic.get(link, 0.0) + gb
            continue
        share = gb * len(hashes) / u
        factor = collision_factor(len(hashes), u)
        for link in ids.tolist():
            traffic[link] = traffic.get(link, 0.0) + share
            stretch[link] = factor
    return traffic, stretch


@lru_cache(maxsize=4096)
def collision_factor(flows: int, links: int) -> float:
    """E[flows on the busiest of `links` links] / (flows / links) when each of `flows` equal flows picks a link
    uniformly at random (ECMP): 1 for one link, `links` for one flow (it uses one link of the group, the
    even spread assumes all). Exact: the count in each link in turn is binomial over the flows left."""
    if links <= 1 or flows <= 0:
        return 1.0
    expected_max = 0.0
    for cap in range(flows):  # E[max] = sum over m >= 0 of P(max > m)
        p_le = _p_all_at_most(flows, links, cap)
        expected_max += 1.0 - p_le
        if p_le > 1.0 - 1e-12:
            break
    return expected_max * links / flows


def _p_all_at_most(n: int, u: int, cap: int) -> float:
    """P(no link gets more than `cap` of `n` flows spread uniformly over `u` links)."""
    # Imported here, not with the module: scipy.stats takes about a second to import, and every Ray worker process
    # (one per rank of a running job) imports this module through the cluster model but never asks for a collision.
    from scipy.stats import binom

    left = np.zeros(n + 1)
    left[n] = 1.0  # probability of each count of flows not yet placed
    r = np.arange(n + 1)
    for b in range(u, 1, -1):  # the next link takes Binomial(r, 1/b) of the r flows left
        k = np.arange(min(cap, n) + 1)
        pmf = binom.pmf(k[None, :], r[:, None], 1.0 / b)
        nxt = np.zeros(n + 1)
        for j in k.tolist():
            nxt[: n + 1 - j] += left[j:] * pmf[j:, j]
        left = nxt
    return float(left[: cap + 1].sum())  # the last link takes what is left


def _mix(seed: int, key: int, flow: int, tier: int) -> int:
    """A deterministic 64-bit hash of a flow (splitmix64 over its fields): ECMP's choice, reproducible by seed."""
    x = (seed * 0x9E3779B97F4A7C15 + key * 0xBF58476D1CE4E5B9 + flow * 0x94D049BB133111EB + tier) & (2**64 - 1)
    for mult in (0xBF58476D1CE4E5B9, 0x94D049BB133111EB):
        x ^= x >> 31
        x = (x * mult) & (2**64 - 1)
    return x ^ (x >> 29)


def _dense(ids: np.ndarray) -> np.ndarray:
    """Group ids renumbered 0..n-1 in order of first appearance (racks are contiguous, rails interleave)."""
    _uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))
    return order[inverse].astype(np.int32)


def _parent(child: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """For each group of `child` (per NIC), its group in `parent`."""
    out = np.zeros(int(child.max()) + 1, dtype=np.int64)
    out[child] = parent
    return out


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a
