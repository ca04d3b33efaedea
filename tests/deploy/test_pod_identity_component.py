"""The pod-identity-apiserver component: the only RBAC of any install, and exactly what
docs/deploy.md and the component's comment say it grants and changes."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.deploy.conftest import ALL_RENDERINGS
from tests.deploy.test_install_choices import kustomize
from tests.deploy.test_manifests import DEPLOY, KUBERNETES_VERSION, Doc, Render, find, pod_spec

COMPONENT = DEPLOY / "components" / "pod-identity-apiserver"
RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
EXPORTER = "podres-exporter"
NAME = "podres-exporter-pod-identity"


def with_component(tmp_path: Path, resource: str) -> list[Doc]:
    """``resource`` (under deploy/) with the component, rendered."""
    rel = os.path.relpath(DEPLOY / resource, tmp_path)
    component = os.path.relpath(COMPONENT, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [rel],
                "components": [component],
            }
        )
    )
    return kustomize(tmp_path)


def key(doc: Doc) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


@pytest.mark.parametrize("name", ALL_RENDERINGS)
def test_no_install_without_the_component_grants_anything(render: Render, name: str) -> None:
    """No default install, overlay or documented combination holds an RBAC object, and no
    pod mounts a ServiceAccount token: no pod permission, no API access at all."""
    docs = render(name)
    assert [key(d) for d in docs if d["kind"] in RBAC_KINDS] == []
    for daemonset in (d for d in docs if d["kind"] == "DaemonSet"):
        assert pod_spec(daemonset)["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    ("resource", "installed"),
    [("base", "base"), ("overlays/device-plugin", "device-plugin")],
)
def test_the_component_grants_get_list_watch_on_pods_and_changes_nothing_else(
    render: Render, tmp_path: Path, resource: str, installed: str
) -> None:
    """With the component: one ClusterRole of get/list/watch on pods, bound to the exporter's
    ServiceAccount; the exporter's pod gets the switch and its token; every other object
    (the device plugin's included) is as without it."""
    before, after = render(installed), with_component(tmp_path, resource)
    role = find(after, "ClusterRole", NAME)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    binding = find(after, "ClusterRoleBinding", NAME)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": NAME,
    }
    namespace = find(after, "DaemonSet", EXPORTER)["metadata"]["namespace"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": EXPORTER, "namespace": namespace}
    ]
    assert [key(d) for d in after if d["kind"] in RBAC_KINDS] == [
        ("ClusterRole", NAME),
        ("ClusterRoleBinding", NAME),
    ]
    # The exporter's DaemonSet: exactly the two changes of the patch.
    expected = copy.deepcopy(find(before, "DaemonSet", EXPORTER))
    pod_spec(expected)["automountServiceAccountToken"] = True
    pod_spec(expected)["containers"][0]["args"].append("--pod-identity.apiserver")
    assert find(after, "DaemonSet", EXPORTER) == expected
    others = sorted((d for d in after if d["kind"] not in RBAC_KINDS and key(d) != (
        "DaemonSet", EXPORTER)), key=key)  # fmt: skip
    unchanged = sorted((d for d in before if key(d) != ("DaemonSet", EXPORTER)), key=key)
    assert others == unchanged
    # The ServiceAccount itself still mounts nothing by default: only this pod asks.
    assert find(after, "ServiceAccount", EXPORTER)["automountServiceAccountToken"] is False
    for doc in after:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
