"""The Helm chart: exporter only by default, each value rendering what docs/helm.md promises,
every rendering valid against the Kubernetes 1.28 API and the Prometheus Operator's CRDs and
clean under checkov, and the exporter the same DaemonSet as the kustomize base's."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from podres_exporter.deviceplugin.config import DiscoverKind, load_config
from tests.deploy.conftest import _kubectl, _render, _synthetic
from tests.deploy.test_checkov import run_checkov
from tests.deploy.test_install_choices import OPT_IN_VOLUMES
from tests.deploy.test_manifests import (
    DEPLOY,
    EXPORTER,
    KUBERNETES_VERSION,
    MONITORING_GROUP,
    PLUGIN,
    find,
    package_version,
    pod_spec,
    the_container,
    validate_custom,
)
from tests.helm.conftest import CHART, NAMESPACE, RELEASE, REPO, RenderError, run_helm

pytestmark = pytest.mark.slow  # Helm, kubectl and checkov run as programs

Doc = dict[str, Any]
Template = Callable[[dict[str, Any]], list[Doc]]

PART_OF = {"app.kubernetes.io/part-of": "podres-exporter"}
HELM_LABELS = {**PART_OF, "app.kubernetes.io/managed-by": "Helm"}
WEB_CONFIG_ARG = "--web.config.file=/etc/podres-web/web-config.yml"
FUSE = {"name": "podres.io/fuse", "replicas": 32, "discover": {"kind": "dev", "glob": "fuse"}}
PLUGIN_ON = {"enabled": True, "resources": [FUSE]}
RELEASE_LABEL = {"release": "kube-prometheus-stack"}

# name -> values: every rendering the validity and checkov tests check.
RENDERINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "device-plugin": {"devicePlugin": PLUGIN_ON},
    "gpu": {"gpu": {"enabled": True}},
    "plugin-gpu": {
        "devicePlugin": {
            "enabled": True,
            "gpu": True,
            "resources": [{"name": "nvidia.com/gpu", "discover": {"kind": "nvml"}}],
        }
    },
    "k0s": {"kubeletRootDir": "/var/lib/k0s/kubelet", "devicePlugin": PLUGIN_ON},
    "monitoring": {
        "serviceMonitor": {"enabled": True, "additionalLabels": RELEASE_LABEL},
        "prometheusRule": {"enabled": True, "additionalLabels": RELEASE_LABEL},
        "devicePlugin": PLUGIN_ON,
    },
    "pod-monitor": {"podMonitor": {"enabled": True, "additionalLabels": RELEASE_LABEL}},
    "web-config": {"webConfig": {"secretName": "podres-web-config"}, "devicePlugin": PLUGIN_ON},
    "network-policy": {"networkPolicy": {"enabled": True}, "devicePlugin": PLUGIN_ON},
    "image": {"image": {"registry": "registry.example.com", "repository": "x/podres", "tag": "9"}},
}
# The opt-in kubelet mounts (kubelet.podsApi, kubelet.files), both on, with the plugin.
KUBELET_ALL = {"podsApi": {"enabled": True}, "files": {"enabled": True}}
RENDERINGS.update(
    {
        "kubelet-mounts": {"kubelet": KUBELET_ALL, "devicePlugin": PLUGIN_ON},
        "kubelet-mounts-k0s": {
            "kubelet": KUBELET_ALL,
            "kubeletRootDir": "/var/lib/k0s/kubelet",
            "devicePlugin": PLUGIN_ON,
        },
    }
)
# checkov takes seconds per run: the renderings whose pod specs differ in what it checks.
CHECKOV_RENDERINGS = (
    *("default", "device-plugin", "gpu", "network-policy", "web-config"),
    "kubelet-mounts",
)


def kinds(docs: list[Doc]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def daemonset(docs: list[Doc], name: str = "podres-exporter") -> Doc:
    return find(docs, "DaemonSet", name)


def host_paths(docs: list[Doc], name: str) -> dict[str, str]:
    """Each hostPath volume's path, by the mount path it has in the container."""
    spec = pod_spec(daemonset(docs, name))
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = spec["containers"][0]["volumeMounts"]
    return {m["mountPath"]: paths[m["name"]] for m in mounts if m["name"] in paths}


def render_failure(template: Template, values: dict[str, Any]) -> str:
    with pytest.raises(RenderError) as failed:
        template(values)
    return str(failed.value)


# ----------------------------------------------------------------------- the chart itself


def test_chart_version_is_the_package_version() -> None:
    """Chart.yaml's version and appVersion are pyproject.toml's project.version."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == package_version()
    assert chart["appVersion"] == package_version()


RULE_FILES = {
    "podres-exporter": "podres-alerts.yaml",
    "podres-exporter-recording": "podres-recording.yaml",
}


@pytest.mark.parametrize("file", RULE_FILES.values())
def test_rules_are_a_copy_of_the_rule_file(file: str) -> None:
    """The chart's rule files are byte for byte deploy/prometheus/'s (`make rules` writes
    both)."""
    source = DEPLOY / "prometheus" / file
    copied = CHART / "files" / file
    assert copied.read_bytes() == source.read_bytes(), "run `make rules`"


@pytest.mark.parametrize("name", ["default", "monitoring", "web-config", "network-policy"])
def test_helm_lint(helm: str, tmp_path: Path, name: str) -> None:
    """``helm lint --strict`` finds nothing wrong with the chart and these values."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(RENDERINGS[name]))
    result = run_helm(helm, "lint", "--strict", str(CHART), "-f", str(values))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


# ------------------------------------------------------------------------------ validity


@pytest.mark.parametrize("name", RENDERINGS)
def test_every_object_is_valid(template: Template, name: str) -> None:
    """Every object validates: core kinds against the Kubernetes 1.28 API (strict),
    Prometheus Operator kinds against the shipped CRDs; all in the release's namespace."""
    problems = []
    for doc in template(RENDERINGS[name]):
        where = f"{name}: {doc['kind']}/{doc['metadata']['name']}"
        assert doc["metadata"]["namespace"] == NAMESPACE, where
        try:
            if doc["apiVersion"].startswith(MONITORING_GROUP + "/"):
                validate_custom(doc)
            else:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as err:
            problems.append(f"{where}: {err.message} at {list(err.absolute_path)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", CHECKOV_RENDERINGS)
def test_checkov_finds_nothing(template: Template, checkov: str, tmp_path: Path, name: str) -> None:
    """checkov reports no failed check; its skips are annotated on the DaemonSets with a
    reason, and on the pod network the host network's two are gone."""
    docs = template(RENDERINGS[name])
    for i, doc in enumerate(docs):
        filename = f"{i:02d}-{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"
        (tmp_path / filename).write_text(yaml.safe_dump(doc, sort_keys=False))
    report = run_checkov(checkov, tmp_path)
    failed = [
        f"{c['check_id']} {c['check_name']}: {c['resource']} ({c['file_path']})"
        for c in report["results"].get("failed_checks", [])
    ]
    assert not failed, "checkov:\n" + "\n".join(failed)
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["passed"] > 30
    assert report["summary"]["skipped"] >= 1
    expected = {"CKV_K8S_15", "CKV_K8S_23", "CKV_K8S_40", "CKV_K8S_43"}
    if name != "network-policy":
        expected |= {"CKV_K8S_19", "CKV2_K8S_6"}
    for doc in docs:
        skips = {
            value.partition("=")[0]: value.partition("=")[2]
            for key, value in doc["metadata"].get("annotations", {}).items()
            if key.startswith("checkov.io/skip")
        }
        if doc["kind"] == "DaemonSet":
            assert set(skips) == expected, doc["metadata"]["name"]
            assert all(len(reason.strip()) > 10 for reason in skips.values())
        else:
            assert not skips


# ----------------------------------------------------------------------- what is installed


def test_default_is_the_exporter_alone(template: Template) -> None:
    """The defaults render the exporter's DaemonSet, headless Service and ServiceAccount and
    nothing else: no device plugin, no ConfigMap, nothing that writes to a node."""
    docs = template({})
    assert kinds(docs) == [
        ("DaemonSet", "podres-exporter"),
        ("Service", "podres-exporter"),
        ("ServiceAccount", "podres-exporter"),
    ]
    for doc in docs:
        assert doc["metadata"]["labels"].items() >= HELM_LABELS.items()
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    spec = pod_spec(daemonset(docs))
    assert all(m.get("readOnly") is True for m in spec["containers"][0]["volumeMounts"])
    assert "device-plugins" not in yaml.safe_dump(docs)
    assert find(docs, "Service", "podres-exporter")["spec"]["clusterIP"] == "None"


def test_device_plugin_needs_resources_named(template: Template) -> None:
    """devicePlugin.enabled with no resources (the default list, or TOML without a
    [[resource]]) refuses to render, naming devicePlugin.resources."""
    nothing: tuple[list[Doc], str] = ([], "# nothing yet\n")
    for resources in nothing:
        values = {"devicePlugin": {"enabled": True, "resources": resources}}
        assert "devicePlugin.resources" in render_failure(template, values)


def test_device_plugin_resources_render_to_a_file_the_plugin_loads(
    template: Template, tmp_path: Path
) -> None:
    """Structured resources render to a resource file that the plugin's own loader accepts,
    mounted where --resources points; the same file given as TOML text is taken as it stands;
    a change of the file changes the pod template (the pods roll)."""
    gpu = {"name": "nvidia.com/gpu", "replicas": 4, "discover": {"kind": "nvml"}}
    sriov = {
        "name": "intel.com/sriov_vf",
        "pre_start": True,
        "env": {"SRIOV_POOL": 'east "1"'},
        "discover": {"kind": "pci", "vendor": "0x8086", "class": "0x0200*"},
    }
    values = {
        "devicePlugin": {
            "enabled": True,
            "settings": {"health_interval": "2s"},
            "resources": [FUSE, gpu, sriov],
        }
    }
    docs = template(values)
    text = find(docs, "ConfigMap", "podres-device-plugin")["data"]["plugin.toml"]
    (tmp_path / "plugin.toml").write_text(text)
    config = load_config(str(tmp_path / "plugin.toml"))
    got = {r.name: (r.discover.kind, r.replicas) for r in config.resources}
    assert got == {
        "podres.io/fuse": (DiscoverKind.DEV, 32),
        "nvidia.com/gpu": (DiscoverKind.NVML, 4),
        "intel.com/sriov_vf": (DiscoverKind.PCI, 1),
    }
    sriov_config = config.resources[2]
    assert sriov_config.pre_start is True
    assert dict(sriov_config.env) == {"SRIOV_POOL": 'east "1"'}
    assert config.health_interval_s == 2.0

    container = the_container(daemonset(docs, PLUGIN.name), PLUGIN)
    assert tuple(container["args"]) == PLUGIN.args
    volume = next(v for v in pod_spec(daemonset(docs, PLUGIN.name))["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == "podres-device-plugin"
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert f"--resources={mount['mountPath']}/plugin.toml" in container["args"]

    as_text = template({"devicePlugin": {"enabled": True, "resources": text}})
    assert find(as_text, "ConfigMap", PLUGIN.name)["data"]["plugin.toml"] == text

    def checksum(docs: list[Doc]) -> str:
        annotations = daemonset(docs, PLUGIN.name)["spec"]["template"]["metadata"]["annotations"]
        value: str = annotations["checksum/resources"]
        return value

    assert checksum(docs) != checksum(template({"devicePlugin": PLUGIN_ON}))


def test_device_plugin_is_the_kustomize_one(template: Template) -> None:
    """Enabled, the plugin has the manifests' arguments, host mounts (its device-plugins
    directory the only writable one), port and ServiceAccount."""
    docs = template({"devicePlugin": PLUGIN_ON})
    assert ("ServiceAccount", PLUGIN.name) in kinds(docs)
    assert find(docs, "Service", PLUGIN.name)["spec"]["ports"][0]["port"] == PLUGIN.port
    mounts = the_container(daemonset(docs, PLUGIN.name), PLUGIN)["volumeMounts"]
    host = host_paths(docs, PLUGIN.name)
    found = {
        (host[m["mountPath"]], m["mountPath"], m.get("readOnly", False))
        for m in mounts
        if m["mountPath"] in host
    }
    assert found == PLUGIN.mounts("/var/lib/kubelet")
    writable = [m["mountPath"] for m in mounts if not m.get("readOnly")]
    assert writable == ["/var/lib/kubelet/device-plugins"]


@pytest.mark.parametrize(
    "root", ["/var/lib/k0s/kubelet", "/var/snap/microk8s/common/var/lib/kubelet", "/srv/k/"]
)
def test_kubelet_root_dir_moves_the_host_paths(template: Template, root: str) -> None:
    """kubeletRootDir moves the kubelet's sockets' host paths (a trailing slash is dropped);
    inside the containers they stay at the default paths the agents look at."""
    docs = template({"kubeletRootDir": root, "devicePlugin": PLUGIN_ON})
    base = root.rstrip("/")
    pod_resources = "/var/lib/kubelet/pod-resources"
    assert host_paths(docs, EXPORTER.name)[pod_resources] == f"{base}/pod-resources"
    device_plugins = "/var/lib/kubelet/device-plugins"
    assert host_paths(docs, PLUGIN.name)[device_plugins] == f"{base}/device-plugins"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"kubeletRootDir": "var/lib/kubelet"}, "kubeletRootDir"),
        ({"serviceMonitor": {"enable": True}}, "enable"),
        ({"devicePlugin": {"resource": []}}, "resource"),
        ({"gpu": {"enabled": "yes"}}, "gpu.enabled"),
        ({"image": {"pullPolicy": "Sometimes"}}, "image.pullPolicy"),
        ({"devicePlugin": {"resources": [{"name": "podres.io/x"}]}}, "discover"),
    ],
    ids=str,
)
def test_a_wrong_value_refuses_to_render(
    template: Template, values: dict[str, Any], named: str
) -> None:
    """A misspelt value, a value of the wrong type and a relative kubeletRootDir refuse to
    render (values.schema.json), naming the value, rather than being ignored."""
    assert named in render_failure(template, values)


def test_gpu_gives_the_exporter_nvml_and_advertises_nothing(template: Template) -> None:
    """gpu.enabled runs the exporter on GPU nodes through the NVIDIA runtime with every GPU
    visible for NVML only; no device plugin, nothing registers with the kubelet, no
    nvidia.com/gpu is advertised."""
    docs = template(RENDERINGS["gpu"])
    spec = pod_spec(daemonset(docs))
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "nvidia.com/gpu.present": "true"}
    assert spec["runtimeClassName"] == "nvidia"
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env == {
        "NODE_NAME": None,
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
    }
    assert [k for k, _ in kinds(docs)] == ["DaemonSet", "Service", "ServiceAccount"]
    assert "device-plugins" not in yaml.safe_dump(docs)
    assert "nvidia.com/gpu:" not in yaml.safe_dump(docs)

    plain = pod_spec(daemonset(template({})))
    assert "runtimeClassName" not in plain
    assert plain["nodeSelector"] == {"kubernetes.io/os": "linux"}
    # null drops the chart's default map (an empty map would be merged with it).
    everywhere = template({"gpu": {"enabled": True, "nodeSelector": None, "runtimeClassName": ""}})
    assert "runtimeClassName" not in pod_spec(daemonset(everywhere))
    assert pod_spec(daemonset(everywhere))["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_node_name_from_the_downward_api(template: Template) -> None:
    """Both containers get NODE_NAME from the pod's spec.nodeName."""
    docs = template({"devicePlugin": PLUGIN_ON})
    for name in (EXPORTER.name, PLUGIN.name):
        (env,) = [e for e in pod_spec(daemonset(docs, name))["containers"][0]["env"]]
        assert env == {
            "name": "NODE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        }


def test_image_registry_repository_and_tag(template: Template) -> None:
    """The image is registry/repository:tag, the tag the chart's appVersion unless given."""
    docs = template({"devicePlugin": PLUGIN_ON})
    for name in (EXPORTER.name, PLUGIN.name):
        container = pod_spec(daemonset(docs, name))["containers"][0]
        assert container["image"] == f"ghcr.io/podres-exporter/podres-exporter:{package_version()}"
    custom = pod_spec(daemonset(template(RENDERINGS["image"])))["containers"][0]
    assert custom["image"] == "registry.example.com/x/podres:9"
    bare = template({"image": {"registry": "", "repository": "podres", "tag": "e2e"}})
    assert pod_spec(daemonset(bare))["containers"][0]["image"] == "podres:e2e"


def test_scheduling_and_container_values(template: Template) -> None:
    """nodeSelector, tolerations, resources, extraArgs, priorityClassName and pod
    annotations reach the pod as given."""
    tolerations = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    values: dict[str, Any] = {
        "priorityClassName": "",
        "imagePullSecrets": [{"name": "pull"}],
        "exporter": {
            "nodeSelector": {"pool": "gpu"},
            "tolerations": tolerations,
            "resources": {"requests": {"cpu": "50m"}},
            "extraArgs": ["--poll-interval=30s"],
            "podAnnotations": {"example.com/team": "infra"},
        },
    }
    docs = template(values)
    ds = daemonset(docs)
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "gpu"}
    assert spec["tolerations"] == tolerations
    assert spec["imagePullSecrets"] == [{"name": "pull"}]
    assert "priorityClassName" not in spec
    container = spec["containers"][0]
    assert container["args"][-1] == "--poll-interval=30s"
    assert container["resources"]["requests"]["cpu"] == "50m"
    assert ds["spec"]["template"]["metadata"]["annotations"] == {"example.com/team": "infra"}


# ----------------------------------------------------------------- locking the endpoints


def test_web_config_mounts_the_named_secret_where_the_flag_points(template: Template) -> None:
    """webConfig.secretName gives both agents --web.config.file inside the Secret's mount (a
    directory, read-only, 0400) and HTTPS probes; webConfig.tls=false keeps HTTP probes."""
    docs = template(RENDERINGS["web-config"])
    for name in (EXPORTER.name, PLUGIN.name):
        spec = pod_spec(daemonset(docs, name))
        container = spec["containers"][0]
        assert WEB_CONFIG_ARG in container["args"]
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/podres-web")
        assert mount["readOnly"] is True
        assert "subPath" not in mount
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert volume["secret"] == {"secretName": "podres-web-config", "defaultMode": 0o400}
        for probe in ("livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    basic = template({"webConfig": {"secretName": "auth", "tls": False}})
    container = pod_spec(daemonset(basic))["containers"][0]
    assert "scheme" not in container["livenessProbe"]["httpGet"]
    assert WEB_CONFIG_ARG in container["args"]
    plain = pod_spec(daemonset(template({})))["containers"][0]
    assert not [a for a in plain["args"] if a.startswith("--web.config.file")]


def test_network_policy_puts_the_agents_behind_it(template: Template) -> None:
    """networkPolicy.enabled moves both agents to the pod network and admits only pods
    labelled app.kubernetes.io/name=prometheus to the metrics port, nothing out."""
    docs = template(RENDERINGS["network-policy"])
    policy = find(docs, "NetworkPolicy", "podres-metrics")["spec"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    assert policy["egress"] == []
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"] == [
        {
            "namespaceSelector": {},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    selector = policy["podSelector"]["matchLabels"]
    for name in (EXPORTER.name, PLUGIN.name):
        ds = daemonset(docs, name)
        assert ds["spec"]["template"]["metadata"]["labels"].items() >= selector.items()
        assert pod_spec(ds)["hostNetwork"] is False
        assert pod_spec(ds)["dnsPolicy"] == "ClusterFirst"
    assert not [d for d in template({}) if d["kind"] == "NetworkPolicy"]


# ---------------------------------------------------------------------------- monitoring


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("monitoring", "ServiceMonitor"),
        ("monitoring", "PrometheusRule"),
        ("pod-monitor", "PodMonitor"),
    ],
)
def test_monitoring_objects_carry_the_release_label(
    template: Template, name: str, kind: str
) -> None:
    """The ServiceMonitor, PodMonitor and PrometheusRule carry additionalLabels (the label
    kube-prometheus-stack selects by) besides the chart's own; none exists unless enabled."""
    docs = template(RENDERINGS[name])
    labels = find(docs, kind, "podres-exporter")["metadata"]["labels"]
    assert labels.items() >= {**HELM_LABELS, **RELEASE_LABEL}.items()
    assert not [d for d in template({}) if d["kind"] == kind]


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_monitor_scrapes_both_agents_with_their_own_labels(template: Template, kind: str) -> None:
    """The monitor selects both agents (Services, or pods) on the `metrics` port, keeps the
    exporter's labels, adds `node`, drops the agent's own namespace, pod and container, and
    takes extra endpoint settings."""
    key = "serviceMonitor" if kind == "ServiceMonitor" else "podMonitor"
    values = {key: {"enabled": True, "endpoint": {"interval": "30s"}}, "devicePlugin": PLUGIN_ON}
    docs = template(values)
    monitor = find(docs, kind, "podres-exporter")
    selector = monitor["spec"]["selector"]["matchLabels"]
    if kind == "ServiceMonitor":
        (endpoint,) = monitor["spec"]["endpoints"]
        targets = [
            find(docs, "Service", n)["metadata"]["labels"] for n in (EXPORTER.name, PLUGIN.name)
        ]
    else:
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        targets = [
            daemonset(docs, n)["spec"]["template"]["metadata"]["labels"]
            for n in (EXPORTER.name, PLUGIN.name)
        ]
    for labels in targets:
        assert labels.items() >= selector.items()
    assert endpoint == {
        "port": "metrics",
        "honorLabels": True,
        "interval": "30s",
        "relabelings": [
            {
                "action": "replace",
                "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                "targetLabel": "node",
            },
            {"action": "labeldrop", "regex": "namespace|pod|container"},
        ],
    }


@pytest.mark.parametrize(("name", "file"), RULE_FILES.items())
def test_prometheus_rule_is_the_rule_file(template: Template, name: str, file: str) -> None:
    """Each PrometheusRule's spec is its plain rule file's content, Prometheus's own
    templates ({{ $labels.node }}) left as they are."""
    rule = find(template(RENDERINGS["monitoring"]), "PrometheusRule", name)
    source = yaml.safe_load((DEPLOY / "prometheus" / file).read_text())
    assert rule["spec"] == source
    if file == "podres-alerts.yaml":
        assert "{{ $labels.node }}" in yaml.safe_dump(rule)


# ------------------------------------------------------------- the same as the kustomize base


def _comparable(daemonset: Doc) -> Doc:
    """A DaemonSet's spec without what an installer sets its own way: labels (kustomize's
    or Helm's), annotations, the image reference and the container's environment."""
    spec = copy.deepcopy(daemonset["spec"])
    del spec["template"]["metadata"]
    for container in spec["template"]["spec"]["containers"]:
        container.pop("env", None)
        container.pop("image")
    return spec


def test_exporter_is_the_kustomize_base_exporter(template: Template) -> None:
    """With the defaults, the exporter's DaemonSet spec (selector, update strategy, pod spec:
    arguments, mounts, security contexts, probes, resources, scheduling) equals that of
    `kubectl kustomize deploy/base`, and so do its Service and ServiceAccount."""
    base = _render(_kubectl(), DEPLOY / "base")
    docs = template({})
    theirs = find(base, "DaemonSet", EXPORTER.name)
    ours = daemonset(docs)
    assert _comparable(ours) == _comparable(theirs)
    assert the_container(ours, EXPORTER)["image"] == the_container(theirs, EXPORTER)["image"]
    assert (
        ours["metadata"]["annotations"].items()
        >= {
            k: v for k, v in theirs["metadata"]["annotations"].items() if "CKV_K8S_43" not in v
        }.items()
    )
    for kind in ("Service", "ServiceAccount"):
        ours_doc, theirs_doc = find(docs, kind, EXPORTER.name), find(base, kind, EXPORTER.name)
        assert {k: v for k, v in ours_doc.items() if k != "metadata"} == {
            k: v for k, v in theirs_doc.items() if k != "metadata"
        }


# --------------------------------------------------------------------------------- the docs


def _schema_values(schema: Doc, prefix: str = "") -> set[str]:
    """The chart's values, dotted: a value with properties of its own is a group, not one."""
    found: set[str] = set()
    for key, sub in schema["properties"].items():
        if key == "global":
            continue
        name = f"{prefix}{key}"
        found |= _schema_values(sub, f"{name}.") if "properties" in sub else {name}
    return found


def test_every_value_is_documented_and_declared() -> None:
    """docs/helm.md's values table lists exactly the values of values.schema.json, and
    values.yaml sets each of them."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    declared = _schema_values(schema)
    text = (REPO / "docs" / "helm.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z.]+)` \|", text, flags=re.MULTILINE))
    assert documented == declared
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for name in declared:
        node = values
        for part in name.split("."):
            assert isinstance(node, dict) and part in node, f"values.yaml does not set {name}"
            node = node[part]


# ------------------------------------------------------------ the opt-in kubelet mounts

# value -> {(volume name, host path under the root, container path, hostPath type)} it adds:
# what the kustomize component of the same purpose adds.
KUBELET_VALUES = {"podsApi": OPT_IN_VOLUMES["pods-api"], "files": OPT_IN_VOLUMES["kubelet-files"]}
KUBELET_ANNOTATIONS = {"podsApi": "podres.io/pods-api", "files": "podres.io/kubelet-files"}


def exporter_host_volumes(docs: list[Doc]) -> dict[str, tuple[Doc, Doc]]:
    """The exporter's hostPath volumes by name, each with its container mount."""
    spec = pod_spec(daemonset(docs))
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    return {v["name"]: (v, mounts[v["name"]]) for v in spec["volumes"] if "hostPath" in v}


def template_for(helm: str, tmp_path: Path, values: dict[str, Any], version: str) -> list[Doc]:
    """The chart's objects for ``values`` against an API server of ``version``."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(path)]
    result = run_helm(helm, *args, "--kube-version", version)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


@pytest.mark.parametrize(
    "values", [{}, {"kubelet": {"podsApi": {"enabled": "auto"}}}], ids=["default", "auto"]
)
def test_default_mounts_no_opt_in_kubelet_path(template: Template, values: dict[str, Any]) -> None:
    """The defaults (and podsApi "auto" against Helm's own API version, older than 1.37)
    mount neither the Pods API directory nor the kubelet's config file or device-plugins
    directory, and annotate nothing about them."""
    docs = template(values)
    volumes = exporter_host_volumes(docs)
    opted = {v[0] for added in KUBELET_VALUES.values() for v in added}
    assert not opted & set(volumes)
    kubelet = [v["hostPath"]["path"] for v, _ in volumes.values()]
    assert [p for p in kubelet if p.startswith("/var/lib/kubelet")] == [
        "/var/lib/kubelet/pod-resources"
    ]
    annotations = daemonset(docs)["metadata"]["annotations"]
    assert not set(KUBELET_ANNOTATIONS.values()) & set(annotations)


@pytest.mark.parametrize("value", sorted(KUBELET_VALUES))
def test_each_kubelet_value_mounts_exactly_what_it_says(template: Template, value: str) -> None:
    """kubelet.podsApi.enabled and kubelet.files.enabled each add exactly their kubelet
    paths to the exporter, read-only, at the same paths in the container, typed so that a
    node without them keeps the pod from starting rather than have them created, plus the
    annotation naming them; nothing else changes."""
    default = daemonset(template({}))
    on = daemonset(template({"kubelet": {value: {"enabled": True}}}))
    before = exporter_host_volumes([default])
    added = {k: v for k, v in exporter_host_volumes([on]).items() if k not in before}
    found = set()
    for name, (volume, mount) in added.items():
        assert mount.get("readOnly") is True
        assert mount.get("mountPropagation", "None") == "None"
        assert "subPath" not in mount
        under_root = volume["hostPath"]["path"].removeprefix("/var/lib/kubelet/")
        found.add((name, under_root, mount["mountPath"], volume["hostPath"]["type"]))
    assert found == KUBELET_VALUES[value]
    stripped = copy.deepcopy(on)
    del stripped["metadata"]["annotations"][KUBELET_ANNOTATIONS[value]]
    spec = pod_spec(stripped)
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in added]
    container = spec["containers"][0]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] not in added]
    assert stripped == default


@pytest.mark.parametrize(
    ("version", "mounted"),
    [("1.36.4", False), ("1.37.0", True), ("v1.37.2-gke.1100", True), ("1.40.0", True)],
)
def test_pods_api_auto_follows_the_api_server_version(
    helm: str, tmp_path: Path, version: str, mounted: bool
) -> None:
    """kubelet.podsApi.enabled "auto" mounts the Pods API directory when the API server is
    1.37 or later (pre-releases and vendor builds of 1.37 included), not before."""
    docs = template_for(helm, tmp_path, {"kubelet": {"podsApi": {"enabled": "auto"}}}, version)
    assert ("pods-api" in exporter_host_volumes(docs)) is mounted


def test_kubelet_root_dir_and_config_path_move_the_opt_in_paths(template: Template) -> None:
    """kubeletRootDir moves the opt-in host paths with the others (the containers keep the
    default paths); kubelet.files.configPath names the config file alone."""
    root = "/var/snap/microk8s/common/var/lib/kubelet"
    docs = template({"kubelet": KUBELET_ALL, "kubeletRootDir": root + "/"})
    assert host_paths(docs, EXPORTER.name) == host_paths(template({}), EXPORTER.name) | {
        "/var/lib/kubelet/pod-resources": f"{root}/pod-resources",
        "/var/lib/kubelet/pods-api": f"{root}/pods-api",
        "/var/lib/kubelet/config.yaml": f"{root}/config.yaml",
        "/var/lib/kubelet/device-plugins": f"{root}/device-plugins",
    }
    files = {"enabled": True, "configPath": "/etc/kubernetes/kubelet-config.yaml"}
    docs = template({"kubelet": {"files": files}, "kubeletRootDir": root})
    paths = host_paths(docs, EXPORTER.name)
    assert paths["/var/lib/kubelet/config.yaml"] == "/etc/kubernetes/kubelet-config.yaml"
    assert paths["/var/lib/kubelet/device-plugins"] == f"{root}/device-plugins"


def test_kubelet_values_are_the_kustomize_components(template: Template, tmp_path: Path) -> None:
    """Both kubelet values on, the exporter equals the kustomize base with the pods-api and
    kubelet-files components (volumes compared by name), annotations included."""
    components = ("kubelet-files", "pods-api")
    theirs = find(_render_components(tmp_path, components), "DaemonSet", EXPORTER.name)
    ours = daemonset(template({"kubelet": KUBELET_ALL}))
    assert _by_name(_comparable(ours)) == _by_name(_comparable(theirs))
    for key in KUBELET_ANNOTATIONS.values():
        assert ours["metadata"]["annotations"][key] == theirs["metadata"]["annotations"][key]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"kubelet": {"podsApi": {"enabled": "yes"}}}, "kubelet.podsApi.enabled"),
        ({"kubelet": {"files": {"enabled": "true"}}}, "kubelet.files.enabled"),
        ({"kubelet": {"files": {"configPath": "etc/kubelet.yaml"}}}, "configPath"),
        ({"kubelet": {"podsAPI": {"enabled": True}}}, "podsAPI"),
    ],
    ids=str,
)
def test_a_wrong_kubelet_value_refuses_to_render(
    template: Template, values: dict[str, Any], named: str
) -> None:
    """A kubelet value of the wrong type, a misspelt one and a relative configPath refuse
    to render, naming the value."""
    assert named in render_failure(template, values)


def _render_components(tmp_path: Path, components: tuple[str, ...]) -> list[Doc]:
    """``kubectl kustomize`` of the base with ``components``."""
    return _render(_kubectl(), _synthetic(tmp_path / "kustomize", "base", components))


def _by_name(spec: Doc) -> Doc:
    """A DaemonSet spec with its pod's volumes and mounts in name order."""
    pod = spec["template"]["spec"]
    pod["volumes"] = sorted(pod["volumes"], key=lambda v: v["name"])
    for container in pod["containers"]:
        container["volumeMounts"] = sorted(container["volumeMounts"], key=lambda m: m["name"])
    return spec
