"""Installed as docs/deploy.md says, on a real single-node cluster, and put through its paces.

The tests run in file order and share one install, made in two steps as a user makes it: the
exporter alone first (it must change nothing on the node: no plugin, no resource advertised),
then the device plugin added with a resource file of the tests' own. Then: ready and
hardened, accounting equal to the kubelet's own answers, a plugin device in a pod, three
kubelet restarts, the plugin's pod deleted and brought back, and an uninstall that leaves
nothing behind.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest

from podres_exporter._generated.podresources.v1 import api_pb2, api_pb2_grpc
from podres_exporter.core.cpulist import parse_cpulist
from podres_exporter.daemon.fileid import file_identity
from tests.e2e.cluster import Cluster, ClusterError, wait_for
from tests.e2e.conftest import OVERLAY, PLUGIN_OVERLAY
from tests.e2e.images import PROJECT_IMAGE
from tests.monitoring.dashboard_lint import grafana_values, substitute, targets
from tests.monitoring.prom import NodePrometheus, alert_exprs, prometheus_scraping
from tests.support import Samples, http_get, parse_samples, select

# Setting up (image build, cluster start) and the kubelet restarts take minutes, not seconds.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NAMESPACE = "podres-system"
WORKLOADS = "e2e-workloads"
EXPORTER_URL = "http://127.0.0.1:9842"  # hostNetwork: the node's own address
PLUGIN_URL = "http://127.0.0.1:9843"
FUSE = "podres.io/fuse"
FUSE_REPLICAS = 32  # tests/e2e/overlay-plugin/plugin.toml
PART_OF = "app.kubernetes.io/part-of=podres-exporter"
DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"


# --------------------------------------------------------------------------- helpers


def metrics(url: str) -> Samples:
    status, _, body = http_get(url + "/metrics")
    if status != 200:
        raise ClusterError(f"{url}/metrics answered {status}")
    return parse_samples(body.decode())


def one(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` that carry ``labels`` (0 when there are none)."""
    return sum(select(samples, name, **labels).values())


def read_again(samples: Samples, *, lists_before: float) -> bool:
    """The exporter is up and has listed the kubelet since ``lists_before`` successful Lists."""
    return (
        one(samples, "podres_kubelet_requests_total", method="List", code="OK") > lists_before
        and one(samples, "podres_kubelet_up") == 1
    )


def exporter_once(ready: Callable[[Samples], bool]) -> Callable[[], Samples | None]:
    """A probe for :func:`wait_for`: one scrape of the exporter, returned when ``ready``."""

    def probe() -> Samples | None:
        samples = metrics(EXPORTER_URL)
        return samples if ready(samples) else None

    return probe


def fuse_state(samples: Samples, state: str) -> float:
    if state == "allocatable":
        return one(samples, "podres_node_allocatable_devices", resource=FUSE)
    return one(samples, "podres_node_devices", resource=FUSE, state=state)


def kubelet(cluster: Cluster) -> tuple[api_pb2.ListPodResourcesResponse, Any]:
    """The kubelet's own List and GetAllocatableResources answers, straight off its socket."""
    with grpc.insecure_channel(f"unix://{cluster.pod_resources_socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        listed = stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
        allocatable = stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=5)
    return listed, allocatable


def fuse_allocatable(cluster: Cluster) -> int:
    try:
        _, allocatable = kubelet(cluster)
    except grpc.RpcError:
        return -1
    return sum(len(d.device_ids) for d in allocatable.devices if d.resource_name == FUSE)


def node_resources(cluster: Cluster) -> dict[str, dict[str, str]]:
    """The node's capacity and allocatable, as the API server has them."""
    status = cluster.get_json("node", cluster.node_name)["status"]
    return {"capacity": status["capacity"], "allocatable": status["allocatable"]}


def device_resources(cluster: Cluster) -> set[str]:
    """The resources of every device the kubelet holds as allocatable, off its own socket."""
    _, allocatable = kubelet(cluster)
    return {d.resource_name for d in allocatable.devices}


def plugin_sockets(cluster: Cluster) -> list[str]:
    """The sockets in the kubelet's device-plugins directory other than its own."""
    found = (p.name for p in cluster.device_plugin_dir.iterdir() if p.is_socket())
    return sorted(name for name in found if name != "kubelet.sock")


def pods_ready(cluster: Cluster, namespace: str, selector: str | None = None) -> list[Any]:
    args = ["pods", "-n", namespace] + (["-l", selector] if selector else [])
    pods = cluster.get_json(*args)["items"]
    ready = [
        p
        for p in pods
        if p["status"].get("phase") == "Running"
        and all(c.get("ready") for c in p["status"].get("containerStatuses", [{}]))
        and not p["metadata"].get("deletionTimestamp")
    ]
    return ready if ready and len(ready) == len(pods) else []


def daemon_processes() -> dict[str, int]:
    """PIDs of the containerised daemons (``podres export`` / ``podres plugin`` in kubepods)."""
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroup = (proc / "cgroup").read_text()
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if "kubepods" not in cgroup or not any(a.endswith(b"/podres") for a in argv):
            continue
        for command in ("export", "plugin"):
            if command.encode() in argv:
                found[command] = int(proc.name)
    return found


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def root_mount_options(pid: int) -> list[str]:
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError(f"no root mount in /proc/{pid}/mountinfo")


def workload(name: str, resources: dict[str, Any], script: str = "exec sleep infinity") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {WORKLOADS}}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: {PROJECT_IMAGE}
      imagePullPolicy: Never
      command: [sh, -c, {script!r}]
      resources: {resources}
"""


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def exporter_only(cluster: Cluster, crds: None) -> tuple[Cluster, dict[str, Any]]:
    """``kubectl apply -k`` of the exporter-only install, and what the node advertised
    before it (the API's capacity and allocatable, the kubelet's device resources)."""
    before = {"node": node_resources(cluster), "devices": device_resources(cluster)}
    cluster.kubectl("apply", "-k", str(OVERLAY))
    return cluster, before


@pytest.fixture(scope="module")
def installed(exporter_only: tuple[Cluster, dict[str, Any]]) -> Cluster:
    """The device plugin added to the install (``kubectl apply -k`` of the plugin overlay)."""
    cluster, _ = exporter_only
    cluster.kubectl("apply", "-k", str(PLUGIN_OVERLAY))
    return cluster


@pytest.fixture(scope="module")
def workloads(installed: Cluster) -> Cluster:
    cluster = installed
    wait_for(
        "the device plugin to be Ready",
        lambda: pods_ready(cluster, NAMESPACE, "app.kubernetes.io/component=device-plugin"),
        timeout=180,
        interval=1,
    )
    wait_for(
        "the kubelet to advertise the plugin's devices",
        lambda: fuse_allocatable(cluster) == FUSE_REPLICAS,
        timeout=60,
    )
    manifests = [
        f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {WORKLOADS}}}\n",
        workload("guaranteed", {"limits": {"cpu": "1", "memory": "64Mi"}}),
        workload("besteffort", {}),
        workload(
            "fuse-user",
            {"limits": {FUSE: 1}},
            "test -c /dev/fuse && echo 'fuse device present'; exec sleep infinity",
        ),
    ]
    cluster.kubectl("apply", "-f", "-", input_text="---\n".join(manifests))
    wait_for(
        "the workloads to run",
        lambda: len(pods_ready(cluster, WORKLOADS)) == 3,
        timeout=120,
        interval=1,
    )
    return cluster


@pytest.fixture(scope="module")
def cluster_prometheus(workloads: Cluster) -> Iterator[NodePrometheus]:
    """A real Prometheus scraping the installed exporter and plugin on the node's address,
    labelled as the ServiceMonitor labels them."""
    with (
        tempfile.TemporaryDirectory(prefix="podres-e2e-prom-") as tmp,
        prometheus_scraping(
            Path(tmp),
            EXPORTER_URL.removeprefix("http://"),
            PLUGIN_URL.removeprefix("http://"),
            node=workloads.node_name,
            cluster="e2e",
        ) as prom,
    ):
        time.sleep(8)  # a rate() over four scrape intervals needs that much behind it
        yield prom


def exporter_sees_workloads() -> Samples | None:
    try:
        samples = metrics(EXPORTER_URL)
    except ClusterError:
        return None
    pods = {dict(k).get("pod") for k in select(samples, "podres_container_exclusive_cpus")}
    held = select(samples, "podres_container_device_info", resource=FUSE)
    return samples if "guaranteed" in pods and held else None


# --------------------------------------------------------------------------- tests


def test_exporter_only_install_changes_nothing_on_the_node(
    exporter_only: tuple[Cluster, dict[str, Any]],
) -> None:
    """The exporter-only install runs the exporter, Ready and reading the kubelet, and
    nothing else: no device-plugin DaemonSet or pod, no plugin socket, no device resource in
    the kubelet, and the node's capacity and allocatable gain nothing."""
    cluster, before = exporter_only
    wait_for(
        "the exporter to be Ready",
        partial(pods_ready, cluster, NAMESPACE, "app.kubernetes.io/component=exporter"),
        timeout=180,
        interval=1,
    )
    samples = wait_for(
        "the exporter to read the kubelet",
        exporter_once(lambda m: one(m, "podres_kubelet_up") == 1),
        timeout=60,
        interval=0.5,
    )
    assert one(samples, "podres_pods") >= 1  # its own pod, at least
    daemonsets = cluster.get_json("daemonsets", "-n", NAMESPACE)["items"]
    assert [d["metadata"]["name"] for d in daemonsets] == ["podres-exporter"]
    pods = cluster.get_json("pods", "-n", NAMESPACE)["items"]
    components = {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods}
    assert components == {"exporter"}
    assert "plugin" not in daemon_processes()
    assert plugin_sockets(cluster) == []
    assert device_resources(cluster) <= before["devices"]
    after = node_resources(cluster)
    for kind in ("capacity", "allocatable"):
        was, now = before["node"][kind], after[kind]
        assert set(now) <= set(was), (kind, sorted(set(now) - set(was)))
        assert {k: v for k, v in now.items() if "/" not in k} == {
            k: v for k, v in was.items() if "/" not in k
        }, kind
        # Extended resources left by an earlier install may only fade, never grow.
        for key in (k for k in now if "/" in k):
            assert int(now[key]) <= int(was[key]), (kind, key)


def test_daemonsets_ready_with_no_capabilities_and_read_only_root(installed: Cluster) -> None:
    """Both DaemonSets' pods pass the kubelet's probes; the processes run with no capability,
    no new privileges, seccomp on and a read-only root filesystem."""
    cluster = installed
    for component in ("exporter", "device-plugin"):
        wait_for(
            f"the {component} to be Ready",
            partial(pods_ready, cluster, NAMESPACE, f"app.kubernetes.io/component={component}"),
            timeout=180,
            interval=1,
        )
    for ds in cluster.get_json("daemonsets", "-n", NAMESPACE)["items"]:
        status = ds["status"]
        assert status["desiredNumberScheduled"] == status["numberReady"] == 1, ds["metadata"]
    pids = wait_for(
        "both daemons' processes",
        lambda: len(daemon_processes()) == 2 and daemon_processes(),
        timeout=10,
    )
    for command, pid in pids.items():
        status = proc_status(pid)
        for cap in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"):
            assert int(status[cap], 16) == 0, (command, cap, status[cap])
        assert status["NoNewPrivs"].strip() == "1", command
        assert status["Seccomp"].strip() == "2", command  # filter mode: RuntimeDefault
        assert "ro" in root_mount_options(pid), command
        assert status["Uid"].split()[0] == "0", command  # root, for the kubelet's sockets


def test_exporter_accounting_equals_the_kubelet(workloads: Cluster) -> None:
    """CPU pools, exclusive CPUs, devices and pinned memory on /metrics are exactly what the
    kubelet's List and GetAllocatableResources say."""
    cluster = workloads
    samples = wait_for(
        "the exporter to show the workloads", exporter_sees_workloads, timeout=60, interval=1
    )
    listed, allocatable = kubelet(cluster)
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    free_cpus = set(allocatable.cpu_ids)
    exclusive: dict[tuple[str, str, str], set[int]] = {}
    held: dict[tuple[str, str, str], set[str]] = {}
    pinned: dict[tuple[str, str, str], int] = {}
    for pod in listed.pod_resources:
        for ctr in pod.containers:
            key = (pod.namespace, pod.name, ctr.name)
            if ctr.cpu_ids:
                exclusive[key] = set(ctr.cpu_ids)
            for dev in ctr.devices:
                if dev.resource_name == FUSE:
                    held.setdefault(key, set()).update(dev.device_ids)
            for mem in ctr.memory:
                if mem.memory_type == "memory":
                    pinned[key] = pinned.get(key, 0) + mem.size
    taken = set().union(*exclusive.values())

    assert one(samples, "podres_pods") == len(listed.pod_resources)
    assert one(samples, "podres_node_allocatable_cpus") == len(free_cpus)
    assert one(samples, "podres_node_cpus", pool="exclusive") == len(taken) == 1
    assert one(samples, "podres_node_cpus", pool="shared_free") == len(free_cpus - taken)
    assert one(samples, "podres_node_cpus", pool="reserved") == len(set(online) - free_cpus)
    assert set(exclusive) == {(WORKLOADS, "guaranteed", "main")}  # the only exclusive holder
    for (ns, pod_name, ctr_name), cpus in exclusive.items():
        assert one(
            samples,
            "podres_container_exclusive_cpus",
            namespace=ns,
            pod=pod_name,
            container=ctr_name,
        ) == len(cpus)
        for cpu in cpus:
            assert (
                one(
                    samples,
                    "podres_cpu_assignment_info",
                    cpu=str(cpu),
                    pool="exclusive",
                    namespace=ns,
                    pod=pod_name,
                    container=ctr_name,
                )
                == 1
            )
    assert not select(samples, "podres_container_exclusive_cpus", pod="besteffort")

    fuse_ids = {i for d in allocatable.devices if d.resource_name == FUSE for i in d.device_ids}
    assert len(fuse_ids) == FUSE_REPLICAS
    assert set(held) == {(WORKLOADS, "fuse-user", "main")}
    assert fuse_state(samples, "allocatable") == len(fuse_ids)
    assert fuse_state(samples, "allocated") == 1
    assert fuse_state(samples, "free") == len(fuse_ids) - 1
    shown = {
        dict(k)["device_id"]
        for k in select(samples, "podres_container_device_info", resource=FUSE, pod="fuse-user")
    }
    assert shown == held[(WORKLOADS, "fuse-user", "main")]

    alloc_mem = sum(m.size for m in allocatable.memory if m.memory_type == "memory")
    assert one(samples, "podres_node_allocatable_memory_bytes", memory_type="memory") == alloc_mem
    assert (
        one(samples, "podres_node_memory_bytes", memory_type="memory", state="allocated")
        == sum(pinned.values())
        == 64 * 2**20
    )
    assert (
        one(samples, "podres_container_memory_bytes", pod="guaranteed", memory_type="memory")
        == 64 * 2**20
    )


def test_plugin_device_reaches_the_pod_and_the_api(workloads: Cluster) -> None:
    """The pod asking for the plugin's resource finds the device node in its container, and
    the node's allocatable count in the API equals what the plugin advertises."""
    cluster = workloads
    logs = list(cluster.pod_logs.glob(f"{WORKLOADS}_fuse-user_*/main/*.log"))
    assert logs, "no container log for fuse-user"
    assert "fuse device present" in logs[0].read_text()
    node = cluster.get_json("node", cluster.node_name)
    advertised = one(metrics(PLUGIN_URL), "podres_plugin_devices", resource=FUSE, health="Healthy")
    assert advertised == FUSE_REPLICAS
    assert int(node["status"]["allocatable"][FUSE]) == advertised
    assert one(metrics(PLUGIN_URL), "podres_plugin_registered", resource=FUSE) == 1


def test_dashboards_and_alerts_on_the_real_exporter(cluster_prometheus: NodePrometheus) -> None:
    """Every shipped panel query and alert expression evaluates against a Prometheus scraping
    the exporter on the real kubelet; the allocation boards show this node, and the only alert
    whose condition holds is the one this node's state calls for."""
    prom = cluster_prometheus
    empty: set[str] = set()
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        values = grafana_values(board, prom)
        for target in targets(board):
            if not prom.query(substitute(target.expr, values)):
                empty.add(target.key)
    answered = {
        "podres-node-allocation / CPUs per NUMA node by pool / A",
        "podres-node-allocation / CPU map / A",
        "podres-node-allocation / Devices per resource and NUMA node / A",
        "podres-node-allocation / Devices held by containers / A",
        "podres-node-allocation / Memory per NUMA node / A",
        "podres-node-allocation / Pinned memory by container / A",
        "podres-fleet / Nodes and resources / A",
        "podres-node-allocation / Exclusive CPUs by container / A",
        "podres-node-allocation / Pods / A",
        "podres-node-allocation / Containers / A",
        "podres-fleet / Nodes reporting / A",
        "podres-health / Kubelet up / A",
        "podres-health / Collector success / A",
        "podres-health / Targets up / A",
        "podres-health / Plugin registered / A",
    }
    assert not answered & empty, sorted(answered & empty)
    results = {name: prom.query(expr) for name, expr in alert_exprs().items()}
    firing = {name: rows for name, rows in results.items() if rows}
    # The Guaranteed pod holds the node's one allocatable CPU: no shared CPU is left beside
    # the reserved one, which is what this alert is for. Nothing else is wrong here.
    assert set(firing) == {"PodresSharedCPUPoolLow"}
    (row,) = firing["PodresSharedCPUPoolLow"]
    assert row["metric"]["node"] == prom.node
    assert row["metric"]["numa_node"] == "0"
    assert float(row["value"][1]) == 0


class Watcher:
    """Scrapes the exporter every 200 ms in the background and keeps what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float, bool]] = []  # (pods, kubelet_up, guaranteed shown)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                s = metrics(EXPORTER_URL)
            except ClusterError:
                self.errors += 1
                continue
            shown = bool(select(s, "podres_container_exclusive_cpus", pod="guaranteed"))
            self.seen.append((one(s, "podres_pods"), one(s, "podres_kubelet_up"), shown))

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_three_kubelet_restarts(workloads: Cluster) -> None:
    """Through three kubelet restarts the exporter never shows an emptied node and reconnects
    each time; the plugin re-registers within 2 s each time; no pod or allocation is lost."""
    cluster = workloads
    before = wait_for("a settled reading", exporter_sees_workloads, timeout=60, interval=1)
    pods_before = one(before, "podres_pods")
    uids = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.get_json("pods", "-A")["items"]
    }
    registration = cluster.device_plugin_dir / "kubelet.sock"
    with Watcher() as watcher:
        for restart in range(3):
            old_socket = file_identity(str(registration))
            ok_before = one(
                metrics(EXPORTER_URL), "podres_kubelet_requests_total", method="List", code="OK"
            )
            registered_before = one(
                metrics(PLUGIN_URL),
                "podres_plugin_registrations_total",
                resource=FUSE,
                result="success",
            )
            cluster.restart_kubelet()

            def new_socket(old: object = old_socket) -> bool:
                now = file_identity(str(registration))
                return now is not None and now != old

            wait_for("the kubelet's registration socket", new_socket, timeout=60, interval=0.01)
            socket_at = time.monotonic()

            def registered(before: float = registered_before) -> bool:
                return (
                    one(
                        metrics(PLUGIN_URL),
                        "podres_plugin_registrations_total",
                        resource=FUSE,
                        result="success",
                    )
                    > before
                )

            wait_for("the plugin to register again", registered, timeout=30, interval=0.02)
            took = time.monotonic() - socket_at
            assert took < 2.0, f"restart {restart + 1}: plugin registered again after {took:.2f}s"
            wait_for(
                "the kubelet to list the plugin's devices again",
                lambda: fuse_allocatable(cluster) == FUSE_REPLICAS,
                timeout=30,
            )
            wait_for(
                "the exporter to read the restarted kubelet",
                exporter_once(partial(read_again, lists_before=ok_before)),
                timeout=60,
                interval=0.5,
            )
    assert watcher.seen, "the exporter was never scraped during the restarts"
    assert watcher.errors == 0
    emptied = [s for s in watcher.seen if s[0] < pods_before or not s[2]]
    assert not emptied, f"{len(emptied)} scrapes showed fewer pods or lost the Guaranteed pod"
    after = wait_for("a reading after the restarts", exporter_sees_workloads, timeout=60)
    for name in (
        "podres_container_exclusive_cpus",
        "podres_container_device_info",
        "podres_container_memory_bytes",
    ):
        assert select(after, name) == select(before, name), name
    now = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.get_json("pods", "-A")["items"]
    }
    assert now == uids  # no pod replaced
    for pod in cluster.get_json("pods", "-A")["items"]:
        for st in pod["status"]["containerStatuses"]:
            assert st["restartCount"] == 0, pod["metadata"]["name"]


def test_plugin_pod_deleted_then_brought_back(
    workloads: Cluster, cluster_prometheus: NodePrometheus
) -> None:
    """With the plugin's pod gone its held device is allocated_unhealthy on /metrics and the
    alert for it names the pod; the DaemonSet brings the plugin back and health recovers."""
    cluster = workloads
    selector = "app.kubernetes.io/component=device-plugin"
    (old,) = cluster.get_json("pods", "-n", NAMESPACE, "-l", selector)["items"]
    cluster.pause_controllers()  # nothing re-creates the pod until we say so
    try:
        cluster.kubectl(
            "delete",
            "pod",
            "-n",
            NAMESPACE,
            old["metadata"]["name"],
            "--wait=true",
            "--timeout=60s",
        )
        unhealthy = wait_for(
            "the held device to show as allocated_unhealthy",
            exporter_once(lambda m: fuse_state(m, "allocated_unhealthy") == 1),
            timeout=60,
            interval=0.5,
        )
        assert fuse_state(unhealthy, "allocatable") == 0
        alert = alert_exprs()["PodresDeviceUnhealthyWhileAllocated"]
        (row,) = wait_for(
            "the unhealthy-device alert's expression to name the holder",
            lambda: cluster_prometheus.query(alert),
            timeout=30,
            interval=0.5,
        )
        assert {k: row["metric"][k] for k in ("namespace", "pod", "resource", "node")} == {
            "namespace": WORKLOADS,
            "pod": "fuse-user",
            "resource": FUSE,
            "node": cluster.node_name,
        }
        assert select(unhealthy, "podres_container_device_info", pod="fuse-user")
    finally:
        cluster.resume_controllers()
    (new,) = wait_for(
        "the DaemonSet to bring the plugin back",
        lambda: pods_ready(cluster, NAMESPACE, selector),
        timeout=120,
        interval=1,
    )
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    wait_for(
        "the kubelet to list the plugin's devices again",
        lambda: fuse_allocatable(cluster) == FUSE_REPLICAS,
        timeout=30,
    )
    healed = wait_for(
        "health to recover on /metrics",
        exporter_once(
            lambda m: (
                fuse_state(m, "allocated_unhealthy") == 0
                and fuse_state(m, "allocatable") == FUSE_REPLICAS
            )
        ),
        timeout=60,
        interval=0.5,
    )
    assert fuse_state(healed, "allocated") == 1


def test_delete_removes_everything(workloads: Cluster) -> None:
    """``kubectl delete -k`` removes every object the install created, and the plugin takes
    its sockets with it."""
    cluster = workloads
    cluster.kubectl("delete", "namespace", WORKLOADS, "--wait=true", "--timeout=120s")
    cluster.kubectl("delete", "-k", str(PLUGIN_OVERLAY), "--wait=true", "--timeout=120s")
    left = cluster.kubectl(
        "get",
        "all,configmaps,serviceaccounts,servicemonitors,podmonitors,prometheusrules",
        "-A",
        "-l",
        PART_OF,
        "-o",
        "name",
    ).stdout.split()
    assert left == []
    gone = cluster.kubectl("get", "namespace", NAMESPACE, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    wait_for("the daemons' processes to exit", lambda: not daemon_processes(), timeout=60)
    sockets = sorted(p.name for p in cluster.device_plugin_dir.iterdir() if p.is_socket())
    assert sockets == ["kubelet.sock"]
    assert http_get(EXPORTER_URL + "/metrics")[0] == 0  # nothing listens any more
