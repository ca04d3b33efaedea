"""A pod's shape from a manifest of every workload kind, or from the shape flags; bad
input refused naming the file and key, or the flag."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from podres_exporter.core.errors import ConfigError
from podres_exporter.core.topology import Container
from podres_exporter.fit.manifest import KINDS, pod_from_flags, pod_from_manifest

GI = 2**30
POD_SPEC: dict[str, Any] = {
    "initContainers": [{"name": "fetch", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
    "containers": [
        {
            "name": "trainer",
            "resources": {
                "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 4},
                "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 4},
            },
        },
        {"name": "sidecar", "resources": {"requests": {"cpu": "500m"}}},
    ],
}
TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": POD_SPEC}


def workload(kind: str, name: str = "job") -> dict[str, Any]:
    """A manifest of ``kind`` whose pod is POD_SPEC."""
    meta = {"name": name, "namespace": "ml"}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": POD_SPEC}
    if kind == "PodTemplate":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "template": TEMPLATE}
    if kind == "CronJob":
        job = {"template": TEMPLATE}
        spec = {"schedule": "* * * * *", "jobTemplate": {"spec": job}}
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": spec}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": {"template": TEMPLATE}}


@pytest.mark.parametrize("kind", KINDS)
def test_every_workload_kind_gives_its_pod_template(kind: str) -> None:
    """Pod, PodTemplate and each controller's template (CronJob's job's too) give the same pod."""
    shape = pod_from_manifest(yaml.safe_dump(workload(kind)), "w.yaml")
    assert shape.origin == f"{kind}/job"
    trainer, sidecar = shape.pod.containers
    assert trainer == Container(
        "trainer",
        requests={"cpu": 8000, "memory": 64 * GI, "nvidia.com/gpu": 4},
        limits={"cpu": 8000, "memory": 64 * GI, "nvidia.com/gpu": 4},
    )
    assert sidecar.requests == {"cpu": 500} and sidecar.limits == {}
    assert [c.name for c in shape.pod.init_containers] == ["fetch"]


def test_multi_document_first_workload_or_the_named_one() -> None:
    """The first workload of a multi-document file, skipping other kinds; --name picks another."""
    docs = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}},
        workload("Deployment", "first"),
        workload("StatefulSet", "second"),
    ]
    text = yaml.safe_dump_all(docs)
    assert pod_from_manifest(text, "m.yaml").origin == "Deployment/first"
    assert pod_from_manifest(text, "m.yaml", name="second").origin == "StatefulSet/second"
    with pytest.raises(ConfigError, match=r"-f m\.yaml: no workload named 'third' \(--name\)"):
        pod_from_manifest(text, "m.yaml", name="third")


def test_list_and_json_are_read() -> None:
    """``kubectl get -o json`` output, a List of items, is read like YAML."""
    text = json.dumps({"kind": "List", "items": [workload("Job", "a"), workload("Pod", "b")]})
    assert pod_from_manifest(text, "-", name="b").origin == "Pod/b"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [", r"-f w\.yaml: not YAML \(line 2, column 1\)"),
        ("kind: Service\n", r"-f w\.yaml: no pod or workload \(found: Service\)"),
        ("kind: Deployment\nspec: {}\n", r"-f w\.yaml: spec\.template: missing"),
        ("kind: Pod\nspec: {containers: []}\n", r"spec\.containers: a pod needs at least one"),
        ("kind: Pod\nspec: {containers: 3}\n", r"spec\.containers: expected a list"),
        (
            "kind: Pod\nspec:\n  containers:\n  - name: a\n    resources: {limits: {cpu: lots}}\n",
            r"-f w\.yaml: spec\.containers\[0\]\.resources\.limits\.cpu: expected a quantity",
        ),
        (
            "kind: Job\nspec:\n  template:\n    spec:\n      containers:\n      - name: a\n"
            "        resources: {requests: {nvidia.com/gpu: 0.5}}\n",
            r"spec\.template\.spec\.containers\[0\]\.resources\.requests\.nvidia\.com/gpu: "
            "nvidia.com/gpu must be a whole number",
        ),
    ],
)
def test_bad_manifest_names_the_file_and_key(text: str, message: str) -> None:
    """A manifest that is no YAML, holds no workload, or a bad quantity: the file and key named."""
    with pytest.raises(ConfigError, match=message):
        pod_from_manifest(text, "w.yaml")


def test_stdin_is_named_as_stdin() -> None:
    """A manifest read from stdin is named ``stdin (-f -)`` in its errors."""
    with pytest.raises(ConfigError, match=r"^stdin \(-f -\): document 2: spec: missing"):
        pod_from_manifest("kind: Service\n---\nkind: Pod\n", "-")


def test_shape_flags_make_a_guaranteed_container_and_more() -> None:
    """--cpu/--memory/--gpu/--resource make one container with limits = requests; each
    --container another."""
    shape = pod_from_flags(
        cpu="8",
        memory="64Gi",
        gpu="4",
        resources=["hugepages-1Gi=2Gi"],
        containers=["cpu=500m,memory=1Gi"],
    )
    first, second = shape.pod.containers
    assert (
        first.requests
        == first.limits
        == {
            "cpu": 8000,
            "memory": 64 * GI,
            "nvidia.com/gpu": 4,
            "hugepages-1Gi": 2 * GI,
        }
    )
    assert second.requests == {"cpu": 500, "memory": GI}
    assert shape.origin == "flags"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cpu": "eight"}, r"^--cpu 'eight': expected a quantity"),
        ({"memory": "-1Gi"}, r"^--memory '-1Gi': expected a quantity"),
        ({"gpu": "1.5"}, r"^--gpu '1\.5': nvidia\.com/gpu must be a whole number"),
        ({"resources": ["nvidia.com/gpu"]}, r"^--resource 'nvidia\.com/gpu': expected NAME="),
        ({"containers": ["cpu=1,memory"]}, r"^--container 'cpu=1,memory': expected RESOURCE="),
        ({"containers": ["cpu=x"]}, r"^--container 'cpu=x': cpu: expected a quantity"),
        ({}, r"^no pod to fit: give -f FILE"),
    ],
)
def test_bad_shape_flag_is_named(kwargs: dict[str, Any], message: str) -> None:
    """A bad quantity or spec names its flag and value; no shape at all says what to give."""
    args: dict[str, Any] = {"cpu": None, "memory": None, "gpu": None, "resources": []}
    args["containers"] = []
    args.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        pod_from_flags(**args)
