"""Whose a pod is: its controlling owner, and the workload above it where the pod says. Pure.

A pod's controlling owner is the one ``metadata.ownerReferences`` entry with
``controller: true`` (the API server allows at most one); a pod without one (a bare pod,
a static pod's mirror is owned by its Node but not controlled) has no owner.

The workload is the controlling owner, one step further up where the pod itself proves
it, with nothing but the pod to read (no API-server rights):

- A **ReplicaSet** made by a Deployment is named ``<deployment>-<pod-template-hash>``
  and stamps that hash on its pods as the ``pod-template-hash`` label. When the pod
  carries the label and the ReplicaSet's name is a non-empty name, ``-``, then exactly
  that hash, the workload is the ``Deployment`` of that name.
- It **cannot** be resolved, and the ReplicaSet is given as it is, when the ReplicaSet
  was made by hand or by another controller (no ``pod-template-hash`` label), or when the
  label does not match the ReplicaSet's name (a ReplicaSet renamed, or a label edited).
  Only the ReplicaSet's own ownerReferences, on the API server, would say more.
- A **Job** made by a CronJob is named ``<cronjob>-<scheduled time in minutes>``, but the
  pod carries nothing that proves it (a Job named so by hand looks the same): the Job is
  given as it is. Only the Job object's ownerReferences, read from the API server, would
  name the CronJob.
- Every other kind (StatefulSet, DaemonSet, Job, a custom resource, a Node for a mirror
  pod when marked controller) is the workload itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from podres_exporter.core.podmeta import OwnerRef, PodMeta

TEMPLATE_HASH_LABEL = "pod-template-hash"


@dataclass(frozen=True, slots=True)
class Owner:
    """A pod's workload (``kind``, ``name``) and its controlling owner as the pod lists it
    (``controller_kind``, ``controller_name``: the same unless resolved a step up)."""

    kind: str
    name: str
    controller_kind: str
    controller_name: str

    @property
    def resolved(self) -> bool:
        """Whether the workload is above the controlling owner (a Deployment found)."""
        return (self.kind, self.name) != (self.controller_kind, self.controller_name)


def controlling_owner(owners: tuple[OwnerRef, ...]) -> OwnerRef | None:
    """The ownerReference with ``controller: true``; None when there is none (the first
    when a malformed object lists several)."""
    for ref in owners:
        if ref.controller:
            return ref
    return None


def deployment_of(replicaset: str, template_hash: str) -> str | None:
    """The Deployment a ReplicaSet of that name belongs to, proven by the pod's
    ``pod-template-hash``; None when the name does not end in ``-<hash>`` after a name."""
    suffix = "-" + template_hash
    if not template_hash or not replicaset.endswith(suffix) or len(replicaset) == len(suffix):
        return None
    return replicaset[: -len(suffix)]


def owner_of(pod: PodMeta) -> Owner | None:
    """The pod's workload and controlling owner; None for a pod with no controller."""
    ref = controlling_owner(pod.owners)
    if ref is None:
        return None
    if ref.kind == "ReplicaSet":
        deployment = deployment_of(ref.name, pod.labels.get(TEMPLATE_HASH_LABEL, ""))
        if deployment is not None:
            return Owner("Deployment", deployment, ref.kind, ref.name)
    return Owner(ref.kind, ref.name, ref.kind, ref.name)


__all__ = ["TEMPLATE_HASH_LABEL", "Owner", "controlling_owner", "deployment_of", "owner_of"]
