"""podIdentity.apiserver.enabled: the chart's form of the pod-identity-apiserver component,
off by default (no RBAC, no token), and when on the same objects and changes as kustomize's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.test_manifests import KUBERNETES_VERSION, find, pod_spec
from tests.deploy.test_pod_identity_component import NAME, RBAC_KINDS, with_component
from tests.helm.conftest import NAMESPACE

pytestmark = pytest.mark.slow  # Helm and kubectl run as programs

Doc = dict[str, Any]
Template = Callable[[dict[str, Any]], list[Doc]]
ON = {"podIdentity": {"apiserver": {"enabled": True}}}
EXPORTER = "podres-exporter"


def test_off_by_default_no_rbac_and_no_token(template: Template) -> None:
    """By default the chart renders no RBAC object, and the exporter mounts no token and
    runs without --pod-identity.apiserver."""
    docs = template({})
    assert [d["kind"] for d in docs if d["kind"] in RBAC_KINDS] == []
    spec = pod_spec(find(docs, "DaemonSet", EXPORTER))
    assert spec["automountServiceAccountToken"] is False
    assert "--pod-identity.apiserver" not in spec["containers"][0]["args"]


def test_on_renders_what_the_kustomize_component_renders(
    template: Template, tmp_path: Path
) -> None:
    """On: the ClusterRole (get/list/watch on pods) and its binding to the exporter's
    ServiceAccount in the release's namespace, the switch and the token on the exporter's
    pod alone; the RBAC objects' rules and bindings equal the kustomize component's."""
    docs = template(ON)
    kustomized = with_component(tmp_path, "base")
    role, theirs = find(docs, "ClusterRole", NAME), find(kustomized, "ClusterRole", NAME)
    assert (
        role["rules"]
        == theirs["rules"]
        == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    )
    binding = find(docs, "ClusterRoleBinding", NAME)
    assert binding["roleRef"] == find(kustomized, "ClusterRoleBinding", NAME)["roleRef"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": EXPORTER, "namespace": NAMESPACE}
    ]
    assert sorted(d["kind"] for d in docs if d["kind"] in RBAC_KINDS) == [
        "ClusterRole",
        "ClusterRoleBinding",
    ]
    spec = pod_spec(find(docs, "DaemonSet", EXPORTER))
    assert spec["automountServiceAccountToken"] is True
    assert spec["containers"][0]["args"][-1] == "--pod-identity.apiserver"
    assert find(docs, "ServiceAccount", EXPORTER)["automountServiceAccountToken"] is False
    for doc in docs:
        if not doc["apiVersion"].startswith("monitoring.coreos.com/"):
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
