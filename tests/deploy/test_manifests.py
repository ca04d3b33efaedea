"""The rendered manifests: valid against the Kubernetes 1.28 API and the Prometheus Operator's
CRDs, and hardened as docs/deploy.md says, so that none of it can regress unnoticed."""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from podres_exporter.deviceplugin.config import DiscoverKind, load_config
from tests.deploy.conftest import SYNTHETIC, WITH_PLUGIN

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CRDS = Path(__file__).resolve().parent / "crds"

KUBERNETES_VERSION = "1.28"
MONITORING_GROUP = "monitoring.coreos.com"

IMAGE = "ghcr.io/podres-exporter/podres-exporter"
# The end-to-end tier's installs run the image built from the checkout.
E2E = frozenset({"e2e", "e2e-plugin", "e2e-gpu", "e2e-gpu-plugin"})
E2E_IMAGE = "localhost/podres-exporter:e2e"
NAMESPACE = "podres-system"
APP_NAME = "podres-exporter"
PART_OF = {"app.kubernetes.io/part-of": "podres-exporter"}
COMMON_LABELS = {**PART_OF, "app.kubernetes.io/managed-by": "kustomize"}

Doc = dict[str, Any]
Render = Callable[[str], list[Doc]]


@dataclass(frozen=True)
class Agent:
    """What one DaemonSet must be."""

    name: str
    component: str
    container: str
    args: tuple[str, ...]
    port: int
    # (host path, mount path, read-only): every hostPath volume but the kubelet's, and nothing
    # else.
    host_mounts: frozenset[tuple[str, str, bool]]
    # The kubelet's directory it mounts (read-write or not), under the kubelet's root on the
    # host and under /var/lib/kubelet in the container.
    kubelet_dir: str
    kubelet_dir_writable: bool
    # (ConfigMap name prefix, mount path): the only other volumes.
    config_mounts: frozenset[tuple[str, str]]

    def mounts(self, kubelet_root: str) -> frozenset[tuple[str, str, bool]]:
        """Every hostPath mount, with the kubelet's root directory at ``kubelet_root``."""
        kubelet = (
            f"{kubelet_root}/{self.kubelet_dir}",
            f"/var/lib/kubelet/{self.kubelet_dir}",
            not self.kubelet_dir_writable,
        )
        return self.host_mounts | {kubelet}

    @property
    def selector(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": self.name, "app.kubernetes.io/component": self.component}


EXPORTER = Agent(
    name="podres-exporter",
    component="exporter",
    container="exporter",
    args=("export", "--path.sysfs=/host/sys", "--path.procfs=/host/proc", "--log-format=json"),
    port=9842,
    host_mounts=frozenset(
        {
            ("/sys", "/host/sys", True),
            ("/proc", "/host/proc", True),
            ("/var/log/pods", "/var/log/pods", True),
            ("/var/log/containers", "/var/log/containers", True),
        }
    ),
    kubelet_dir="pod-resources",
    kubelet_dir_writable=False,
    config_mounts=frozenset(),
)
PLUGIN = Agent(
    name="podres-device-plugin",
    component="device-plugin",
    container="plugin",
    args=(
        "plugin",
        "--resources=/etc/podres/plugin.toml",
        "--path.sysfs=/host/sys",
        "--path.dev=/host/dev",
        "--log-format=json",
        "--listen-address=:9843",
    ),
    port=9843,
    host_mounts=frozenset(
        {
            ("/sys", "/host/sys", True),
            ("/dev", "/host/dev", True),
        }
    ),
    kubelet_dir="device-plugins",
    kubelet_dir_writable=True,
    config_mounts=frozenset({("podres-device-plugin", "/etc/podres")}),
)
# The exporter first: conftest.py gives a test taking `rendering` and `agent` the exporter in
# every rendering, the plugin only in those of WITH_PLUGIN.
AGENTS = (EXPORTER, PLUGIN)

# The renderings with the network-policy component (the agents on the pod network), with the
# web-config component (a Secret with --web.config.file, HTTPS probes), and with a kubelet
# root other than /var/lib/kubelet.
POD_NETWORK = frozenset({"base+network-policy", "device-plugin+network-policy"})
WEB_CONFIG = frozenset({"base+web-config", "device-plugin+web-config"})
KUBELET_ROOTS = {
    "base+kubelet-root-microk8s": "/var/snap/microk8s/common/var/lib/kubelet",
    "device-plugin+kubelet-root-k0s": "/var/lib/k0s/kubelet",
}
DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"

# The opt-in kubelet mounts: component -> the paths under the kubelet's root it adds to the
# exporter, each read-only at the same path under /var/lib/kubelet in the container, with
# the hostPath type that keeps the node as it is (never ...OrCreate, never unset).
KUBELET_OPT_IN = {"pods-api": ("pods-api",), "kubelet-files": ("config.yaml", "device-plugins")}
HOST_PATH_TYPES = {"config.yaml": "File"}  # every other host path is a Directory
KUBELET_ROOTS.update(
    {
        "device-plugin+kubelet-files+pods-api+kubelet-root-k0s": "/var/lib/k0s/kubelet",
        "base+kubelet-root-microk8s+kubelet-files+pods-api": (
            "/var/snap/microk8s/common/var/lib/kubelet"
        ),
    }
)


def kubelet_opt_in(rendering: str) -> tuple[str, ...]:
    """The paths under the kubelet's root that the opt-in components of ``rendering`` mount
    in the exporter."""
    components = SYNTHETIC[rendering][1] if rendering in SYNTHETIC else ()
    return tuple(path for c in components for path in KUBELET_OPT_IN.get(c, ()))


def opt_in_mounts(rendering: str, agent: Agent) -> frozenset[tuple[str, str, bool]]:
    """The exporter's opt-in kubelet mounts in ``rendering`` (host, container, read-only)."""
    if agent is not EXPORTER:
        return frozenset()
    root = KUBELET_ROOTS.get(rendering, DEFAULT_KUBELET_ROOT)
    paths = kubelet_opt_in(rendering)
    return frozenset((f"{root}/{p}", f"{DEFAULT_KUBELET_ROOT}/{p}", True) for p in paths)


WEB_CONFIG_DIR = "/etc/podres-web"
WEB_CONFIG_ARG = f"--web.config.file={WEB_CONFIG_DIR}/web-config.yml"
WEB_CONFIG_NAME = "podres-web-config"  # the Secret's name

# Every checkov check skipped, per object, as reviewed: a new skip must be added here on purpose.
# On the pod network (the network-policy component) the host network's two are gone.
CHECKOV_SKIPS_BOTH = {
    ("DaemonSet", agent.name): {
        "CKV_K8S_15",  # imagePullPolicy IfNotPresent
        "CKV_K8S_19",  # host network
        "CKV_K8S_23",  # root (uid 0)
        "CKV_K8S_40",  # root (uid 0)
        "CKV_K8S_43",  # image by tag, not digest
        "CKV2_K8S_6",  # no NetworkPolicy: none applies to host-network pods
    }
    for agent in AGENTS
}
CHECKOV_SKIPS_BOTH_POD_NETWORK = {
    key: checks - {"CKV_K8S_19", "CKV2_K8S_6"} for key, checks in CHECKOV_SKIPS_BOTH.items()
}


def checkov_skips(rendering: str) -> dict[tuple[str, str], set[str]]:
    """The reviewed skips of ``rendering``: those of the agents it holds."""
    table = CHECKOV_SKIPS_BOTH_POD_NETWORK if rendering in POD_NETWORK else CHECKOV_SKIPS_BOTH
    names = {a.name for a in agents_of(rendering)}
    return {key: checks for key, checks in table.items() if key[1] in names}


def agents_of(rendering: str) -> tuple[Agent, ...]:
    """The agents ``rendering`` holds: the exporter, and the plugin where it was chosen."""
    return AGENTS if rendering in WITH_PLUGIN else (EXPORTER,)


# ---------------------------------------------------------------------------------- helpers


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    """The one object of ``kind`` named ``name``."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def generated(docs: list[Doc], kind: str, prefix: str) -> Doc:
    """The one generated object (``prefix-<hash>``) of ``kind``."""
    pattern = re.compile(rf"^{re.escape(prefix)}-[a-z0-9]{{10}}$")
    found = [d for d in docs if d["kind"] == kind and pattern.match(d["metadata"]["name"])]
    assert len(found) == 1, f"expected one generated {kind}/{prefix}-<hash>, found {len(found)}"
    return found[0]


def pod_spec(daemonset: Doc) -> Doc:
    spec: Doc = daemonset["spec"]["template"]["spec"]
    return spec


def the_container(daemonset: Doc, agent: Agent) -> Doc:
    containers = pod_spec(daemonset)["containers"]
    assert [c["name"] for c in containers] == [agent.container]
    assert "initContainers" not in pod_spec(daemonset)
    container: Doc = containers[0]
    return container


def quantity(value: str) -> float:
    """A Kubernetes quantity (``20m``, ``64Mi``, ``1``) as a number."""
    units = {"m": 1e-3, "": 1.0, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|)", str(value))
    assert match, f"unexpected quantity {value!r}"
    return float(match.group(1)) * units[match.group(2)]


def package_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as f:
        version: str = tomllib.load(f)["project"]["version"]
    return version


def crd_schema(group: str, kind: str, version: str) -> Doc:
    """The openAPIV3Schema of ``kind`` in the shipped CRDs."""
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        if spec["group"] == group and spec["names"]["kind"] == kind:
            for v in spec["versions"]:
                if v["name"] == version and v["served"]:
                    schema: Doc = v["schema"]["openAPIV3Schema"]
                    return schema
    raise AssertionError(f"no CRD for {group}/{version} {kind} in {CRDS}")


def no_unknown_fields(schema: Doc) -> Doc:
    """``schema`` rejecting fields it does not declare, as the API server's strict field
    validation does (it would otherwise prune them silently: a misspelt key would vanish)."""
    out = dict(schema)
    if "properties" in schema:
        out["properties"] = {k: no_unknown_fields(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = no_unknown_fields(schema["additionalProperties"])
    if "items" in schema:
        out["items"] = no_unknown_fields(schema["items"])
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in schema:
            out[combinator] = [no_unknown_fields(s) for s in schema[combinator]]
    return out


def python_patterns(node: Any) -> Any:
    """``node`` (a schema) with each ``pattern`` as Python's ``re`` reads it. The API server
    uses Go's RE2, which takes inline flags anywhere: ``^(?i)(abort|warn)?$`` in the
    PrometheusRule CRD. Python only takes them at the start, so they move there (same
    meaning: the flag applies to the whole pattern either way)."""
    if isinstance(node, dict):
        return {
            key: re.sub(r"^\^\(\?([a-z]+)\)", r"(?\1)^", value)
            if key == "pattern" and isinstance(value, str)
            else python_patterns(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [python_patterns(value) for value in node]
    return node


def validate_custom(doc: Doc) -> None:
    group, _, version = doc["apiVersion"].partition("/")
    schema = no_unknown_fields(python_patterns(crd_schema(group, doc["kind"], version)))
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(doc)


# -------------------------------------------------------------------------------- validity


def test_every_object_is_valid(render: Render, rendering: str) -> None:
    """Every rendered object validates: core kinds against the Kubernetes 1.28 API (strict),
    Prometheus Operator kinds against the shipped CRDs."""
    docs = render(rendering)
    assert docs
    problems = []
    for doc in docs:
        where = f"{rendering}: {doc['kind']}/{doc['metadata']['name']}"
        if doc["apiVersion"].startswith(MONITORING_GROUP + "/"):
            try:
                validate_custom(doc)
            except jsonschema.ValidationError as err:
                problems.append(f"{where}: {err.message} at {list(err.absolute_path)}")
        else:
            try:
                used = kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as err:
                problems.append(f"{where}: {err.message} at {list(err.absolute_path)}")
            else:
                assert used == KUBERNETES_VERSION
    assert not problems, "\n".join(problems)


MONITORING = ["ServiceMonitor", "PrometheusRule", "PrometheusRule"]  # alerts, recording rules


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("base", []),
        ("prometheus-operator", MONITORING),
        ("gpu", MONITORING),
        ("device-plugin", []),
        ("gpu-with-podres-plugin", MONITORING),
        ("e2e", MONITORING),
        ("e2e-plugin", MONITORING),
        ("e2e-gpu", MONITORING),
        ("e2e-gpu-plugin", MONITORING),
        ("base+pod-monitor", ["PodMonitor"]),
        ("base+network-policy", ["NetworkPolicy"]),
        ("base+web-config", []),
        ("base+kubelet-root-microk8s", []),
        ("device-plugin+network-policy", ["NetworkPolicy"]),
        ("device-plugin+web-config", []),
        ("device-plugin+kubelet-root-k0s", []),
        ("prometheus-operator+kube-prometheus-stack", MONITORING),
        (
            "device-plugin+pod-monitor+prometheus-rules+kube-prometheus-stack",
            ["PodMonitor", "PrometheusRule", "PrometheusRule"],
        ),
    ],
)
def test_what_each_kustomization_holds(render: Render, name: str, kinds: list[str]) -> None:
    """Each kustomization renders the exporter's objects, the device plugin's where it was
    chosen, plus exactly its monitoring objects."""
    expected = ["Namespace", "DaemonSet", "Service", "ServiceAccount"]
    if name in WITH_PLUGIN:
        expected += ["DaemonSet", "Service", "ServiceAccount", "ConfigMap"]
    assert sorted(d["kind"] for d in render(name)) == sorted(expected + kinds)


def test_crd_validation_rejects_a_misspelt_field(render: Render) -> None:
    """The CRD check is not vacuous: an unknown or mistyped field in a ServiceMonitor fails."""
    monitor = find(render("prometheus-operator"), "ServiceMonitor", "podres-exporter")
    validate_custom(monitor)
    typo = copy.deepcopy(monitor)
    typo["spec"]["endpoints"][0]["honourLabels"] = True
    with pytest.raises(jsonschema.ValidationError, match="honourLabels"):
        validate_custom(typo)
    wrong_type = copy.deepcopy(monitor)
    wrong_type["spec"]["endpoints"][0]["honorLabels"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(wrong_type)


def test_crd_validation_rejects_a_misspelt_rule_field(render: Render) -> None:
    """The PrometheusRule CRD check rejects an unknown field, a bad `for` and a nameless group."""
    rule = find(render("prometheus-operator"), "PrometheusRule", "podres-exporter")
    validate_custom(rule)
    typo = copy.deepcopy(rule)
    typo["spec"]["groups"][0]["rules"][0]["annotation"] = {"summary": "x"}
    with pytest.raises(jsonschema.ValidationError, match="annotation"):
        validate_custom(typo)
    bad_for = copy.deepcopy(rule)
    bad_for["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    with pytest.raises(jsonschema.ValidationError, match="5 minutes"):
        validate_custom(bad_for)
    nameless = copy.deepcopy(rule)
    del nameless["spec"]["groups"][0]["name"]
    with pytest.raises(jsonschema.ValidationError, match="name"):
        validate_custom(nameless)


def test_shipped_crds_are_one_release() -> None:
    """The three CRDs come from one Prometheus Operator release, the one crds/README.md names."""
    files = sorted(p.name for p in CRDS.glob("*.yaml"))
    assert files == [
        "monitoring.coreos.com_podmonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml",
        "monitoring.coreos.com_servicemonitors.yaml",
    ]
    versions = {
        yaml.safe_load((CRDS / f).read_text())["metadata"]["annotations"][
            "operator.prometheus.io/version"
        ]
        for f in files
    }
    assert len(versions) == 1
    (version,) = versions
    assert f"`v{version}`" in (CRDS / "README.md").read_text()


# ------------------------------------------------------------------------ image and version


def test_base_image_tag_is_the_package_version() -> None:
    """The base's kustomize image tag is pyproject.toml's project.version, not a second copy."""
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    images = {i["name"]: i for i in kustomization["images"]}
    assert set(images) == {IMAGE}
    assert images[IMAGE].get("newTag") == package_version()
    assert "newName" not in images[IMAGE]


def test_image_and_arguments(render: Render, rendering: str, agent: Agent) -> None:
    """Each agent runs the released image at the package's version (the end-to-end installs:
    the image built from the checkout, as their `images:` say) with its subcommand first."""
    container = the_container(find(render(rendering), "DaemonSet", agent.name), agent)
    expected = E2E_IMAGE if rendering in E2E else f"{IMAGE}:{package_version()}"
    assert container["image"] == expected
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in container  # the image's entrypoint is `podres`
    extra = (WEB_CONFIG_ARG,) if rendering in WEB_CONFIG else ()
    assert tuple(container["args"]) == agent.args + extra


# -------------------------------------------------------------------------------- hardening


def test_host_mounts_are_exactly_the_documented_ones(
    render: Render, rendering: str, agent: Agent
) -> None:
    """Every hostPath is one of the documented mounts with its read-only flag, mounted once,
    as a directory (the kubelet's config file with kubelet-files: a file), never created on
    the node; the only other volumes are the plugin's ConfigMap and the web-config
    Secret (with that component), read-only, whole directories."""
    spec = pod_spec(find(render(rendering), "DaemonSet", agent.name))
    container = the_container(find(render(rendering), "DaemonSet", agent.name), agent)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = container["volumeMounts"]
    assert len({m["name"] for m in mounts}) == len(mounts) == len(volumes)
    host, config, secrets = set(), set(), set()
    for mount in mounts:
        assert "subPath" not in mount
        assert "subPathExpr" not in mount
        volume = volumes[mount["name"]]
        kinds = set(volume) - {"name"}
        if kinds == {"hostPath"}:
            name = mount["mountPath"].rsplit("/", 1)[-1]
            assert volume["hostPath"]["type"] == HOST_PATH_TYPES.get(name, "Directory")
            read_only = mount.get("readOnly", False)
            host.add((volume["hostPath"]["path"], mount["mountPath"], read_only))
            # No host path propagates mounts in either direction.
            assert mount.get("mountPropagation", "None") == "None"
        elif kinds == {"configMap"}:
            assert mount.get("readOnly") is True
            prefix = volume["configMap"]["name"].rsplit("-", 1)[0]
            config.add((prefix, mount["mountPath"]))
        elif kinds == {"secret"}:
            assert mount.get("readOnly") is True
            assert volume["secret"]["defaultMode"] == 0o400
            secrets.add((volume["secret"]["secretName"], mount["mountPath"]))
        else:
            pytest.fail(f"volume {mount['name']} is {kinds}: not an expected kind")
    root = KUBELET_ROOTS.get(rendering, DEFAULT_KUBELET_ROOT)
    assert host == agent.mounts(root) | opt_in_mounts(rendering, agent)
    assert config == agent.config_mounts
    web_config = {(WEB_CONFIG_NAME, WEB_CONFIG_DIR)} if rendering in WEB_CONFIG else set()
    assert secrets == web_config


def test_pod_is_hardened(render: Render, rendering: str, agent: Agent) -> None:
    """Root only by uid: no capabilities, no privilege, no escalation, read-only root, the
    runtime's seccomp profile, no API token, and none of the host namespaces but the network
    (not even that with the network-policy component)."""
    docs = render(rendering)
    daemonset = find(docs, "DaemonSet", agent.name)
    spec = pod_spec(daemonset)
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == agent.name
    assert find(docs, "ServiceAccount", agent.name)["automountServiceAccountToken"] is False
    if rendering in POD_NETWORK:
        assert spec["hostNetwork"] is False
        assert spec["dnsPolicy"] == "ClusterFirst"
    else:
        assert spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    for namespace in ("hostPID", "hostIPC", "hostUsers", "shareProcessNamespace"):
        assert namespace not in spec
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["runAsUser"] == 0

    container = the_container(daemonset, agent)
    context = container["securityContext"]
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["runAsUser"] == 0
    assert "procMount" not in context
    for port in container["ports"]:
        assert "hostPort" not in port


def test_pod_lifecycle(render: Render, rendering: str, agent: Agent) -> None:
    """Probes on the metrics port (HTTPS with the web-config component), a grace period the
    agent stops within, node-critical priority, bounded resources, every Linux node, one node
    at a time on update."""
    daemonset = find(render(rendering), "DaemonSet", agent.name)
    spec = pod_spec(daemonset)
    container = the_container(daemonset, agent)

    assert container["ports"] == [
        {"name": "metrics", "containerPort": agent.port, "protocol": "TCP"}
    ]
    scheme = {"scheme": "HTTPS"} if rendering in WEB_CONFIG else {}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics", **scheme}

    assert spec["terminationGracePeriodSeconds"] >= 30
    assert spec["priorityClassName"] == "system-node-critical"

    resources = container["resources"]
    for resource in ("cpu", "memory"):
        request = quantity(resources["requests"][resource])
        limit = quantity(resources["limits"][resource])
        assert 0 < request <= limit

    assert spec["nodeSelector"]["kubernetes.io/os"] == "linux"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }


# ------------------------------------------------------------------- labels and selectors


def test_selectors_are_stable(render: Render, rendering: str, agent: Agent) -> None:
    """DaemonSet and Service select on name and component only (immutable across upgrades),
    and the pods carry those labels."""
    docs = render(rendering)
    daemonset = find(docs, "DaemonSet", agent.name)
    assert daemonset["spec"]["selector"] == {"matchLabels": agent.selector}
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert pod_labels.items() >= agent.selector.items()

    service = find(docs, "Service", agent.name)
    assert service["spec"]["selector"] == agent.selector
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": agent.port, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_labels_and_namespace(render: Render, rendering: str) -> None:
    """Every object and pod template carries the common labels; every namespaced object is in
    podres-system."""
    for doc in render(rendering):
        labels = doc["metadata"].get("labels", {})
        assert labels.items() >= COMMON_LABELS.items(), doc["metadata"]["name"]
        if doc["kind"] == "Namespace":
            assert doc["metadata"]["name"] == NAMESPACE
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]
        if doc["kind"] == "DaemonSet":
            template = doc["spec"]["template"]["metadata"]["labels"]
            assert template.items() >= COMMON_LABELS.items()


def test_namespace_admits_the_agents_and_no_more_silently(render: Render) -> None:
    """Pod Security enforces privileged (hostPath and host network need it) and warns and
    audits at baseline."""
    labels = find(render("base"), "Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"


# --------------------------------------------------------------------------- plugin config


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpu-with-podres-plugin", {"nvidia.com/gpu": ("nvml", 1)}),
        ("e2e-plugin", {"podres.io/fuse": ("dev", 32)}),
    ],
)
def test_plugin_config_loads(
    render: Render, tmp_path: Path, name: str, expected: dict[str, tuple[str, int]]
) -> None:
    """The generated ConfigMap's resource file is accepted by the plugin's own loader and
    declares the documented resources; the DaemonSet mounts that ConfigMap where --resources
    points."""
    docs = render(name)
    config_map = generated(docs, "ConfigMap", PLUGIN.name)
    assert set(config_map["data"]) == {"plugin.toml"}
    path = tmp_path / "plugin.toml"
    path.write_text(config_map["data"]["plugin.toml"])
    config = load_config(str(path))
    got = {r.name: (r.discover.kind.value, r.replicas) for r in config.resources}
    assert got == expected
    assert config.uses_nvml == (DiscoverKind.NVML.value in {k for k, _ in expected.values()})
    plugin_mounts_its_config_map(docs, config_map)


def plugin_mounts_its_config_map(docs: list[Doc], config_map: Doc) -> None:
    """The plugin's DaemonSet mounts ``config_map`` where its --resources points."""
    spec = pod_spec(find(docs, "DaemonSet", PLUGIN.name))
    volume = next(v for v in spec["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    assert f"--resources={mount['mountPath']}/plugin.toml" in spec["containers"][0]["args"]


@pytest.mark.parametrize(
    "path",
    ["deploy/overlays/gpu-with-podres-plugin/plugin.toml", "tests/e2e/overlay-plugin/plugin.toml"],
    ids=str,
)
def test_plugin_config_files_load(path: str) -> None:
    """Each resource file that names resources is valid as it stands in the tree."""
    assert load_config(str(REPO / path)).resources


def test_shipped_example_resource_file_names_nothing(render: Render) -> None:
    """The device-plugin overlay ships a resource file that names no resource (only
    comments): the plugin advertises nothing until the user names devices."""
    docs = render("device-plugin")
    config_map = generated(docs, "ConfigMap", PLUGIN.name)
    text = config_map["data"]["plugin.toml"]
    assert tomllib.loads(text) == {}
    assert "[[resource]]" in text  # the commented examples are there to copy
    plugin_mounts_its_config_map(docs, config_map)


def test_plugin_config_change_rolls_the_pods(render: Render) -> None:
    """A different resource file gives the ConfigMap a different name, so the pods roll."""
    names = {
        generated(render(name), "ConfigMap", PLUGIN.name)["metadata"]["name"]
        for name in ("device-plugin", "gpu-with-podres-plugin", "e2e-plugin")
    }
    assert len(names) == 3


# --------------------------------------------------------------------------------- overlays


def _without(docs: list[Doc], kinds: set[str]) -> list[Doc]:
    return sorted(
        (d for d in docs if d["kind"] not in kinds),
        key=lambda d: (d["kind"], d["metadata"]["name"]),
    )


def test_prometheus_operator_overlay_only_adds_monitoring(render: Render) -> None:
    """The prometheus-operator overlay is the base plus its ServiceMonitor and PrometheusRule."""
    overlay = _without(render("prometheus-operator"), {"ServiceMonitor", "PrometheusRule"})
    assert overlay == _without(render("base"), set())


@pytest.mark.parametrize("name", ["prometheus-operator", "gpu", "gpu-with-podres-plugin"])
def test_prometheus_rule_is_the_plain_rule_file(render: Render, name: str) -> None:
    """The overlays' PrometheusRule is the plain rule file's groups, labelled as the rest."""
    rule = find(render(name), "PrometheusRule", "podres-exporter")
    source = yaml.safe_load((DEPLOY / "prometheus" / "podres-alerts.yaml").read_text())
    assert rule["spec"] == source
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"] == {**COMMON_LABELS, "app.kubernetes.io/name": APP_NAME}
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) >= 15


@pytest.mark.parametrize(
    "name",
    [
        "prometheus-operator",
        "gpu",
        "gpu-with-podres-plugin",
        "e2e-plugin",
        "base+pod-monitor",
        "device-plugin+pod-monitor+prometheus-rules+kube-prometheus-stack",
    ],
)
def test_monitor_scrapes_both_agents_with_their_own_labels(render: Render, name: str) -> None:
    """The ServiceMonitor (or PodMonitor) selects the agents' Services (or pods) on the
    `metrics` port, keeps the exporter's labels, adds `node` and drops the agent's own
    namespace, pod and container."""
    docs = render(name)
    monitors = [d for d in docs if d["kind"] in {"ServiceMonitor", "PodMonitor"}]
    assert len(monitors) == 1
    monitor = monitors[0]
    selector = monitor["spec"]["selector"]
    assert set(selector) == {"matchLabels"}
    if monitor["kind"] == "ServiceMonitor":
        endpoints = monitor["spec"]["endpoints"]
        targets = [find(docs, "Service", a.name)["metadata"]["labels"] for a in agents_of(name)]
    else:
        assert monitor["kind"] == "PodMonitor"
        endpoints = monitor["spec"]["podMetricsEndpoints"]
        targets = [
            find(docs, "DaemonSet", a.name)["spec"]["template"]["metadata"]["labels"]
            for a in agents_of(name)
        ]
    assert "namespaceSelector" not in monitor["spec"]  # its own namespace: podres-system
    for labels in targets:
        assert labels.items() >= selector["matchLabels"].items()
    others = [d for d in docs if d["kind"] in {"Service", "DaemonSet"}]
    selected = [
        d for d in others if d["metadata"]["labels"].items() >= selector["matchLabels"].items()
    ]
    assert len(selected) == len(others)  # nothing else in the namespace to pick up by mistake

    assert len(endpoints) == 1
    endpoint = endpoints[0]
    assert endpoint["port"] == "metrics"
    assert endpoint["honorLabels"] is True
    assert {
        "action": "replace",
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "node",
    } in endpoint["relabelings"]
    drops = [r for r in endpoint["relabelings"] if r["action"] == "labeldrop"]
    assert len(drops) == 1
    dropped = re.compile(f"^(?:{drops[0]['regex']})$")
    for label in ("namespace", "pod", "container"):
        assert dropped.match(label)
    for label in ("node", "job", "instance", "service", "endpoint"):
        assert not dropped.match(label)


NVML_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}


def env_values(container: Doc) -> dict[str, str]:
    """The container's plain (not downward-API) environment variables."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@pytest.mark.parametrize("name", ["gpu", "gpu-with-podres-plugin"])
def test_gpu_overlays_run_their_agents_with_nvml(render: Render, name: str) -> None:
    """On the GPU overlays each agent runs on GPU nodes through the NVIDIA runtime, seeing
    every GPU for NVML only; the base has none of it."""
    for agent in agents_of(name):
        daemonset = find(render(name), "DaemonSet", agent.name)
        spec = pod_spec(daemonset)
        assert spec["nodeSelector"] == {
            "kubernetes.io/os": "linux",
            "nvidia.com/gpu.present": "true",
        }
        assert spec["runtimeClassName"] == "nvidia"
        assert env_values(the_container(daemonset, agent)) == NVML_ENV
    base = find(render("base"), "DaemonSet", EXPORTER.name)
    assert "runtimeClassName" not in pod_spec(base)
    assert env_values(the_container(base, EXPORTER)) == {}
    assert pod_spec(base)["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_gpu_overlay_adds_no_device_plugin(render: Render) -> None:
    """The overlay for clusters with NVIDIA's GPU Operator is the prometheus-operator overlay
    with only the exporter's DaemonSet changed: no second nvidia.com/gpu plugin."""
    gpu = render("gpu")
    assert [d["metadata"]["name"] for d in gpu if d["kind"] == "DaemonSet"] == [EXPORTER.name]
    # The rules name nvidia.com/gpu as a resource they watch (the fit shapes); nothing else may.
    installed = [d for d in gpu if d["kind"] != "PrometheusRule"]
    assert "nvidia.com/gpu" not in yaml.safe_dump_all(installed).replace(
        "nvidia.com/gpu.present", ""
    )
    assert _without(gpu, {"DaemonSet"}) == _without(render("prometheus-operator"), {"DaemonSet"})


def test_gpu_with_podres_plugin_overlay_says_not_to_combine_it() -> None:
    """The overlay that advertises nvidia.com/gpu warns, where it is applied, against the
    GPU Operator's or NVIDIA's own device plugin on the same nodes."""
    text = (DEPLOY / "overlays" / "gpu-with-podres-plugin" / "kustomization.yaml").read_text()
    assert "DO NOT combine it with the NVIDIA GPU Operator's device plugin" in text


@pytest.mark.parametrize("agent", AGENTS, ids=lambda a: a.component)
def test_both_agents_know_their_node(render: Render, agent: Agent) -> None:
    """Each agent's container gets NODE_NAME from the downward API (spec.nodeName)."""
    container = the_container(
        find(render("gpu-with-podres-plugin"), "DaemonSet", agent.name), agent
    )
    assert {
        "name": "NODE_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
    } in container["env"]


# ----------------------------------------------------------------- locking the endpoints


@pytest.mark.parametrize("name", sorted(WITH_PLUGIN))
def test_plugin_metrics_listen_on_every_interface(render: Render, name: str) -> None:
    """The plugin's --listen-address is explicit (its default is the loopback) and on the
    port its container names `metrics`, so Prometheus can scrape it."""
    container = the_container(find(render(name), "DaemonSet", PLUGIN.name), PLUGIN)
    listen = [a for a in container["args"] if a.startswith("--listen-address=")]
    assert listen == [f"--listen-address=:{PLUGIN.port}"]
    assert container["ports"][0]["containerPort"] == PLUGIN.port


@pytest.mark.parametrize(
    ("name", "without"),
    [("base+network-policy", "base"), ("device-plugin+network-policy", "device-plugin")],
)
def test_network_policy_admits_only_prometheus_to_the_metrics_port(
    render: Render, name: str, without: str
) -> None:
    """The network-policy component puts the agents on the pod network and admits pods
    labelled app.kubernetes.io/name=prometheus (any namespace) to the port both containers
    name `metrics`, nothing else in, nothing out; without it there is no NetworkPolicy."""
    docs = render(name)
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    spec = policy["spec"]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    assert spec["egress"] == []
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"] == [
        {
            "namespaceSelector": {},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    selector = spec["podSelector"]["matchLabels"]
    for agent in agents_of(name):
        daemonset = find(docs, "DaemonSet", agent.name)
        assert daemonset["spec"]["template"]["metadata"]["labels"].items() >= selector.items()
        assert pod_spec(daemonset)["hostNetwork"] is False
        assert [p["name"] for p in the_container(daemonset, agent)["ports"]] == ["metrics"]
    assert not [d for d in render(without) if d["kind"] == "NetworkPolicy"]
    # Only the network changed: the rest is as it was.
    for agent in agents_of(name):
        changed = copy.deepcopy(find(docs, "DaemonSet", agent.name))
        base = copy.deepcopy(find(render(without), "DaemonSet", agent.name))
        for daemonset in (changed, base):
            for key in ("hostNetwork", "dnsPolicy"):
                del daemonset["spec"]["template"]["spec"][key]
            for key in ("checkov.io/skip1", "checkov.io/skip6"):
                daemonset["metadata"]["annotations"].pop(key, None)
        assert changed == base


@pytest.mark.parametrize(
    ("name", "without"),
    [("base+web-config", "base"), ("device-plugin+web-config", "device-plugin")],
)
def test_web_config_component_mounts_the_secret_where_the_flag_points(
    render: Render, name: str, without: str
) -> None:
    """The web-config component gives each agent --web.config.file inside the Secret's
    mount (a directory, so that the kubelet's updates reach the file) and HTTPS probes;
    nothing else changes."""
    docs = render(name)
    for agent in agents_of(name):
        daemonset = find(docs, "DaemonSet", agent.name)
        container = the_container(daemonset, agent)
        assert container["args"][-1] == WEB_CONFIG_ARG
        flag_dir = WEB_CONFIG_ARG.partition("=")[2].rsplit("/", 1)[0]
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == flag_dir)
        volume = next(v for v in pod_spec(daemonset)["volumes"] if v["name"] == mount["name"])
        assert volume["secret"]["secretName"] == WEB_CONFIG_NAME
        assert "items" not in volume["secret"]
        assert "subPath" not in mount
        base = copy.deepcopy(find(render(without), "DaemonSet", agent.name))
        the_container(base, agent)["args"].append(WEB_CONFIG_ARG)
        the_container(base, agent)["volumeMounts"].append(mount)
        pod_spec(base)["volumes"].append(volume)
        for probe in ("livenessProbe", "readinessProbe"):
            the_container(base, agent)[probe]["httpGet"]["scheme"] = "HTTPS"
        assert daemonset == base


def _documented(kind: str) -> list[Doc]:
    """The YAML blocks of docs/security.md that hold a ``kind`` object."""
    text = (REPO / "docs" / "security.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
    found = []
    for block in blocks:
        for doc in yaml.safe_load_all(block):
            if isinstance(doc, dict) and doc.get("kind") == kind:
                found.append(doc)
    return found


def test_the_documented_secure_service_monitor_is_valid() -> None:
    """docs/security.md's ServiceMonitor (HTTPS, a CA, basic auth) validates against the
    shipped CRD, so that the worked example does not rot."""
    (monitor,) = _documented("ServiceMonitor")
    validate_custom(monitor)
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert set(endpoint["basicAuth"]) == {"username", "password"}
    assert "ca" in endpoint["tlsConfig"]


# --------------------------------------------------------------------------------- checkov


def test_checkov_skips_are_the_reviewed_ones(render: Render, rendering: str) -> None:
    """The only checkov checks skipped are the reviewed ones, each with a reason."""
    skips: dict[tuple[str, str], set[str]] = {}
    for doc in render(rendering):
        for key, value in doc["metadata"].get("annotations", {}).items():
            if key.startswith("checkov.io/skip"):
                check, _, reason = value.partition("=")
                assert re.fullmatch(r"CKV2?_K8S_\d+", check), value
                assert len(reason.strip()) > 10, f"{value}: give the reason"
                skips.setdefault((doc["kind"], doc["metadata"]["name"]), set()).add(check)
        template = doc.get("spec", {}).get("template", {}).get("metadata", {})
        assert not any(k.startswith("checkov.io/") for k in template.get("annotations", {}))
    assert skips == checkov_skips(rendering)
