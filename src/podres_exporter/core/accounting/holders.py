"""Who holds which CPUs and who holds nothing else: the settling of a listing by several pods.

Every room of the accounting walks a pod's containers as holders (namespace, pod,
container). A holder counts once however often it is listed: a pod listed twice holds
its CPUs and devices once, and no series is rendered twice.

Finished pods on kubelets before 1.34: List may still show a finished pod with devices
(or CPUs) that were given back and handed to another pod. When liveness facts are
given (:class:`~podres_exporter.core.model.PodLiveness`), a device or exclusive CPU listed by
several pods is held by the pods that still run: a finished holder is dropped. Where
the facts cannot tell, nothing is dropped and the ``holder_liveness_undecided`` anomaly
counts it (see :func:`pod_state` for the rule: a pod's phase, where a pod-identity route
gives it, settles it first). Without liveness facts (None) the
accounting is as before and that anomaly is not reported at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from podres_exporter.core.model import ContainerAlloc, Holder, KubeletReading, PodAlloc, PodLiveness

# Reported only when liveness facts were given: a device or CPU listed by several pods
# where it could not be told which of them still run.
LIVENESS_ANOMALY = "holder_liveness_undecided"
POD_STATES = ("running", "finished", "undecided")
# Phases of a pod that has ended for good, and of one that holds what it was given.
_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
_LIVE_PHASES = frozenset({"Pending", "Running"})


def holdings(pod: PodAlloc) -> Iterator[tuple[Holder, ContainerAlloc]]:
    """Each container of ``pod`` with its holder (pod-level resources carry no devices)."""
    for c in pod.containers:
        yield Holder(pod.namespace, pod.name, c.name), c


def contested(reading: KubeletReading) -> bool:
    """Whether a device or a CPU is listed by containers of several pods: only then does
    the accounting ask which of them still run (a finished pod's stale listing)."""
    cpu_pod: dict[int, tuple[str, str]] = {}
    device_pod: dict[tuple[str, str], tuple[str, str]] = {}
    for pod in reading.pods:
        key = (pod.namespace, pod.name)
        for cpu in pod.cpu_ids:
            if cpu_pod.setdefault(cpu, key) != key:
                return True
        for c in pod.containers:
            for cpu in c.cpu_ids:
                if cpu_pod.setdefault(cpu, key) != key:
                    return True
            for d in c.devices:
                if device_pod.setdefault((d.resource, d.device_id), key) != key:
                    return True
    return False


def pod_state(liveness: PodLiveness, namespace: str, pod: str) -> str:
    """``running``, ``finished`` or ``undecided`` for one listed pod, from node-local facts.

    First the pod's phase, where a route gives it (the kubelet's Pods API, the API
    server): a pod with an incarnation ``Pending`` or ``Running`` is running; one whose
    every incarnation is ``Succeeded`` or ``Failed`` is finished. A pod with no phase
    known, or ``Unknown``, is settled by the trees below.

    The trees: the kubelet creates a pod's cgroup before its sandbox, and the sandbox
    before the pod's log directory ``/var/log/pods/<ns>_<pod>_<uid>``; it removes the
    pod cgroup once the pod has finished, and the log directory only when the pod is
    deleted. So a pod whose log directory names a UID that still has a pod cgroup is
    running; a pod with log directories none of whose UIDs has a cgroup has finished.
    A pod with no log directory (not started yet, or already deleted), or a node where
    either tree could not be read, is undecided.
    """
    phases = liveness.phases.get((namespace, pod)) if liveness.phases else None
    if phases:
        if phases & _LIVE_PHASES:
            return "running"
        if phases <= _FINISHED_PHASES:
            return "finished"
    if liveness.pod_uids is None or liveness.live_uids is None:
        return "undecided"
    uids = liveness.pod_uids.get((namespace, pod))
    if not uids:
        return "undecided"
    return "running" if uids & liveness.live_uids else "finished"


def settle(
    holders: Mapping[Holder, object],
    liveness: PodLiveness | None,
    states: dict[tuple[str, str], str],
    anomalies: Counter[str],
) -> list[Holder]:
    """The holders that count for one CPU or device listed by ``holders``.

    Without liveness facts, or with one pod listing it, every holder counts (as
    before). Listed by several pods: the finished pods' holders are dropped; when a
    pod among those left is undecided, nothing is dropped and it is an anomaly.
    """
    listed = list(holders)
    if liveness is None or len({(h.namespace, h.pod) for h in listed}) == 1:
        return listed
    for h in listed:
        key = (h.namespace, h.pod)
        if key not in states:
            states[key] = pod_state(liveness, *key)
    if any(states[(h.namespace, h.pod)] == "undecided" for h in listed):
        anomalies[LIVENESS_ANOMALY] += 1
        return listed
    running = [h for h in listed if states[(h.namespace, h.pod)] == "running"]
    return running or listed
