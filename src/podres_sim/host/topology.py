"""A fake sysfs tree for a simulated node, for the exporter's ``--path.sysfs``.

``write_sysfs`` writes what the exporter reads to map CPUs to NUMA nodes, in the
kernel's formats (range lists such as ``0-23,48-71`` followed by a newline)::

    <root>/devices/system/cpu/{possible,present,online,offline}
    <root>/devices/system/cpu/cpu<N>/online          (N > 0, "1" or "0")
    <root>/devices/system/node/{possible,online,has_cpu}
    <root>/devices/system/cpu/cpu<N>/topology/thread_siblings_list   (online CPUs)
    <root>/devices/system/node/node<N>/cpulist
    <root>/devices/system/node/node<N>/distance      (10 to itself, 21 to the others)

A physical core is ``threads_per_core`` consecutive CPUs of a NUMA node's list; its
online CPUs are each one's siblings.

An offline CPU is listed in ``possible``, ``present`` and ``offline`` only: the
kernel drops it from ``online`` and from its NUMA node's ``cpulist``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from podres_exporter.core.cpulist import format_cpulist as format_cpu_list
from podres_sim.scenario import NodeSpec, Scenario

__all__ = ["write_sysfs"]

_LOCAL, _REMOTE = 10, 21  # the kernel's distance to its own node, and a typical remote one


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="ascii")


def write_sysfs(
    node: NodeSpec | Scenario, root: str | Path, *, offline_cpus: Iterable[int] = ()
) -> Path:
    """Write the CPU and NUMA files of ``node`` under ``root`` and return ``root``.

    CPUs in ``offline_cpus`` (added to the node's own ``offline_cpus``) are written as
    offline. Existing files are overwritten, so a test can rewrite the tree.
    """
    spec = node.node if isinstance(node, Scenario) else node
    root = Path(root)
    offline = set(spec.offline_cpus) | set(offline_cpus)
    unknown = offline - set(spec.cpus)
    if unknown:
        raise ValueError(f"offline CPUs not on the node: {sorted(unknown)}")
    cpus = spec.cpus
    online = [c for c in cpus if c not in offline]

    cpu_dir = root / "devices" / "system" / "cpu"
    _write(cpu_dir / "possible", format_cpu_list(cpus))
    _write(cpu_dir / "present", format_cpu_list(cpus))
    _write(cpu_dir / "online", format_cpu_list(online))
    _write(cpu_dir / "offline", format_cpu_list(offline))
    for cpu in cpus:
        if cpu != 0:  # the boot CPU cannot go offline and has no "online" file
            _write(cpu_dir / f"cpu{cpu}" / "online", "0" if cpu in offline else "1")

    node_dir = root / "devices" / "system" / "node"
    all_nodes = range(spec.numa_nodes)
    with_cpus = [n for n in all_nodes if any(c not in offline for c in spec.numa_cpus[n])]
    _write(node_dir / "possible", format_cpu_list(all_nodes))
    _write(node_dir / "online", format_cpu_list(all_nodes))
    _write(node_dir / "has_cpu", format_cpu_list(with_cpus))
    for n, node_cpus in enumerate(spec.numa_cpus):
        _write(
            node_dir / f"node{n}" / "cpulist",
            format_cpu_list(c for c in node_cpus if c not in offline),
        )
        distances = (_LOCAL if m == n else _REMOTE for m in all_nodes)
        _write(node_dir / f"node{n}" / "distance", " ".join(map(str, distances)))
        threads = spec.threads_per_core
        for at in range(0, len(node_cpus), threads):
            core = [c for c in node_cpus[at : at + threads] if c not in offline]
            for cpu in core:
                _write(
                    cpu_dir / f"cpu{cpu}" / "topology" / "thread_siblings_list",
                    format_cpu_list(core),
                )
    return root
