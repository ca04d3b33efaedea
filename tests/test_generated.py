"""The committed generated code is exactly what the protos produce."""

from __future__ import annotations

import filecmp
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "src" / "podres_exporter" / "_generated"


def _load_genproto():
    spec = importlib.util.spec_from_file_location("genproto", ROOT / "tools" / "genproto.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["genproto"] = module
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_in_step_with_protos(tmp_path: Path) -> None:
    """Regenerating into a temp dir gives the committed files byte for byte (run `make proto`)."""
    pytest.importorskip("grpc_tools")
    genproto = _load_genproto()
    out = tmp_path / "_generated"
    genproto.generate(out)
    fresh = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(COMMITTED)
        for p in COMMITTED.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert fresh == committed, "file sets differ: run `make proto`"
    differ = [str(p) for p in fresh if not filecmp.cmp(out / p, COMMITTED / p, shallow=False)]
    assert not differ, f"out of step with proto/: {differ}; run `make proto`"


def test_wire_names_match_the_kubelet_contract() -> None:
    """Package, service and method names are the ones a real kubelet serves."""
    from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as dp
    from podres_exporter._generated.podresources.v1 import api_pb2 as v1
    from podres_exporter._generated.podresources.v1alpha1 import api_pb2 as v1alpha1

    svc = v1.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert svc.full_name == "v1.PodResourcesLister"
    assert {m.name for m in svc.methods} == {"List", "GetAllocatableResources", "Get"}
    assert (
        v1alpha1.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name
        == "v1alpha1.PodResourcesLister"
    )
    assert dp.DESCRIPTOR.services_by_name["Registration"].full_name == "v1beta1.Registration"
    fields = {f.name: f.number for f in v1.ContainerResources.DESCRIPTOR.fields}
    assert fields == {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5}
    assert v1.NUMANode.DESCRIPTOR.fields_by_name["ID"].number == 1
    assert v1.ClaimResource.DESCRIPTOR.fields_by_name["share_id"].has_presence
    pref = {f.name: f.number for f in dp.ContainerPreferredAllocationRequest.DESCRIPTOR.fields}
    assert pref == {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}


def test_pods_api_wire_names_match_the_kubelet() -> None:
    """The Pods API service, methods and the v1.Pod field numbers are the upstream ones."""
    from podres_exporter._generated.k8s.api.core.v1 import pod_pb2
    from podres_exporter._generated.podsapi.v1alpha1 import api_pb2 as pods

    svc = pods.DESCRIPTOR.services_by_name["Pods"]
    assert svc.full_name == "v1alpha1.Pods"
    assert {m.name: m.server_streaming for m in svc.methods} == {
        "WatchPods": True,
        "ListPods": False,
        "GetPod": False,
    }
    assert dict(pods.EventType.items()) == {
        "UNSPECIFIED": 0,
        "ADDED": 1,
        "MODIFIED": 2,
        "DELETED": 3,
        "INITIAL_SYNC_COMPLETE": 4,
    }
    assert pods.GetPodRequest.DESCRIPTOR.fields_by_name["podUID"].number == 1

    def numbers(message: object) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    assert numbers(pod_pb2.Pod) == {"metadata": 1, "spec": 2, "status": 3}
    assert numbers(pod_pb2.ObjectMeta) == {
        "name": 1,
        "namespace": 3,
        "uid": 5,
        "creationTimestamp": 8,
        "labels": 11,
        "ownerReferences": 13,
    }
    owner = {"kind": 1, "name": 3, "uid": 4, "apiVersion": 5, "controller": 6}
    assert numbers(pod_pb2.OwnerReference) == owner
    assert numbers(pod_pb2.PodSpec) == {"containers": 2, "nodeName": 10, "initContainers": 20}
    assert numbers(pod_pb2.PodStatus) == {
        "phase": 1,
        "containerStatuses": 8,
        "qosClass": 9,
        "initContainerStatuses": 10,
        "resourceClaimStatuses": 15,
    }
    assert numbers(pod_pb2.ContainerStatus) == {"name": 1, "allocatedResourcesStatus": 14}
    assert numbers(pod_pb2.ResourceStatus) == {"name": 1, "resources": 2}
    assert numbers(pod_pb2.ResourceHealth) == {"resourceID": 1, "health": 2}
