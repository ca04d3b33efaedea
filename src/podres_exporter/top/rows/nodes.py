"""Every node's rows for one frame of ``podres top``: :func:`build`, and :func:`add_busy`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from podres_exporter.top.rows.busy import busy_ratios, mean_busy
from podres_exporter.top.rows.containers import ContainerRow, container_rows
from podres_exporter.top.rows.devices import DeviceRow, device_rows
from podres_exporter.top.rows.header import NodeHeader, header_of
from podres_exporter.top.rows.samples import Reading, group, natural_key


@dataclass(frozen=True, slots=True)
class NodeData:
    """One node: its header and rows."""

    header: NodeHeader
    containers: tuple[ContainerRow, ...]
    devices: tuple[DeviceRow, ...]

    @property
    def unplaced(self) -> int | None:
        """Containers the header counts that have no row: they hold no exclusive CPUs,
        devices, DRA claims or pinned memory (the shared CPU pool only). None when the
        source serves no container count."""
        if self.header.containers is None:
            return None
        listed = {r.holder for r in self.containers if r.container}
        return max(self.header.containers - len(listed), 0)


@dataclass(frozen=True, slots=True)
class TopData:
    """What one frame shows: every node read, and a notice (a failed refresh) if any."""

    nodes: tuple[NodeData, ...]
    source: str = ""
    notice: str | None = None


def build(
    current: Reading,
    baseline: Reading | None = None,
    *,
    source: str = "",
    notice: str | None = None,
) -> TopData:
    """The rows of every node in ``current``; busy shares against ``baseline`` when given."""
    now = group(current)
    before = group(baseline) if baseline is not None else {}
    elapsed = current.at - baseline.at if baseline is not None else None
    nodes = []
    for node in sorted(now, key=natural_key):
        idx = now[node]
        busy = busy_ratios(idx, before.get(node), elapsed)
        nodes.append(
            NodeData(header_of(node, idx), container_rows(node, idx, busy), device_rows(node, idx))
        )
    return TopData(tuple(nodes), source=source, notice=notice)


def add_busy(data: TopData, current: Reading, baseline: Reading) -> TopData:
    """``data`` with each container's busy share measured between ``baseline`` and
    ``current``, as :func:`build` measures it; both may carry the busy counters only.

    ``--once --exporter`` builds its rows from the first scrape while it waits for the
    exporter's next poll, and reads only the busy counters of that poll.
    """
    now = group(current)
    before = group(baseline)
    elapsed = current.at - baseline.at
    nodes = []
    for n in data.nodes:
        idx = now.get(n.header.node)
        busy = busy_ratios(idx, before.get(n.header.node), elapsed) if idx is not None else {}
        rows = tuple(replace(r, busy=mean_busy(r.holder, r.cpus, busy)) for r in n.containers)
        nodes.append(replace(n, containers=rows))
    return replace(data, nodes=tuple(nodes))
