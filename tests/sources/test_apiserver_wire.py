"""The API server's answers read into pod identities, and the in-cluster settings."""

from __future__ import annotations

import pytest

from podres_exporter.core.podmeta import OwnerRef, ResourceHealth, Route
from podres_exporter.sources.apiserver_wire import (
    ApiServer,
    ApiServerError,
    in_cluster,
    list_answer,
    pod_meta,
    pods_path,
    watch_event,
)
from tests.sources.apiserver_server import pod


def test_in_cluster_reads_the_service_variables() -> None:
    """KUBERNETES_SERVICE_HOST/PORT name the server; absent, there is no cluster."""
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    paths = {"token_path": "/t", "ca_path": "/c"}
    assert in_cluster(env, **paths) == ApiServer("10.0.0.1", 6443, **paths)
    assert in_cluster({}) is None
    assert in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1"}) == ApiServer("fd00::1", 443)
    assert ApiServer("fd00::1", 443).netloc == "[fd00::1]:443"


@pytest.mark.parametrize("port", ["0", "65536", "http", "-1"])
def test_in_cluster_refuses_a_port_that_is_not_one(port: str) -> None:
    """A KUBERNETES_SERVICE_PORT that is not a port is a ValueError naming it."""
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_PORT"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": port})


def test_pods_path_selects_the_node() -> None:
    """The request asks for the node's pods only, the selector escaped."""
    assert pods_path("n1", watch="1") == ("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=1")


def test_pod_meta_reads_identity_phase_qos_owners_and_device_health() -> None:
    """Every field the route gives, device health included (KEP-4680)."""
    obj = pod("t-0", labels={"a": "1", "bad": 5}, owner=("StatefulSet", "t"), qos="Guaranteed")
    obj["metadata"]["ownerReferences"].append({"kind": "Node", "name": "n"})
    obj["status"]["containerStatuses"] = [
        {
            "name": "main",
            "allocatedResourcesStatus": [
                {
                    "name": "nvidia.com/gpu",
                    "resources": [{"resourceID": "GPU-1", "health": "Unhealthy"}],
                }
            ],
        }
    ]
    meta = pod_meta(obj)
    assert meta is not None and meta.route is Route.APISERVER
    assert (meta.namespace, meta.name, meta.uid) == ("team-a", "t-0", "uid-t-0")
    assert (meta.phase, meta.qos_class) == ("Running", "Guaranteed")
    assert dict(meta.labels) == {"a": "1"}
    assert meta.owners == (OwnerRef("StatefulSet", "t", True), OwnerRef("Node", "n", False))
    assert dict(meta.resource_health) == {
        "main": (ResourceHealth("nvidia.com/gpu", "GPU-1", "Unhealthy"),)
    }


@pytest.mark.parametrize(
    "obj",
    [None, [], {"metadata": {"name": "x", "namespace": "y"}}, {"metadata": "x"}, {"metadata": {
        "name": 1, "namespace": "y", "uid": "u"}}],
)  # fmt: skip
def test_pod_meta_without_identity_is_none(obj: object) -> None:
    """A pod without namespace, name and UID (or of the wrong shape) is None."""
    assert pod_meta(obj) is None


def test_pod_meta_of_the_wrong_types_inside_is_read_as_far_as_it_goes() -> None:
    """Owners, statuses and labels of the wrong types are left out, never raised on."""
    obj = {"metadata": {"name": "a", "namespace": "b", "uid": "c", "labels": [1],
                        "ownerReferences": [1, {"kind": 2}]},
           "status": {"phase": 3, "containerStatuses": "x"}}  # fmt: skip
    meta = pod_meta(obj)
    assert meta is not None and meta.owners == () and not meta.labels and meta.phase == ""


def test_watch_event_kinds() -> None:
    """ADDED/MODIFIED/DELETED carry a pod, BOOKMARK a version, ERROR its code."""
    added = watch_event(b'{"type":"ADDED","object":' + _json(pod("a")) + b"}")
    assert added.type == "ADDED" and added.pod is not None and added.pod.name == "a"
    bookmark = watch_event(b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}')
    assert (bookmark.type, bookmark.resource_version, bookmark.pod) == ("BOOKMARK", "7", None)
    error = watch_event(b'{"type":"ERROR","object":{"kind":"Status","code":410,"message":"m"}}')
    assert (error.code, error.message) == (410, "m")
    for bad in (b"not json", b'{"type":"SURPRISE","object":{}}', b"[]"):
        with pytest.raises(ApiServerError):
            watch_event(bad)


def test_list_answer_needs_items_and_a_version() -> None:
    """A list page gives its pods, version and continue token; anything else is refused."""
    body = b'{"metadata":{"resourceVersion":"5","continue":"c"},"items":[' + _json(pod("a"))
    pods, version, token = list_answer(body + b',{"metadata":{}}]}')
    assert [p.name for p in pods] == ["a"] and (version, token) == ("5", "c")
    for bad in (b"{}", b'{"metadata":{"resourceVersion":"1"}}', b"nope"):
        with pytest.raises(ApiServerError):
            list_answer(bad)


def _json(obj: object) -> bytes:
    import json

    return json.dumps(obj).encode()
