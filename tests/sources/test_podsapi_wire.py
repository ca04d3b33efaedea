"""Pods from the kubelet's Pods API made into PodMeta: the upstream field numbers, bounds."""

from __future__ import annotations

from podres_exporter._generated.k8s.api.core.v1 import pod_pb2
from podres_exporter.core.podmeta import OwnerRef, ResourceHealth, Route
from podres_exporter.sources.podsapi_wire import (
    LABELS_OVER_LIMIT,
    NOT_UTF8,
    OWNERS_OVER_LIMIT,
    STATUSES_OVER_LIMIT,
    TEXT_CUT,
    PodDecodeError,
    PodsApiLimits,
    deleted_uid,
    pod_meta,
)

# ------------------------------------------------------------ an independent encoder
# The protobuf wire format by hand (varint keys, length-delimited fields), with the field
# numbers of kubernetes/api core/v1/generated.proto and apimachinery meta/v1: what a
# kubelet's v1.Pod#Marshal() writes, without our generated code.


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _str(num: int, text: str) -> bytes:
    return _len(num, text.encode())


def _int(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value)


def _map_entry(num: int, key: str, value: str) -> bytes:
    return _len(num, _str(1, key) + _str(2, value))


def _upstream_pod() -> bytes:
    owner = _str(1, "ReplicaSet") + _str(3, "web-5d8f") + _str(4, "rs-uid") + _str(5, "apps/v1")
    metadata = b"".join(
        [
            _str(1, "web-5d8f-abcde"),
            _str(2, "web-5d8f-"),  # generateName: not read
            _str(3, "shop"),
            _str(5, "0b7c-uid"),
            _str(6, "12345"),  # resourceVersion: not read
            _len(8, _int(1, 1_700_000_000)),
            _map_entry(11, "team", "payments"),
            _map_entry(11, "pod-template-hash", "5d8f"),
            _map_entry(12, "secret-ish", "annotations are not read"),
            _len(13, owner + _int(6, 1)),
        ]
    )
    container = _str(1, "app") + _str(2, "nginx:1.27")  # image: not read
    spec = _len(1, _str(1, "vol")) + _len(2, container) + _str(10, "node-a")
    health = _len(2, _str(1, "GPU-1") + _str(2, "Unhealthy")) + _len(
        2, _str(1, "GPU-2") + _str(2, "Healthy")
    )
    container_status = _str(1, "app") + _int(4, 1) + _len(14, _str(1, "nvidia.com/gpu") + health)
    init_status = _str(1, "setup")
    status = b"".join(
        [
            _str(1, "Running"),
            _len(2, _str(1, "Ready")),  # conditions: not read
            _len(8, container_status),
            _str(9, "Guaranteed"),
            _len(10, init_status),
            _len(15, _str(1, "gpu") + _str(2, "web-5d8f-abcde-gpu")),
        ]
    )
    return _len(1, metadata) + _len(2, spec) + _len(3, status)


def test_bytes_of_an_independent_encoder_decode_with_the_upstream_numbers() -> None:
    """A v1.Pod written by hand from the upstream field numbers gives every field we read."""
    meta, dropped = pod_meta(_upstream_pod())
    assert dropped == {}
    assert (meta.namespace, meta.name, meta.uid, meta.route) == (
        "shop",
        "web-5d8f-abcde",
        "0b7c-uid",
        Route.PODS_API,
    )
    assert (meta.phase, meta.qos_class) == ("Running", "Guaranteed")
    assert meta.owners == (OwnerRef("ReplicaSet", "web-5d8f", controller=True),)
    assert dict(meta.labels) == {"team": "payments", "pod-template-hash": "5d8f"}
    assert dict(meta.resource_health) == {
        "app": (
            ResourceHealth("nvidia.com/gpu", "GPU-1", "Unhealthy"),
            ResourceHealth("nvidia.com/gpu", "GPU-2", "Healthy"),
        )
    }
    pod = pod_pb2.Pod.FromString(_upstream_pod())
    assert pod.spec.nodeName == "node-a"
    assert [c.name for c in pod.spec.containers] == ["app"]
    assert pod.metadata.creationTimestamp.seconds == 1_700_000_000
    assert pod.status.resourceClaimStatuses[0].resourceClaimName == "web-5d8f-abcde-gpu"


def test_a_deleted_pod_gives_its_uid() -> None:
    """DELETED carries name, namespace and UID: the UID is what is removed."""
    data = _len(1, _str(1, "web") + _str(3, "shop") + _str(5, "gone-uid"))
    assert deleted_uid(data) == "gone-uid"


def test_bytes_that_are_no_pod_raise() -> None:
    """Truncated bytes, and a pod without a UID, are a PodDecodeError."""
    for bad in (b"\x0a\xff\xff\xff\xff", _len(1, _str(1, "no-uid"))):
        try:
            pod_meta(bad)
        except PodDecodeError:
            continue
        raise AssertionError(f"{bad!r} decoded")


def _pod(**labels: str) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace, pod.metadata.uid = "p", "ns", "u-1"
    pod.metadata.labels.update(labels)
    return pod


def test_ten_thousand_labels_are_cut_to_the_limit_by_key() -> None:
    """A pod with 10,000 labels keeps the first 256 by key and says how many it left out."""
    pod = _pod(**{f"k{i:05d}": "v" for i in range(10_000)})
    meta, dropped = pod_meta(pod.SerializeToString())
    assert len(meta.labels) == 256
    assert sorted(meta.labels)[:2] == ["k00000", "k00001"]
    assert dropped == {LABELS_OVER_LIMIT: 10_000 - 256}


def test_huge_and_odd_text_is_cut_and_escaped() -> None:
    """A huge label value is cut to 63 characters with its length said; control and
    bidi characters in any text are escaped."""
    pod = _pod(team="x" * 1_000_000, evil="a\x1b[2J\u202e")
    pod.metadata.name = "web\nINJECTED"
    pod.status.phase = "Running\x07"
    meta, dropped = pod_meta(pod.SerializeToString())
    assert meta.labels["team"] == "x" * 63 + "…(+999937 chars)"
    assert meta.labels["evil"] == "a\\x1b[2J\\u202e"
    assert meta.name == "web\\nINJECTED"
    assert meta.phase == "Running\\x07"
    assert dropped == {TEXT_CUT: 1}


def test_bytes_that_are_not_utf8_are_escaped() -> None:
    """A string field that is not UTF-8 (proto2 lets it through) is shown with escapes."""
    data = _len(1, _str(1, "p") + _str(5, "u-1") + _len(3, b"\xff\xfens"))
    meta, dropped = pod_meta(data)
    assert meta.namespace == "\\xff\\xfens"
    assert dropped == {NOT_UTF8: 1}


def test_owners_and_statuses_are_taken_up_to_their_limits() -> None:
    """Owner references, container statuses and their devices are cut at the limits."""
    pod = _pod()
    for i in range(20):
        pod.metadata.ownerReferences.add(kind="Thing", name=f"o{i}")
    status = pod.status.containerStatuses.add(name="c")
    resource = status.allocatedResourcesStatus.add(name="example.com/gpu")
    for i in range(10):
        resource.resources.add(resourceID=f"d{i}", health="Healthy")
    limits = PodsApiLimits(owners=3, devices=4)
    meta, dropped = pod_meta(pod.SerializeToString(), limits)
    assert [o.name for o in meta.owners] == ["o0", "o1", "o2"]
    assert [h.device_id for h in meta.resource_health["c"]] == ["d0", "d1", "d2", "d3"]
    assert dropped == {OWNERS_OVER_LIMIT: 17, STATUSES_OVER_LIMIT: 6}


def test_strings_that_repeat_from_pod_to_pod_are_held_once() -> None:
    """Two pods decoded apart share their namespace, label keys and values, owner kind,
    phase, QoS class, container, resource and health strings: 5,000 pods alike hold each
    once; what is each pod's own (its name, UID, device ids) is not shared."""
    a, _ = pod_meta(_upstream_pod())
    b, _ = pod_meta(_upstream_pod())
    assert a == b
    shared = [
        (a.namespace, b.namespace),
        (a.phase, b.phase),
        (a.qos_class, b.qos_class),
        (a.owners[0].kind, b.owners[0].kind),
        (a.owners[0].name, b.owners[0].name),
    ]
    shared += list(zip(a.labels, b.labels, strict=True))
    shared += list(zip(a.labels.values(), b.labels.values(), strict=True))
    shared += list(zip(a.resource_health, b.resource_health, strict=True))
    for x, y in zip(a.resource_health["app"], b.resource_health["app"], strict=True):
        shared += [(x.resource, y.resource), (x.health, y.health)]
    assert [x is y for x, y in shared] == [True] * len(shared)
