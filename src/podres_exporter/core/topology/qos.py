"""A pod's QoS class, as pkg/apis/core/v1/helper/qos/qos.go ``GetPodQOS`` derives it."""

from __future__ import annotations

from podres_exporter.core.topology.model import CPU, MEMORY, Pod, QoS

__all__ = ["qos"]

_COMPUTE = (CPU, MEMORY)


def qos(pod: Pod) -> QoS:
    """Guaranteed when every container (init containers too) sets cpu and memory limits
    and its requests equal them; BestEffort when none sets a cpu or memory request or
    limit; Burstable otherwise (qos.go ``GetPodQOS``: only cpu and memory count)."""
    containers = pod.init_containers + pod.containers
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for c in containers:
        for r in _COMPUTE:
            if c.requests.get(r, 0) > 0:
                requests[r] = requests.get(r, 0) + c.requests[r]
            if c.limits.get(r, 0) > 0:
                limits[r] = limits.get(r, 0) + c.limits[r]
        if not all(c.limits.get(r, 0) > 0 for r in _COMPUTE):
            guaranteed = False
        # a missing request defaults to the limit (API server defaulting)
        if any(c.request(r) != c.limits.get(r, 0) for r in _COMPUTE):
            guaranteed = False
    if not requests and not limits:
        return QoS.BEST_EFFORT
    return QoS.GUARANTEED if guaranteed else QoS.BURSTABLE
