"""A sum over any label of the allocation families means something, on the simulated node.

The served exposition of a built-in scenario (as the goldens build it), against what the
simulated kubelet and host say: the CPU pools add up to the online CPUs, the device states to
every device id the kubelet knows, and the allocatable families to their parts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from podres_exporter.sources.kubelet import KubeletClient
from podres_sim import SimKubelet
from tests.exporter.test_reader_golden import exposition
from tests.support import parse_samples, select


def _by(samples: dict[frozenset[tuple[str, str]], float], *labels: str) -> Counter[tuple[str, ...]]:
    out: Counter[tuple[str, ...]] = Counter()
    for key, value in samples.items():
        d = dict(key)
        out[tuple(d[label] for label in labels)] += int(value)
    return out


@pytest.mark.parametrize("scenario", ["minimal", "policy-none", "demo"])
def test_sums_over_the_allocation_labels_add_up(
    scenario: str, make_sim: Callable[..., SimKubelet]
) -> None:
    """sum over pool = online CPUs; sum over state = devices known; allocatable = free +
    allocated (devices) and = allocated + free (memory); no allocatable in the parts."""
    sim = make_sim(scenario)
    held = next(d for p in sim.node.pods for c in p.containers for d in c.devices)
    sim.set_device_health(held.resource, held.device_id, False)  # one held, unhealthy
    s = parse_samples(exposition(sim))
    spec = sim.node.spec
    online = {c for cpus in spec.numa_cpus for c in cpus} - set(spec.offline_cpus)
    assert sum(select(s, "podres_node_cpus").values()) == len(online)
    assert {dict(k)["pool"] for k in select(s, "podres_node_cpus")} == {
        "exclusive",
        "shared_free",
        "reserved",
    }
    pools = _by(select(s, "podres_node_cpus"), "numa_node", "pool")
    for (numa,), n in _by(select(s, "podres_node_allocatable_cpus"), "numa_node").items():
        assert n == pools[(numa, "exclusive")] + pools[(numa, "shared_free")]

    client = KubeletClient(str(sim.socket_path))
    try:
        reading = client.read()
    finally:
        client.close()
    assert reading.allocatable is not None
    known = {(d.resource, d.device_id) for d in reading.allocatable.devices} | {
        (d.resource, d.device_id) for p in reading.pods for c in p.containers for d in c.devices
    }
    devices = select(s, "podres_node_devices")
    assert sum(devices.values()) == len(known)
    assert {dict(k)["state"] for k in devices} == {"free", "allocated", "allocated_unhealthy"}
    assert sum(select(s, "podres_node_devices", state="allocated_unhealthy").values()) >= 1
    states = _by(devices, "resource", "numa_node", "state")
    allocatable = _by(select(s, "podres_node_allocatable_devices"), "resource", "numa_node")
    assert allocatable
    for (resource, numa), n in allocatable.items():
        assert n == states[(resource, numa, "free")] + states[(resource, numa, "allocated")]

    # Memory per type over the node (a block pinned to several NUMA nodes is allocated
    # under their joint label, "0,1", and taken from each one's free share): allocatable =
    # allocated + free; per NUMA node too where no block spans nodes.
    memory = _by(select(s, "podres_node_memory_bytes"), "memory_type", "state")
    whole = _by(select(s, "podres_node_allocatable_memory_bytes"), "memory_type")
    assert whole or spec.memory_policy == "none"
    for (mtype,), n in whole.items():
        assert n == memory[(mtype, "allocated")] + memory[(mtype, "free")]
    per_numa = _by(select(s, "podres_node_memory_bytes"), "numa_node", "memory_type", "state")
    joint = {t for n, t, _ in per_numa if "," in n}
    for (numa, mtype), n in _by(
        select(s, "podres_node_allocatable_memory_bytes"), "numa_node", "memory_type"
    ).items():
        if mtype not in joint:
            assert n == per_numa[(numa, mtype, "allocated")] + per_numa[(numa, mtype, "free")]
