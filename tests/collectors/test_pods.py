"""The pods collector: whose each pod is, its allowed labels, device health, the routes."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from podres_exporter.collectors import pods
from podres_exporter.core.model import PodAlloc
from podres_exporter.core.podidentity import merge
from podres_exporter.core.podlabels import Allowlist
from podres_exporter.core.podmeta import PodDirectory, PodMeta, Route
from tests.collectors.support import (
    IDENTITY,
    POD_DIRECTORIES,
    READING,
    exposition,
    node_view,
    rich_view,
)

EXPECTED = """\
# HELP podres_pod_info One series per pod: its current UID, phase, QoS class, workload (owner_kind, owner_name: a ReplicaSet resolved to its Deployment where the pod proves it) and controlling owner as the pod lists it.
# TYPE podres_pod_info gauge
podres_pod_info{namespace="kube-system",pod="etcd-node",uid="9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"} 1.0
podres_pod_info{controller_kind="Job",controller_name="train",namespace="ml",owner_kind="Job",owner_name="train",phase="Running",pod="train",qos_class="Guaranteed",uid="0b9c2f4e-1d2a-4c5b-9e8f-7a6b5c4d3e2f"} 1.0
podres_pod_info{controller_kind="ReplicaSet",controller_name="serve-7d9f8b6c5d",namespace="web",owner_kind="Deployment",owner_name="serve",phase="Running",pod="serve",qos_class="Burstable",uid="5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"} 1.0
# HELP podres_pod_labels_info One series per pod with the pod labels --pod-labels allows, as label_<key>.
# TYPE podres_pod_labels_info gauge
podres_pod_labels_info{namespace="kube-system",pod="etcd-node",uid="9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"} 1.0
podres_pod_labels_info{label_app_kubernetes_io_name="t",label_team="vision",namespace="ml",pod="train",uid="0b9c2f4e-1d2a-4c5b-9e8f-7a6b5c4d3e2f"} 1.0
podres_pod_labels_info{label_app_kubernetes_io_name="serve",namespace="web",pod="serve",uid="5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"} 1.0
# HELP podres_pod_labels_dropped Allowed pod labels left out by the bounds (64 a pod, 256 names a node, keys longer than Kubernetes allows).
# TYPE podres_pod_labels_dropped gauge
podres_pod_labels_dropped 0.0
# HELP podres_container_device_health_info One series per device a container holds that the kubelet does not call Healthy (Unhealthy, Unknown; KEP-4680), with the device's identity.
# TYPE podres_container_device_health_info gauge
podres_container_device_health_info{container="main",device_id="GPU-a1",gpu="0",health="Unhealthy",namespace="ml",pod="train",resource="nvidia.com/gpu",uuid="GPU-a1"} 1.0
# HELP podres_pod_identity_source_up 1 when the route answers now (its socket or directory there, its last read good).
# TYPE podres_pod_identity_source_up gauge
podres_pod_identity_source_up{route="pods-api"} 1.0
podres_pod_identity_source_up{route="apiserver"} 0.0
podres_pod_identity_source_up{route="log-dirs"} 0.0
# HELP podres_pod_identity_source_synced 1 when the route's answer holds the whole node (the Pods API after its initial sync, a watch after its first list).
# TYPE podres_pod_identity_source_synced gauge
podres_pod_identity_source_synced{route="pods-api"} 0.0
podres_pod_identity_source_synced{route="apiserver"} 0.0
podres_pod_identity_source_synced{route="log-dirs"} 1.0
# HELP podres_pod_identity_source_stale 1 when the route's answer served is the last good one, kept while it is down.
# TYPE podres_pod_identity_source_stale gauge
podres_pod_identity_source_stale{route="pods-api"} 0.0
podres_pod_identity_source_stale{route="apiserver"} 0.0
podres_pod_identity_source_stale{route="log-dirs"} 1.0
# HELP podres_pod_identity_source_pods Pods the route's served answer knows, every incarnation (UID) once.
# TYPE podres_pod_identity_source_pods gauge
podres_pod_identity_source_pods{route="pods-api"} 2.0
podres_pod_identity_source_pods{route="log-dirs"} 2.0
# HELP podres_pod_identity_source_last_success_timestamp_seconds Unix time of the route's served answer.
# TYPE podres_pod_identity_source_last_success_timestamp_seconds gauge
podres_pod_identity_source_last_success_timestamp_seconds{route="pods-api"} 1.7e+09
podres_pod_identity_source_last_success_timestamp_seconds{route="log-dirs"} 1.69999999e+09
"""


def test_pods_collector_exact_text() -> None:
    """One info series per pod (a Deployment resolved from its ReplicaSet, a log-directory
    pod with its UID alone while the Pods API syncs), its allowed labels, a container's
    unhealthy device with the device's identity from the join (its healthy one has no
    series), and each route's state."""
    view = rich_view()
    # The log-directory pod is one the kubelet lists (a static pod with no resources).
    etcd = PodAlloc("kube-system", "etcd-node")
    reading = replace(READING, pods=(*READING.pods, etcd))
    view = replace(view, snapshot=replace(view.snapshot, reading=reading))
    assert exposition(pods.COLLECTOR, view) == EXPECTED


def test_no_labels_family_unless_pod_labels_is_set() -> None:
    """Without --pod-labels neither podres_pod_labels_info nor its dropped count is served."""
    view = node_view(identity=merge(POD_DIRECTORIES, Allowlist.of(())))
    text = exposition(pods.COLLECTOR, view)
    assert "podres_pod_info{" in text
    assert "podres_pod_labels" not in text


def test_nothing_without_any_route() -> None:
    """No identity read: no family at all."""
    assert exposition(pods.COLLECTOR, node_view()) == ""
    assert IDENTITY.pods  # the fixture itself is not empty


def test_a_hostile_pods_labels_are_bounded_and_escaped() -> None:
    """10,000 labels on one pod: 64 served, the rest counted on podres_pod_labels_dropped;
    quotes, backslashes and line breaks in a value are escaped, not a broken line."""
    hostile = {f"k{i:05d}": "v" for i in range(10_000)}
    hostile["k00000"] = 'a"}\nevil{x="1'
    meta = PodMeta("ns", "p", "u", Route.PODS_API, labels=MappingProxyType(hostile))
    directory = PodDirectory(Route.PODS_API, MappingProxyType({"u": meta}))
    view = node_view(identity=merge({Route.PODS_API: directory}, Allowlist.of(("*",))))
    text = exposition(pods.COLLECTOR, view)
    assert "podres_pod_labels_dropped 9936.0" in text
    [line] = [x for x in text.splitlines() if x.startswith("podres_pod_labels_info{")]
    assert 'label_k00000="a\\"}\\nevil{x=\\"1"' in line
    assert line.count("label_k") == 64


def test_a_log_directory_of_a_pod_the_kubelet_no_longer_lists_has_no_series() -> None:
    """The kubelet keeps a departed pod's log directory for a while: a pod only a log
    directory names is served while the kubelet lists it, and not once it does not."""
    uid = "3f2e1d0c-9b8a-4765-8432-10fedcba9876"
    logs = PodDirectory(
        Route.LOG_DIRS,
        MappingProxyType({uid: PodMeta("ml", "gone-0", uid, Route.LOG_DIRS)}),
        taken_at=1.7e9,
    )
    identity = merge({Route.LOG_DIRS: logs}, Allowlist.of(()))
    listed = node_view(
        replace(READING, pods=(*READING.pods, PodAlloc("ml", "gone-0"))), identity=identity
    )
    assert f'pod="gone-0",uid="{uid}"' in exposition(pods.COLLECTOR, listed)
    departed = node_view(READING, identity=identity)
    assert 'pod="gone-0"' not in exposition(pods.COLLECTOR, departed)
