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
