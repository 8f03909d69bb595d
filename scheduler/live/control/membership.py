"""Which nodes the controller's model holds, in which numbering, with which presets and racks.

GPUs are numbered node by node in this order, and allocations record those numbers: a node that joins is appended (the
others keep their numbers), a node that moves racks keeps its GPUs, and a replica taking over takes the store's
numbering (another replica may have numbered nodes in the order they came)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from scheduler.core.model import Cluster
from scheduler.live.cluster import ModelNode, labels_of, model_cluster, node_labels, node_preset, node_rack, racks_of
from scheduler.live.runs import NodeInfo
from scheduler.live.store import queries
from scheduler.live.store.db import Store

log = logging.getLogger("scheduler.live.controller")


class Membership:
    def __init__(self, cluster: Cluster, node_names: list[str], node_presets: Sequence[str] | None, preset: str,
                 fabric: str | None) -> None:
        if len(node_names) != cluster.num_nodes:
            raise ValueError(f"{len(node_names)} node names for a cluster of {cluster.num_nodes} nodes")
        if node_presets is not None and len(node_presets) != cluster.num_nodes:
            raise ValueError(f"{len(node_presets)} node presets for a cluster of {cluster.num_nodes} nodes")
        self.cluster = cluster
        self.node_names = node_names
        # The preset each node is modelled with, in the model's order: its own (it travels with the node, see
        # `node_resources`), or `preset` (`corral serve --preset`) for a node that advertises none.
        self.node_presets = list(node_presets) if node_presets is not None else [preset] * len(node_names)
        self.node_index = {n: i for i, n in enumerate(node_names)}
        self.preset = preset  # the fallback preset
        self.fabric = fabric  # the fabric preset `cluster` sits on (`corral serve --fabric`), kept as nodes join

    def preset_of(self, name: str, own: str | None, gpus: int) -> str:
        """The preset node `name` is modelled with: its own, or `corral serve --preset` (saying why, if it had one)."""
        preset, why = node_preset(own, self.preset, gpus)
        if why:
            log.warning("node %s: %s", name, why)
        return preset

    def rack_of(self, name: str, own: str | None) -> str | None:
        """The rack node `name` is modelled in: the one it names, if it is a rack name (saying why not)."""
        rack, why = node_rack(own)
        if why:
            log.warning("node %s: %s", name, why)
        return rack

    def nodes(self) -> list[ModelNode]:
        racks, labels = racks_of(self.cluster), labels_of(self.cluster)
        return [ModelNode(name, int(self.cluster.node_num_gpus[i]), self.node_presets[i], racks[i], labels[i])
                for i, name in enumerate(self.node_names)]

    def renumber(self, nodes: list[ModelNode]) -> None:
        self.cluster = model_cluster(nodes, self.fabric)
        self.node_names = [n.name for n in nodes]
        self.node_presets = [n.preset for n in nodes]
        self.node_index = {n: i for i, n in enumerate(self.node_names)}

    def grow(self, joined: list[NodeInfo]) -> None:
        """Ray nodes with Corral's resources that joined since the model was built: appended to it (the nodes it has
        keep their GPU numbering, which allocations record). The caller rebuilds its state from the store."""
        joined = sorted(joined, key=lambda n: n.name)
        added = [ModelNode(n.name, n.gpus, self.preset_of(n.name, n.preset, n.gpus), self.rack_of(n.name, n.rack),
                           node_labels(n.labels)) for n in joined]
        self.renumber([*self.nodes(), *added])
        log.info("node(s) joined: %s; the cluster has %d nodes and %d GPUs now",
                 ", ".join(f"{n.name} ({n.gpus} GPUs, {n.preset})" for n in added), self.cluster.num_nodes,
                 self.cluster.num_gpus)

    def moved(self, nodes: Sequence[NodeInfo]) -> dict[str, tuple[str | None, tuple[tuple[str, str], ...]]]:
        """The alive nodes of the model that name another rack, or carry other labels, than they are modelled with
        (name -> (rack, labels)): a server moved, or its agent was restarted with another --rack or --label."""
        racks, labels = racks_of(self.cluster), labels_of(self.cluster)
        moved: dict[str, tuple[str | None, tuple[tuple[str, str], ...]]] = {}
        for n in nodes:
            i = self.node_index.get(n.name)
            if n.alive and i is not None and (node_rack(n.rack)[0], node_labels(n.labels)) != (racks[i], labels[i]):
                moved[n.name] = (self.rack_of(n.name, n.rack), node_labels(n.labels))
        return moved

    def move(self, moved: dict[str, tuple[str | None, tuple[tuple[str, str], ...]]]) -> None:
        """Nodes that name another rack or carry other labels now: the model takes them (no GPU is renumbered:
        neither is part of the numbering). The caller rebuilds its state as after a join. Rare: a server moves
        racks, or its operator relabels it."""
        self.renumber([n._replace(rack=moved[n.name][0], labels=moved[n.name][1]) if n.name in moved else n
                       for n in self.nodes()])
        log.info("node(s) moved: %s", ", ".join(
            f"{name} to {rack or 'no named rack'}" + (f" ({', '.join(f'{k}={v}' for k, v in labels)})" if labels else "")
            for name, (rack, labels) in sorted(moved.items())))

    def take_store_numbering(self, store: Store) -> None:
        """Another replica may have led while nodes joined, and numbered them in the order they came: take the
        store's numbering (the one allocations were written in) with the presets it recorded, then the nodes only
        this replica knows of. A node's rack is the model's if it has the node (what the node names now: `move`),
        else the store's."""
        mine = {n.name: n for n in self.nodes()}
        with store.session() as s:
            known = [ModelNode(n.name, len(n.gpus), self.preset_of(n.name, n.preset, len(n.gpus)),
                               mine[n.name].rack if n.name in mine else self.rack_of(n.name, n.rack),
                               mine[n.name].labels if n.name in mine else node_labels(n.labels))
                     for n in queries.nodes_with_gpus(s)]
        names = {n.name for n in known}
        nodes = [*known, *(n for n in self.nodes() if n.name not in names)]
        if nodes != self.nodes():
            log.info("taking the store's node numbering: %s", ", ".join(f"{n.name} ({n.preset})" for n in nodes))
            self.renumber(nodes)
