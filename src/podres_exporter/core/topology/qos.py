"""A pod's QoS class, as pkg/apis/core/v1/helper/qos/qos.go ``GetPodQOS`` derives it."""

from __future__ import annotations

from podres_exporter.core.topology.model import CPU, MEMORY, Pod, QoS

__all__ = ["qos"]

_COMPUTE = (CPU, MEMORY)


def qos(pod: Pod) -> QoS:
    """The QoS class as pkg/apis/core/v1/helper/qos/qos.go ``GetPodQOS`` (v1.28) derives
    it: only cpu and memory count; requests and limits are summed over every container,
    init containers too; Guaranteed when every container sets both limits and the summed
    requests equal the summed limits; BestEffort when nothing is set; else Burstable.
    A missing request defaults to the limit, as the API server defaults it."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for c in pod.containers + pod.init_containers:
        found = set()
        for r in _COMPUTE:
            req = c.request(r)
            if req > 0:
                requests[r] = requests.get(r, 0) + req
            lim = c.limits.get(r, 0)
            if lim > 0:
                found.add(r)
                limits[r] = limits.get(r, 0) + lim
        if found != set(_COMPUTE):
            guaranteed = False
    if not requests and not limits:
        return QoS.BEST_EFFORT
    matched = all(limits.get(r) == q for r, q in requests.items())
    if guaranteed and matched and len(requests) == len(limits):
        return QoS.GUARANTEED
    return QoS.BURSTABLE
