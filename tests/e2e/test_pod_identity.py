"""Pod identity from the API server, on a real single-node cluster: the opt-in component.

The default install first: the exporter's ServiceAccount may do nothing with pods. Then the
same install with ``deploy/components/pod-identity-apiserver`` and ``--pod-labels``: the
ServiceAccount may get, list and watch pods and nothing more than before, and with a
Deployment, a Job and a bare pod running, ``podres_pod_info`` and ``podres_pod_labels_info``
say what ``kubectl get pods -o json`` says: each pod's UID, phase and QoS class, its owner
(the Deployment found through its ReplicaSet as the API server has it), and the allowed
labels alone. Everything is deleted afterwards.

The cluster's API server listens on the loopback only (its ``kubernetes`` Service has no
reachable address here), so the test's install points ``KUBERNETES_SERVICE_HOST`` and
``KUBERNETES_SERVICE_PORT`` at it; the exporter runs on the host network, where the
loopback is the node's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.core.podlabels import label_name
from tests.e2e.cluster import Cluster, wait_for
from tests.e2e.conftest import OVERLAY, REPO
from tests.e2e.images import PROJECT_IMAGE
from tests.e2e.test_install import (
    EXPORTER_URL,
    NAMESPACE,
    daemon_processes,
    metrics,
    pods_ready,
)
from tests.support import Samples, select

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

COMPONENT = REPO / "deploy" / "components" / "pod-identity-apiserver"
WORKLOADS = "e2e-identity"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:podres-exporter"
ALLOWED = "team,e2e.podres.io/*"
LABELS = {"team": "ml", "e2e.podres.io/tier": "gold", "not-allowed": "hidden"}
SHOWN = ("team", "e2e.podres.io/tier")


def kustomization(directory: Path, apiserver_port: int) -> str:
    """The e2e install with the component, the allowed labels, and the API server's
    loopback address (paths relative to ``directory``: the checkout may be anywhere)."""
    overlay = os.path.relpath(OVERLAY, directory)
    component = os.path.relpath(COMPONENT, directory)
    return f"""\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {overlay}
components:
  - {component}
patches:
  - target: {{kind: DaemonSet, name: podres-exporter}}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --pod-labels={ALLOWED}
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {{name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}}
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {{name: KUBERNETES_SERVICE_PORT, value: "{apiserver_port}"}}
"""


def _labels(indent: str) -> str:
    return "".join(f"\n{indent}{k}: {v}" for k, v in LABELS.items())


def _pod_spec(indent: str, restart: str, resources: str = "{}") -> str:
    """A pod spec that waits, on the host network (no CNI here)."""
    return f"""
{indent}hostNetwork: true
{indent}terminationGracePeriodSeconds: 1
{indent}restartPolicy: {restart}
{indent}containers:
{indent}  - name: main
{indent}    image: {PROJECT_IMAGE}
{indent}    imagePullPolicy: Never
{indent}    command: [sleep, infinity]
{indent}    resources: {resources}"""


WORKLOAD_OBJECTS = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {WORKLOADS}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: trainer, namespace: {WORKLOADS}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: trainer}}}}
  template:
    metadata:
      labels:
        app: trainer{_labels("        ")}
    spec:{_pod_spec("      ", "Always")}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: nightly, namespace: {WORKLOADS}}}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels:{_labels("        ")}
    spec:{_pod_spec("      ", "Never", "{requests: {memory: 16Mi}}")}
---
apiVersion: v1
kind: Pod
metadata:
  name: loner
  namespace: {WORKLOADS}
  labels:{_labels("    ")}
spec:{_pod_spec("  ", "Always")}
"""


def can_i(cluster: Cluster) -> set[tuple[str, ...]]:
    """What the exporter's ServiceAccount may do in the workloads' namespace, as rows of
    ``kubectl auth can-i --list`` (resources, non-resource URLs, names, verbs)."""
    out = cluster.kubectl(
        "auth", "can-i", "--list", f"--as={SERVICE_ACCOUNT}", "-n", WORKLOADS
    ).stdout
    rows = set()
    for line in out.splitlines()[1:]:
        resource, _, rest = line.strip().partition(" ")
        rows.add((resource, *rest.split()))
    return rows


def may(cluster: Cluster, verb: str, resource: str) -> bool:
    """``kubectl auth can-i VERB RESOURCE --all-namespaces`` as the exporter."""
    result = cluster.kubectl(
        "auth", "can-i", verb, resource, "--all-namespaces", f"--as={SERVICE_ACCOUNT}",
        check=False,
    )  # fmt: skip
    return result.stdout.strip() == "yes"


@pytest.fixture(scope="module")
def installs(cluster: Cluster, crds: None) -> Iterator[tuple[Cluster, dict[str, Any]]]:
    """The default install (its permissions recorded), then the install with the component
    and the workloads; all removed afterwards."""
    cluster.kubectl("apply", "-k", str(OVERLAY))
    default = {"rows": can_i(cluster), "pods": {v: may(cluster, v, "pods") for v in (
        "get", "list", "watch")}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="podres-e2e-identity-") as tmp:
        directory = Path(tmp)
        port = int(cluster.ports["apiserver"])
        (directory / "kustomization.yaml").write_text(kustomization(directory, port))
        cluster.kubectl("apply", "-k", str(directory))
        cluster.kubectl("apply", "-f", "-", input_text=WORKLOAD_OBJECTS)
        try:
            yield cluster, default
        finally:
            cluster.kubectl("delete", "namespace", WORKLOADS, "--wait=true", "--timeout=120s")
            cluster.kubectl("delete", "-k", str(directory), "--wait=true", "--timeout=120s")
            wait_for("the exporter's process to exit", lambda: not daemon_processes(), 60)


def test_the_default_install_may_read_no_pod(installs: tuple[Cluster, dict[str, Any]]) -> None:
    """Without the component the exporter's ServiceAccount may not get, list or watch pods
    anywhere, and no rule of its names pods."""
    _, default = installs
    assert default["pods"] == {"get": False, "list": False, "watch": False}
    assert not [row for row in default["rows"] if row[0].startswith("pods")]


def test_the_component_grants_exactly_get_list_watch_on_pods(
    installs: tuple[Cluster, dict[str, Any]],
) -> None:
    """With the component the ServiceAccount gains one rule: get, list and watch on pods
    (in every namespace), and nothing else: no write, no secrets."""
    cluster, default = installs
    gained = can_i(cluster) - default["rows"]
    assert gained == {("pods", "[]", "[]", "[get", "list", "watch]")}
    assert default["rows"] <= can_i(cluster)
    assert all(may(cluster, verb, "pods") for verb in ("get", "list", "watch"))
    for verb, resource in (("create", "pods"), ("delete", "pods"), ("get", "secrets"),
                           ("list", "configmaps"), ("get", "nodes")):  # fmt: skip
        assert not may(cluster, verb, resource), (verb, resource)


def expected_owner(cluster: Cluster, pod: dict[str, Any]) -> dict[str, str]:
    """The pod's controlling owner as the API server has it: a ReplicaSet followed to its
    own controller (the Deployment)."""
    refs = [r for r in pod["metadata"].get("ownerReferences", []) if r.get("controller")]
    if not refs:
        return {}
    kind, name = refs[0]["kind"], refs[0]["name"]
    out = {"controller_kind": kind, "controller_name": name, "owner_kind": kind,
           "owner_name": name}  # fmt: skip
    if kind == "ReplicaSet":
        rs = cluster.get_json("replicaset", "-n", pod["metadata"]["namespace"], name)
        (up,) = [r for r in rs["metadata"]["ownerReferences"] if r.get("controller")]
        out |= {"owner_kind": up["kind"], "owner_name": up["name"]}
    return out


def expected_info(cluster: Cluster, pod: dict[str, Any]) -> frozenset[tuple[str, str]]:
    meta, status = pod["metadata"], pod["status"]
    labels = {
        "namespace": meta["namespace"],
        "pod": meta["name"],
        "uid": meta["uid"],
        "phase": status["phase"],
        "qos_class": status["qosClass"],
        **expected_owner(cluster, pod),
    }
    return frozenset(labels.items())


def identity_served(cluster: Cluster) -> tuple[Samples, list[dict[str, Any]]] | None:
    """The exporter's samples once its API-server route is synced and every workload pod
    is Running and listed with its phase; with kubectl's pods of the workloads."""
    pods = pods_ready(cluster, WORKLOADS)
    if len(pods) != len(("trainer", "nightly", "loner")):
        return None
    samples = metrics(EXPORTER_URL)
    if not select(samples, "podres_pod_identity_source_synced", route="apiserver"):
        return None
    served = {dict(lbl).get("uid"): dict(lbl) for lbl in select(
        samples, "podres_pod_info", namespace=WORKLOADS)}  # fmt: skip
    if any(served.get(p["metadata"]["uid"], {}).get("phase") != "Running" for p in pods):
        return None
    return samples, pods


def test_info_series_equal_what_kubectl_says(installs: tuple[Cluster, dict[str, Any]]) -> None:
    """Each workload pod's podres_pod_info is what kubectl says: UID, phase, QoS class,
    and the owner (the Deployment through its ReplicaSet, the Job, none for a bare pod);
    podres_pod_labels_info carries the allowed labels and no other; the route is up,
    synced and fresh, and every pod of the node is listed under its UID."""
    cluster, _ = installs
    exporter = wait_for("the exporter to be Ready", partial(pods_ready, cluster, NAMESPACE), 120, 1)
    assert exporter
    samples, pods = wait_for(
        "the workloads' identity on /metrics", partial(identity_served, cluster), 120, 1
    )
    want = {expected_info(cluster, p) for p in pods}
    assert set(select(samples, "podres_pod_info", namespace=WORKLOADS)) == want
    owners = {p["metadata"]["name"].split("-")[0]: dict(expected_info(cluster, p)) for p in pods}
    assert owners["trainer"]["owner_kind"] == "Deployment"
    assert owners["nightly"]["owner_kind"] == "Job"
    assert "owner_kind" not in owners["loner"]

    shown = {label_name(k): LABELS[k] for k in SHOWN}

    def with_labels(pod: dict[str, Any]) -> frozenset[tuple[str, str]]:
        meta = pod["metadata"]
        return frozenset(
            {"namespace": WORKLOADS, "pod": meta["name"], "uid": meta["uid"], **shown}.items()
        )

    labelled = {with_labels(p) for p in pods}
    assert set(select(samples, "podres_pod_labels_info", namespace=WORKLOADS)) == labelled

    for family, value in (("up", 1), ("synced", 1), ("stale", 0)):
        assert select(samples, f"podres_pod_identity_source_{family}", route="apiserver") == {
            frozenset({("route", "apiserver")}): value
        }, family
    everything = cluster.get_json("pods", "--all-namespaces")["items"]
    listed = {(dict(lbl)["namespace"], dict(lbl)["pod"], dict(lbl)["uid"]) for lbl in select(
        samples, "podres_pod_info")}  # fmt: skip
    for pod in everything:
        meta = pod["metadata"]
        assert (meta["namespace"], meta["name"], meta["uid"]) in listed, meta["name"]
