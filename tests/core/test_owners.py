"""A pod's controlling owner, and the Deployment above a ReplicaSet where the pod proves it."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from podres_exporter.core.owners import Owner, controlling_owner, deployment_of, owner_of
from podres_exporter.core.podmeta import OwnerRef, PodMeta, Route


def _pod(*owners: OwnerRef, **labels: str) -> PodMeta:
    return PodMeta("ns", "p", "u", Route.PODS_API, owners=owners, labels=MappingProxyType(labels))


def test_the_controlling_owner_is_the_one_marked_controller() -> None:
    """Only the ownerReference with controller=true counts; none marked: no owner."""
    plain = OwnerRef("ConfigMap", "cm")
    ctl = OwnerRef("StatefulSet", "db", controller=True)
    assert controlling_owner((plain, ctl)) is ctl
    assert controlling_owner((plain,)) is None
    assert owner_of(_pod(plain)) is None
    assert owner_of(_pod()) is None
    assert owner_of(_pod(plain, ctl)) == Owner("StatefulSet", "db", "StatefulSet", "db")


def test_a_replicaset_is_its_deployment_when_the_hash_label_matches() -> None:
    """web-7d9f8b6c5d with pod-template-hash 7d9f8b6c5d is Deployment web; the raw
    controller is kept beside it."""
    rs = OwnerRef("ReplicaSet", "web-7d9f8b6c5d", controller=True)
    owner = owner_of(_pod(rs, **{"pod-template-hash": "7d9f8b6c5d"}))
    assert owner == Owner("Deployment", "web", "ReplicaSet", "web-7d9f8b6c5d")
    assert owner is not None and owner.resolved


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        ("web-7d9f8b6c5d", {}),  # a ReplicaSet made by hand: no hash label
        ("web-7d9f8b6c5d", {"pod-template-hash": "0000000000"}),  # the hash does not match
        ("7d9f8b6c5d", {"pod-template-hash": "7d9f8b6c5d"}),  # nothing before the hash
        ("web7d9f8b6c5d", {"pod-template-hash": "7d9f8b6c5d"}),  # no dash before it
        ("web-7d9f8b6c5d", {"pod-template-hash": ""}),
    ],
)
def test_a_replicaset_the_pod_does_not_prove_stays_a_replicaset(
    name: str, labels: dict[str, str]
) -> None:
    """Without a matching pod-template-hash the ReplicaSet is given as it is."""
    owner = owner_of(_pod(OwnerRef("ReplicaSet", name, controller=True), **labels))
    assert owner == Owner("ReplicaSet", name, "ReplicaSet", name)
    assert owner is not None and not owner.resolved


def test_a_cronjobs_job_is_not_resolved() -> None:
    """A Job named like a CronJob's is given as the Job: the pod cannot prove more."""
    job = OwnerRef("Job", "backup-29125440", controller=True)
    assert owner_of(_pod(job)) == Owner("Job", "backup-29125440", "Job", "backup-29125440")


def test_deployment_of_cuts_exactly_the_hash() -> None:
    """The Deployment's own name may hold dashes and the hash's text."""
    assert deployment_of("a-b-c-abc", "abc") == "a-b-c"
    assert deployment_of("a-abc-x", "abc") is None
