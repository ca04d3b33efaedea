"""Helpers the tests of top's rows share: one node's data, one container's row."""

from __future__ import annotations

from podres_exporter.top.rows import ContainerRow, NodeData, TopData


def one_node(data: TopData) -> NodeData:
    assert len(data.nodes) == 1
    return data.nodes[0]


def row(data: TopData, pod: str, container: str) -> ContainerRow:
    found = [
        r for n in data.nodes for r in n.containers if (r.pod, r.container) == (pod, container)
    ]
    assert len(found) == 1, found
    return found[0]
