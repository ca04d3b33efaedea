"""A real kubelet that sees two NUMA nodes, for the NUMA-admission tests of the end-to-end tier.

The machines the tier runs on have one NUMA node and two CPUs, so a kubelet run as it is
makes every NUMA decision trivially. The kubelet (through cadvisor) builds its machine
topology from ``/sys/devices/system/node``; :func:`two_numa_kubelet` bind-mounts a made-up
tree over that directory in the cluster's mount namespace (the kubelet's and containerd's,
never the host's) and restarts the session cluster's kubelet with the configuration of
:func:`numa_kubelet_config` (``single-numa-node``, CPU manager ``static``, memory manager
``None``). The tree (:func:`write_numa_sysfs`, :class:`Layout`): NUMA node 0 holds the
first CPU with its SMT siblings, reserved by the kubelet; node 1 the rest (on these
machines CPU 0 and CPU 1); half the memory each; distances ``10 20`` / ``20 10``.

Beside it, as processes of the test run, ``podres plugin`` advertises two PCI functions
of a made-up NIC on NUMA node 0 (:data:`RESOURCE`, from the same tree's
``bus/pci/devices``) and ``podres export`` reads the kubelet's pod-resources socket with
``--path.sysfs`` at the same tree, and the kubelet's configuration file and device
checkpoint, so both see the NUMA layout the kubelet sees and the exporter serves the
facts ``podres fit`` admits with. When
the tests end, however they end, the tree is unmounted and the cluster's kubelet runs
again as it was, on the checkpoints it keeps of its own.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podres_exporter.core.cpulist import parse_cpulist
from tests.deviceplugin.support import write_sysfs as write_nic_sysfs
from tests.e2e.cluster import PAUSE_IMAGE, Cluster, ClusterError, wait_for
from tests.faults.support import PODRES, DaemonProcess, Starter
from tests.support import Samples, http_get, parse_samples

RESOURCE = "example.com/numa-vf"
VF_ADDRESSES = ("0000:af:02.0", "0000:af:02.1")  # two VFs of a NIC on NUMA node 0
DEVICE_NUMA = 0
NAMESPACE = "e2e-numa"
SYSTEM = Path("/sys/devices/system")
NODE_DIR = "/sys/devices/system/node"
REPO = Path(__file__).resolve().parents[2]
# The kubelet's checkpoints whose policy the NUMA kubelet does not share with the
# cluster's own: the memory manager refuses to start on another policy's checkpoint.
OWN_CHECKPOINTS = ("memory_manager_state",)
PLUGIN_RESOURCES = f"""
[plugin]
health_interval = "200ms"

[[resource]]
name = "{RESOURCE}"
[resource.discover]
kind = "pci"
vendor = "0x8086"
device = "0x1889"
"""
_TOPOLOGY_FILES = (
    "core_id",
    "physical_package_id",
    "die_id",
    "thread_siblings_list",
    "core_cpus_list",
    "core_siblings_list",
    "package_cpus_list",
)
NUMA_NODES_2 = re.compile(r'NumNUMANodes"?:2\b')  # the kubelet's "Detected CPU topology" line
_MEMINFO = re.compile(r"^Node \d+ (\S+:)\s+(\d+)( kB)?$")


def progress(message: str) -> None:
    """A line in the tier's progress log (shown with ``-s`` and in CI)."""
    print(f"[e2e {time.strftime('%H:%M:%S')}] {message}", flush=True)  # noqa: T201 - progress


# --------------------------------------------------------------------------- the layout


def _cpulist(path: Path) -> frozenset[int]:
    try:
        return parse_cpulist(path.read_text())
    except (OSError, ValueError):
        return frozenset()


@dataclass(frozen=True)
class Layout:
    """How the machine's online CPUs are split over the two made-up NUMA nodes: node 0 is
    the first CPU with its SMT siblings (the CPUs the kubelet reserves), node 1 the rest
    (the exclusive pool). On these two-CPU machines: CPU 0 and CPU 1."""

    node0: frozenset[int]
    node1: frozenset[int]

    @classmethod
    def of(cls, system: Path = SYSTEM) -> Layout:
        online = _cpulist(system / "cpu" / "online") or frozenset({0, 1})
        first = min(online)
        siblings = _cpulist(system / "cpu" / f"cpu{first}" / "topology" / "thread_siblings_list")
        node0 = (siblings & online) or frozenset({first})
        return cls(node0, online - node0)

    @property
    def numa_of_cpu(self) -> Mapping[int, int]:
        return {c: 0 if c in self.node0 else 1 for c in sorted(self.node0 | self.node1)}

    @property
    def reserved(self) -> frozenset[int]:
        return self.node0

    def kube_reserved_cpu(self) -> str:
        """kube-reserved CPU that makes the static policy reserve node 0's CPUs: half a CPU
        short of them, so that half a CPU beyond node 1 stays allocatable for the small
        pods beside a Guaranteed one that takes all of node 1."""
        return f"{len(self.node0) * 1000 - 500}m"


LAYOUT = Layout.of()
NUMA_OF_CPU = LAYOUT.numa_of_cpu
RESERVED_CPUS = LAYOUT.reserved


# --------------------------------------------------------------------------- the tree


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _halved_meminfo(text: str, node: int) -> str:
    """``Node 0 X: N kB`` lines as node ``node`` with half of each figure."""
    lines = []
    for line in text.splitlines():
        m = _MEMINFO.match(line.strip())
        if m:
            lines.append(
                f"Node {node} {m.group(1):<15} {int(m.group(2)) // 2:>8}{m.group(3) or ''}"
            )
    return "\n".join(lines)


def write_numa_sysfs(root: Path, system: Path = SYSTEM) -> Path:
    """A sysfs tree under ``root`` for a two-NUMA-node view of this two-CPU machine:
    ``devices/system/node`` (what the kubelet is shown), the CPUs' ``online`` lists and
    topology copied from ``system``, and the NIC whose VFs the plugin advertises.
    Returns ``root``."""
    numa_of_cpu = Layout.of(system).numa_of_cpu
    cpus = sorted(numa_of_cpu)
    if set(numa_of_cpu.values()) != {0, 1}:
        raise ClusterError(
            f"the NUMA admission tests need at least two CPU cores; this machine has CPUs {cpus}"
        )
    cpu_dir = root / "devices" / "system" / "cpu"
    for name in ("online", "possible", "present"):
        _write(cpu_dir / name, (system / "cpu" / name).read_text().strip())
    for cpu in cpus:
        for name in _TOPOLOGY_FILES:
            real = system / "cpu" / f"cpu{cpu}" / "topology" / name
            if real.exists():
                _write(cpu_dir / f"cpu{cpu}" / "topology" / name, real.read_text().strip())
    node_dir = root / "devices" / "system" / "node"
    nodes = sorted(set(numa_of_cpu.values()))
    everything = f"{nodes[0]}-{nodes[-1]}"
    for name in ("possible", "online", "has_cpu", "has_memory", "has_normal_memory"):
        _write(node_dir / name, everything)
    meminfo = (system / "node" / "node0" / "meminfo").read_text()
    for node in nodes:
        here = node_dir / f"node{node}"
        mine = [c for c in cpus if numa_of_cpu[c] == node]
        _write(here / "cpulist", ",".join(map(str, mine)))
        _write(here / "cpumap", format(sum(1 << c for c in mine), "x"))
        _write(here / "distance", " ".join("10" if n == node else "20" for n in nodes))
        _write(here / "meminfo", _halved_meminfo(meminfo, node))
        for size in ("hugepages-2048kB", "hugepages-1048576kB"):
            for name in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                _write(here / "hugepages" / size / name, "0")
        for cpu in mine:  # relative, as the kernel's: ../../cpu/cpuN
            (here / f"cpu{cpu}").symlink_to(Path("..") / ".." / "cpu" / f"cpu{cpu}")
    write_nic_sysfs(root, vfs=VF_ADDRESSES)  # a NIC on NUMA node 0 (DEVICE_NUMA)
    return root


# --------------------------------------------------------------------------- the kubelet


def numa_kubelet_config(cluster: Cluster) -> dict[str, Any]:
    """The cluster's kubelet configuration with the Topology Manager on ``single-numa-node``
    (scope ``container``) and the memory manager off (``None``): its ``Static`` policy
    would write ``cpuset.mems`` with the made-up node 1, which the kernel refuses. CPU
    manager ``static`` reserves NUMA node 0's CPUs (:meth:`Layout.kube_reserved_cpu`):
    node 1's are the exclusive pool."""
    config = cluster.kubelet_config()
    config.pop("reservedMemory", None)
    config.update(
        {
            "kubeReserved": {**config["kubeReserved"], "cpu": LAYOUT.kube_reserved_cpu()},
            "memoryManagerPolicy": "None",
            "topologyManagerPolicy": "single-numa-node",
            "topologyManagerScope": "container",
        }
    )
    return config


def _in_namespace(cluster: Cluster, *argv: str) -> None:
    result = subprocess.run(
        cluster.in_namespace(*argv), capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} in the cluster's namespace: {result.stderr.strip()}")


def _kubelet_healthy(cluster: Cluster) -> bool:
    """The kubelet started last answers its /healthz, and the node is Ready (the API's
    condition alone may still be the stopped kubelet's)."""
    proc = cluster.processes.get("kubelet")
    if proc is None or not proc.alive():
        raise ClusterError("the kubelet exited" + (f":\n{proc.tail()}" if proc else ""))
    healthz = f"http://127.0.0.1:{cluster.ports['kubelet-healthz']}/healthz"
    if http_get(healthz)[0] != 200:
        return False
    conditions = cluster.get_json("node", cluster.node_name)["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _kubelet_log_since(cluster: Cluster, offset: int) -> str:
    with (cluster.logs / "kubelet.log").open("rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def _kubelet_log_size(cluster: Cluster) -> int:
    path = cluster.logs / "kubelet.log"
    return path.stat().st_size if path.exists() else 0


@contextlib.contextmanager
def two_numa_kubelet(cluster: Cluster, tree: Path) -> Iterator[int]:
    """The cluster's kubelet restarted on the two-NUMA-node view of ``tree``; the offset of
    its log where this kubelet starts. Afterwards the tree is unmounted, the checkpoints
    the cluster's kubelet keeps of its own (:data:`OWN_CHECKPOINTS`) are put back and it
    runs again with its own configuration."""
    saved = cluster.work / "numa-saved-checkpoints"
    saved.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cluster.stop_kubelet()
    for name in OWN_CHECKPOINTS:
        with contextlib.suppress(FileNotFoundError):
            shutil.move(cluster.kubelet_root / name, saved / name)
    mounted = False
    try:
        _in_namespace(cluster, "mount", "--bind", str(tree / "devices/system/node"), NODE_DIR)
        mounted = True
        offset = _kubelet_log_size(cluster)
        cluster.start_kubelet(numa_kubelet_config(cluster))
        wait_for(
            "the kubelet to see two NUMA nodes",
            lambda: (
                '"NumNUMANodes":2' in _kubelet_log_since(cluster, offset)
                or cluster.processes["kubelet"].popen.poll() is not None
            ),
            timeout=60,
        )
        wait_for("the NUMA kubelet to be healthy", lambda: _kubelet_healthy(cluster), timeout=60)
        progress(f"the kubelet sees two NUMA nodes, ready after {time.monotonic() - started:.0f}s")
        yield offset
    finally:
        stopping = time.monotonic()
        cluster.stop_kubelet()
        if mounted:
            _in_namespace(cluster, "umount", NODE_DIR)
        for name in OWN_CHECKPOINTS:
            if (saved / name).exists():
                shutil.move(saved / name, cluster.kubelet_root / name)
            else:
                (cluster.kubelet_root / name).unlink(missing_ok=True)
        cluster.start_kubelet()
        wait_for(
            "the cluster's own kubelet to be healthy", lambda: _kubelet_healthy(cluster), timeout=90
        )
        progress(f"the cluster's own kubelet is back, after {time.monotonic() - stopping:.0f}s")


# --------------------------------------------------------------------------- the daemons


def start_plugin(daemons: Starter, cluster: Cluster, tree: Path, work: Path) -> DaemonProcess:
    """``podres plugin`` advertising the tree's two VFs as :data:`RESOURCE`."""
    resources = work / "numa-plugin.toml"
    resources.write_text(PLUGIN_RESOURCES)
    plugin = daemons(
        "numa-plugin",
        [
            *PODRES, "plugin",
            "--resources", str(resources),
            "--device-plugin-dir", str(cluster.device_plugin_dir),
            "--path.sysfs", str(tree),
            "--listen-address", "127.0.0.1:0",
            "--log-format", "json",
        ],
    )  # fmt: skip
    plugin.wait_url()
    return plugin


def start_exporter(daemons: Starter, cluster: Cluster, tree: Path) -> DaemonProcess:
    """``podres export`` on the kubelet's pod-resources socket, ``--path.sysfs`` at ``tree``."""
    exporter = daemons(
        "numa-exporter",
        [
            *PODRES, "export",
            "--kubelet-socket", str(cluster.pod_resources_socket),
            "--listen-address", "127.0.0.1:0",
            "--poll-interval", "200ms",
            "--kubelet-empty-confirm", "1s",
            "--path.sysfs", str(tree),
            "--path.pod-logs", str(cluster.pod_logs),
            "--path.container-logs", str(cluster.private("/var/log/containers")),
            "--log-format", "json",
            "--kubelet-config", str(cluster.work / "kubelet.json"),
            "--kubelet-device-checkpoint",
            str(cluster.device_plugin_dir / "kubelet_internal_checkpoint"),
        ],
    )  # fmt: skip
    exporter.wait_url()
    wait_for(
        "the exporter to be ready",
        lambda: http_get(exporter.url + "/readyz")[0] == 200,
        timeout=30,
    )
    return exporter


def exposition(exporter: DaemonProcess) -> str:
    """The exporter's /metrics body."""
    status, _, body = http_get(exporter.url + "/metrics")
    if status != 200:
        raise ClusterError(f"{exporter.url}/metrics answered {status}")
    return body.decode()


def scrape(exporter: DaemonProcess) -> Samples:
    return parse_samples(exposition(exporter))


# --------------------------------------------------------------------------- the pods


@dataclass(frozen=True)
class Shape:
    """One pod shape, and what the kubelet does with it when it comes in its turn.

    ``resources``: the one container's ``resources``. ``admitted``: the kubelet's answer
    (single-numa-node, the pods before it running); ``numa``: where an admitted pod's
    exclusive CPUs and devices are (None: nowhere in particular)."""

    name: str
    resources: Mapping[str, Mapping[str, str | int]]
    admitted: bool
    numa: int | None = None
    why: str = ""


def pod_manifest(shape: Shape, node: str) -> dict[str, Any]:
    """A pod of ``shape`` bound to ``node`` (no scheduler: the kubelet alone decides)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": shape.name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": node,
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": PAUSE_IMAGE,
                    "imagePullPolicy": "Never",
                    "resources": {k: dict(v) for k, v in shape.resources.items()},
                }
            ],
        },
    }


@dataclass(frozen=True)
class Outcome:
    """What became of a pod: Running, or refused with the kubelet's reason and message."""

    phase: str
    reason: str
    message: str
    uid: str

    @property
    def admitted(self) -> bool:
        return self.phase == "Running"


def outcome(cluster: Cluster, name: str) -> Outcome | None:
    """The pod's outcome once it runs or failed; None while it is pending."""
    pod = cluster.get_json("pod", "-n", NAMESPACE, name)
    status = pod.get("status", {})
    phase = status.get("phase", "")
    if phase not in ("Running", "Failed"):
        return None
    return Outcome(
        phase, status.get("reason", ""), status.get("message", ""), pod["metadata"]["uid"]
    )


def create_namespace(cluster: Cluster) -> None:
    """The tests' namespace, once its default ServiceAccount exists (pods need it)."""
    cluster.kubectl("create", "namespace", NAMESPACE)
    wait_for(
        f"the default ServiceAccount of {NAMESPACE}",
        lambda: (
            cluster.kubectl("get", "sa", "default", "-n", NAMESPACE, check=False).returncode == 0
        ),
        timeout=60,
    )


def delete_namespace(cluster: Cluster) -> None:
    cluster.kubectl(
        "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=90s",
        check=False,
    )  # fmt: skip


# --------------------------------------------------------------------------- the kubelet's own


def cpu_manager_state(cluster: Cluster) -> dict[str, Any]:
    """The CPU manager's checkpoint in the kubelet's root directory."""
    state: dict[str, Any] = json.loads((cluster.kubelet_root / "cpu_manager_state").read_text())
    return state


def exclusive_cpus(state: Mapping[str, Any]) -> dict[tuple[str, str], frozenset[int]]:
    """(pod UID, container) -> its exclusive CPUs, from a CPU manager checkpoint."""
    return {
        (uid, container): parse_cpulist(cpus)
        for uid, containers in (state.get("entries") or {}).items()
        for container, cpus in containers.items()
    }
