"""What each install choice under deploy/ does to a node, and what each knob component
changes: the base and every rendering without the device plugin advertise nothing, and each
component does what docs/deploy.md says it does, wherever it is combined."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from podres_exporter.deviceplugin.config import load_config
from tests.deploy.conftest import ALL_RENDERINGS, KUSTOMIZATIONS, SYNTHETIC, WITH_PLUGIN
from tests.deploy.test_manifests import (
    DEFAULT_KUBELET_ROOT,
    DEPLOY,
    EXPORTER,
    IMAGE,
    KUBELET_ROOTS,
    MONITORING_GROUP,
    PLUGIN,
    REPO,
    Doc,
    Render,
    find,
    kubelet_opt_in,
    pod_spec,
)

WITHOUT_PLUGIN = [name for name in ALL_RENDERINGS if name not in WITH_PLUGIN]
RELEASE_LABELLED = [name for name in SYNTHETIC if "kube-prometheus-stack" in name]
DEVICE_PLUGINS_DIR = "device-plugins"


def host_paths(docs: list[Doc]) -> list[str]:
    """Every hostPath of every pod template in ``docs``."""
    return [
        volume["hostPath"]["path"]
        for doc in docs
        if doc["kind"] == "DaemonSet"
        for volume in pod_spec(doc).get("volumes", [])
        if "hostPath" in volume
    ]


def kustomize(directory: Path) -> list[Doc]:
    """``kubectl kustomize`` of a kustomization written by a test (skipped without kubectl)."""
    result = subprocess.run(
        ["kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


# ------------------------------------------------------------- exporter only, by default


@pytest.mark.parametrize("name", WITHOUT_PLUGIN)
def test_without_the_plugin_nothing_is_advertised(render: Render, name: str) -> None:
    """Every rendering without the device-plugin choice (the base first) holds the exporter's
    DaemonSet alone: no DaemonSet registers a device plugin, none mounts the kubelet's
    device-plugins directory (but the exporter, read-only, with kubelet-files) or the host's
    /dev, no host path is writable, and no resource file is shipped."""
    docs = render(name)
    daemonsets = [d for d in docs if d["kind"] == "DaemonSet"]
    assert [d["metadata"]["name"] for d in daemonsets] == [EXPORTER.name]
    (exporter,) = daemonsets
    assert exporter["spec"]["template"]["spec"]["containers"][0]["args"][0] == "export"
    paths = host_paths(docs)
    exposed = [p for p in paths if p.endswith(f"/{DEVICE_PLUGINS_DIR}") or p == "/dev"]
    # The one exception: kubelet-files mounts the directory in the exporter, read-only.
    allowed = 1 if DEVICE_PLUGINS_DIR in kubelet_opt_in(name) else 0
    root = KUBELET_ROOTS.get(name, DEFAULT_KUBELET_ROOT)
    assert exposed == [f"{root}/{DEVICE_PLUGINS_DIR}"] * allowed
    mounts = pod_spec(exporter)["containers"][0]["volumeMounts"]
    assert all(m.get("readOnly") is True for m in mounts)
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    assert not [d for d in docs if d["metadata"]["name"].startswith(PLUGIN.name)]


def test_the_plugin_renderings_are_the_declared_ones(render: Render) -> None:
    """The device plugin's DaemonSet is in exactly the renderings WITH_PLUGIN names, so that
    the exporter-only checks above cover every other one."""
    holding = {
        name
        for name in ALL_RENDERINGS
        if any(
            d["kind"] == "DaemonSet" and d["metadata"]["name"] == PLUGIN.name for d in render(name)
        )
    }
    assert holding == WITH_PLUGIN


def test_shipped_example_is_accepted_by_the_plugin() -> None:
    """The example resource file that names no resource is one the plugin accepts (it then
    advertises nothing)."""
    path = DEPLOY / "components" / "device-plugin" / "plugin.toml"
    assert tomllib.loads(path.read_text()) == {}
    assert load_config(str(path)).resources == ()


# ------------------------------------------------------------------------ kubelet root


@pytest.mark.parametrize("name", sorted(KUBELET_ROOTS))
def test_kubelet_root_components_move_every_kubelet_path(render: Render, name: str) -> None:
    """A kubelet-root component points every host path that was under /var/lib/kubelet (the
    exporter's pod-resources and its opt-in kubelet mounts, the plugin's device-plugins) at
    its root, whichever order the components come in, leaves the container paths alone, and
    its ConfigMap is read by kustomize, never applied."""
    docs = render(name)
    root = KUBELET_ROOTS[name]
    paths = host_paths(docs)
    assert not [p for p in paths if p.startswith(DEFAULT_KUBELET_ROOT + "/")]
    moved = sorted(p for p in paths if p.startswith(root + "/"))
    agents = [EXPORTER, PLUGIN] if name in WITH_PLUGIN else [EXPORTER]
    expected = [f"{root}/{a.kubelet_dir}" for a in agents]
    expected += [f"{root}/{path}" for path in kubelet_opt_in(name)]
    assert moved == sorted(expected)
    for agent in agents:
        container = pod_spec(find(docs, "DaemonSet", agent.name))["containers"][0]
        mount_paths = {m["mountPath"] for m in container["volumeMounts"]}
        assert f"{DEFAULT_KUBELET_ROOT}/{agent.kubelet_dir}" in mount_paths
    assert not [d for d in docs if d["metadata"]["name"] == "podres-kubelet-root"]


@pytest.mark.parametrize(
    ("component", "root"),
    [
        ("kubelet-root-k0s", "/var/lib/k0s/kubelet"),
        ("kubelet-root-microk8s", "/var/snap/microk8s/common/var/lib/kubelet"),
    ],
)
def test_kubelet_root_component_names_its_root_once(component: str, root: str) -> None:
    """Each distribution's component holds its root in one line of one file, the line the
    docs tell users of other roots to change."""
    text = (DEPLOY / "components" / component / "kubelet-root.yaml").read_text()
    assert [line.strip() for line in text.splitlines() if "root:" in line] == [f"root: {root}"]


def test_kubelet_root_for_another_root_as_documented(render: Render, tmp_path: Path) -> None:
    """The generic kubelet-root component with a root of the user's (docs/deploy.md's
    recipe: a copy of the ConfigMap with its `root:` line changed) moves both agents."""
    overlay = tmp_path / "my-cluster"
    overlay.mkdir()
    source = (DEPLOY / "components" / "kubelet-root-k0s" / "kubelet-root.yaml").read_text()
    (overlay / "kubelet-root.yaml").write_text(
        source.replace("root: /var/lib/k0s/kubelet", "root: /data/kubelet")
    )
    rel = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [f"{rel}/overlays/device-plugin", "kubelet-root.yaml"],
                "components": [f"{rel}/components/kubelet-root"],
            }
        )
    )
    render("base")  # skips without kubectl
    paths = sorted(p for p in host_paths(kustomize(overlay)) if p.startswith("/data/"))
    assert paths == ["/data/kubelet/device-plugins", "/data/kubelet/pod-resources"]


# ------------------------------------------------------------------------ release label


@pytest.mark.parametrize("name", RELEASE_LABELLED)
def test_release_label_on_every_monitoring_object(render: Render, name: str) -> None:
    """The kube-prometheus-stack component labels every ServiceMonitor, PodMonitor and
    PrometheusRule `release: kube-prometheus-stack`, and nothing else."""
    docs = render(name)
    monitoring = [d for d in docs if d["apiVersion"].startswith(MONITORING_GROUP + "/")]
    assert len(monitoring) == 3  # a monitor and the two PrometheusRules (alerts, recording)
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        if doc in monitoring:
            assert labels["release"] == "kube-prometheus-stack", doc["kind"]
        else:
            assert "release" not in labels, doc["kind"]


def test_release_label_value_changed_as_documented(render: Render, tmp_path: Path) -> None:
    """The patch the component's comment gives for a release of another name relabels every
    monitoring object."""
    overlay = tmp_path / "my-cluster"
    overlay.mkdir()
    rel = os.path.relpath(DEPLOY, overlay)
    comment = (DEPLOY / "components" / "kube-prometheus-stack" / "kustomization.yaml").read_text()
    documented = "\n".join(line[4:] for line in comment.splitlines() if line.startswith("#   "))
    patches = yaml.safe_load(documented)["patches"]
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [f"{rel}/overlays/prometheus-operator"],
                "components": [f"{rel}/components/kube-prometheus-stack"],
                "patches": patches,
            }
        )
    )
    render("base")  # skips without kubectl
    docs = kustomize(overlay)
    releases = [
        d["metadata"]["labels"]["release"]
        for d in docs
        if d["apiVersion"].startswith(MONITORING_GROUP + "/")
    ]
    assert releases == ["my-release"] * 3


# ------------------------------------------------------------------------------- images


def test_release_tag_is_written_once() -> None:
    """Only the base pins the image: no other kustomization under deploy/ names a tag, so
    the device plugin runs the exporter's image (one line to change for a release)."""
    pinned = []
    for path in sorted(DEPLOY.rglob("kustomization.yaml")):
        if "images" in yaml.safe_load(path.read_text()):
            pinned.append(path.relative_to(DEPLOY).parent.as_posix())
    assert pinned == ["base"]


@pytest.mark.parametrize("name", sorted(WITH_PLUGIN))
def test_plugin_runs_the_exporters_image(render: Render, name: str) -> None:
    """Wherever the plugin is chosen, it runs the exporter's image, as the base or the
    overlay's `images:` set it."""
    docs = render(name)
    images = {
        pod_spec(find(docs, "DaemonSet", agent.name))["containers"][0]["image"]
        for agent in (EXPORTER, PLUGIN)
    }
    assert len(images) == 1


def test_images_rewritten_by_an_overlay(render: Render, tmp_path: Path) -> None:
    """`kustomize edit set image` in an overlay (docs/deploy.md) rewrites both agents'
    image, registry and tag, and leaves no reference to the released one."""
    overlay = tmp_path / "my-cluster"
    overlay.mkdir()
    rel = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [f"{rel}/overlays/device-plugin"]})
    )
    render("base")  # skips without kubectl
    # What `kustomize edit set image IMAGE=registry.example.com/podres:1.2.3` writes.
    text = (overlay / "kustomization.yaml").read_text() + (
        f"images:\n- name: {IMAGE}\n  newName: registry.example.com/podres\n  newTag: 1.2.3\n"
    )
    (overlay / "kustomization.yaml").write_text(text)
    docs = kustomize(overlay)
    images = [pod_spec(d)["containers"][0]["image"] for d in docs if d["kind"] == "DaemonSet"]
    assert images == ["registry.example.com/podres:1.2.3"] * 2
    assert IMAGE not in yaml.safe_dump_all(docs)


def test_every_kustomization_of_the_docs_is_rendered() -> None:
    """Every overlay under deploy/ is among the renderings, so that none goes unchecked."""
    overlays = {p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir()}
    rendered = {Path(path).name for path in KUSTOMIZATIONS.values() if "overlays" in path}
    assert overlays == rendered


def documented_block(marker: str) -> str:
    """The fenced block of docs/deploy.md whose first line is ``marker``."""
    text = (REPO / "docs" / "deploy.md").read_text()
    blocks = re.findall(r"```(?:yaml|toml)\n(.*?)```", text, flags=re.DOTALL)
    (block,) = [b for b in blocks if b.startswith(marker + "\n")]
    return block


def test_documented_plugin_overlay_advertises_what_its_file_names(
    render: Render, tmp_path: Path
) -> None:
    """docs/deploy.md's overlay for the device plugin, with its resource file, renders both
    agents with that file, which the plugin's loader accepts as written."""
    overlay = tmp_path / "my-cluster"
    overlay.mkdir()
    rel = os.path.relpath(DEPLOY, overlay)
    kustomization = documented_block("# my-cluster/kustomization.yaml")
    (overlay / "kustomization.yaml").write_text(kustomization.replace("../deploy/", f"{rel}/"))
    plugin_toml = documented_block("# my-cluster/plugin.toml")
    (overlay / "plugin.toml").write_text(plugin_toml)
    render("base")  # skips without kubectl
    docs = kustomize(overlay)
    names = sorted(d["metadata"]["name"] for d in docs if d["kind"] == "DaemonSet")
    assert names == sorted([EXPORTER.name, PLUGIN.name])
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert config_map["data"]["plugin.toml"] == plugin_toml
    config = load_config(str(overlay / "plugin.toml"))
    assert [(r.name, r.replicas) for r in config.resources] == [("podres.io/fuse", 32)]


# ------------------------------------------------------------ the opt-in kubelet mounts

# component -> (volume name, host path under the root, container path, hostPath type) it adds.
OPT_IN_VOLUMES = {
    "pods-api": {("pods-api", "pods-api", "/var/lib/kubelet/pods-api", "Directory")},
    "kubelet-files": {
        ("kubelet-config", "config.yaml", "/var/lib/kubelet/config.yaml", "File"),
        (
            "kubelet-device-plugins",
            "device-plugins",
            "/var/lib/kubelet/device-plugins",
            "Directory",
        ),
    },
}
OPT_IN_ANNOTATIONS = {"podres.io/pods-api", "podres.io/kubelet-files"}


def exporter_volumes(docs: list[Doc]) -> dict[str, tuple[Doc, Doc]]:
    """The exporter's volumes by name, each with its container mount."""
    spec = pod_spec(find(docs, "DaemonSet", EXPORTER.name))
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    return {v["name"]: (v, mounts[v["name"]]) for v in spec["volumes"]}


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_shipped_installs_mount_no_opt_in_kubelet_path(render: Render, name: str) -> None:
    """The base, every overlay and the end-to-end installs mount none of the kubelet paths
    that only some nodes have (pods-api, config.yaml) nor, in the exporter, device-plugins."""
    docs = render(name)
    volumes = exporter_volumes(docs)
    opted = {v[0] for vols in OPT_IN_VOLUMES.values() for v in vols}
    assert not opted & set(volumes)
    host = [v["hostPath"]["path"] for v, _ in volumes.values() if "hostPath" in v]
    assert [p for p in host if p.startswith(DEFAULT_KUBELET_ROOT)] == [
        f"{DEFAULT_KUBELET_ROOT}/{EXPORTER.kubelet_dir}"
    ]
    annotations = find(docs, "DaemonSet", EXPORTER.name)["metadata"]["annotations"]
    assert not OPT_IN_ANNOTATIONS & set(annotations)


@pytest.mark.parametrize("component", sorted(OPT_IN_VOLUMES))
def test_opt_in_component_mounts_exactly_what_it_says(render: Render, component: str) -> None:
    """Each opt-in component adds to the base's exporter exactly its kubelet paths,
    read-only, at the same paths in the container, with a type that keeps the pod from
    starting where the path is missing rather than create it, plus the annotation naming
    them; nothing else changes."""
    base = find(render("base"), "DaemonSet", EXPORTER.name)
    added = find(render(f"base+{component}"), "DaemonSet", EXPORTER.name)
    new = {k: v for k, v in exporter_volumes([added]).items() if k not in exporter_volumes([base])}
    found = set()
    for name, (volume, mount) in new.items():
        assert set(volume) == {"name", "hostPath"}
        assert mount.get("readOnly") is True
        assert mount.get("mountPropagation", "None") == "None"
        assert "subPath" not in mount
        host = volume["hostPath"]["path"]
        assert host.startswith(DEFAULT_KUBELET_ROOT + "/")
        under_root = host.removeprefix(DEFAULT_KUBELET_ROOT + "/")
        found.add((name, under_root, mount["mountPath"], volume["hostPath"]["type"]))
    assert found == OPT_IN_VOLUMES[component]
    annotations = added["metadata"]["annotations"]
    assert {k for k in annotations if k in OPT_IN_ANNOTATIONS} == {f"podres.io/{component}"}
    # Nothing else: the DaemonSet is the base's once the volumes and the annotation are gone.
    stripped = copy.deepcopy(added)
    del stripped["metadata"]["annotations"][f"podres.io/{component}"]
    spec = pod_spec(stripped)
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in new]
    container = spec["containers"][0]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] not in new]
    assert stripped == base


def test_documented_kubelet_mounts_overlays_render_as_the_docs_say(
    render: Render, tmp_path: Path
) -> None:
    """docs/deploy.md's overlays for the kubelet mounts render: the first mounts the Pods
    API directory, the config file and the device-plugins directory; the second points the
    config file's volume at the kubelet's own --config, still a file, where the exporter
    looks."""
    render("base")  # skips without kubectl
    docs = {}
    for marker in ("kubelet files", "another kubelet config file"):
        overlay = tmp_path / marker.replace(" ", "-")
        overlay.mkdir()
        block = documented_block(f"# my-cluster/kustomization.yaml ({marker})")
        rel = os.path.relpath(DEPLOY, overlay)
        (overlay / "kustomization.yaml").write_text(block.replace("../deploy/", f"{rel}/"))
        docs[marker] = exporter_volumes(kustomize(overlay))
    assert {"pods-api", "kubelet-config", "kubelet-device-plugins"} <= set(docs["kubelet files"])
    volume, mount = docs["another kubelet config file"]["kubelet-config"]
    assert volume["hostPath"] == {"path": "/etc/kubernetes/kubelet-config.yaml", "type": "File"}
    assert mount == {
        "name": "kubelet-config",
        "mountPath": "/var/lib/kubelet/config.yaml",
        "readOnly": True,
    }
    assert "pods-api" not in docs["another kubelet config file"]
