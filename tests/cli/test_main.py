"""The `podres` command as a user runs it: subprocesses, exit codes, output."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from podres_sim import SimKubelet
from tests.support import http_get, parse_samples, sample, select, wait_until

MakeSim = Callable[..., SimKubelet]
PODRES = [sys.executable, "-m", "podres_exporter"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PODRES, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_snapshot_prints_accounting_and_telemetry_as_json(make_sim: MakeSim) -> None:
    """`podres snapshot` prints every pod, the per-NUMA accounting and the telemetry join."""
    sim = make_sim("demo")
    host = sim.host  # type: ignore[attr-defined]
    proc = run(
        "snapshot",
        "--kubelet-socket",
        str(sim.socket_path),
        "--path.sysfs",
        str(host.sysfs),
        "--path.procfs",
        str(host.procfs),
        "--path.pod-logs",
        str(host.pod_logs),
        "--path.container-logs",
        str(host.container_logs),
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kubelet"]["up"] is True and data["kubelet"]["api_version"] == "v1"
    assert len(data["pods"]) == len(sim.node.pods)
    cpus = data["node"]["cpus"]
    assert set(cpus) == {"0", "1"}
    online = len(sim.node.spec.online_cpus)
    assert (
        sum(cpus[n]["exclusive"] + cpus[n]["shared_free"] + cpus[n]["reserved"] for n in cpus)
        == online
    )
    assert "nvidia.com/gpu" in data["node"]["devices"]
    t = data["telemetry"]
    # The real NVML library on a machine without an NVIDIA driver: no data, not an error.
    assert t["nvml_available"] is False and t["sources"]["gpu"]["ok"] is True
    vfs = {n["interface"]: n["holders"] for n in t["network_functions"]}
    assert any(h and h[0].startswith("net-func/upf-") for h in vfs.values())
    kinds = {d["kind"] for d in t["device_ids"]}
    assert {"gpu", "mig", "pci", "unknown"} <= kinds


def test_snapshot_one_pod(make_sim: MakeSim) -> None:
    """`--pod NS/NAME` lists that pod alone, through Get."""
    sim = make_sim("minimal")
    p = sim.node.pods[0]
    proc = run(
        "snapshot",
        "--kubelet-socket",
        str(sim.socket_path),
        "--path.sysfs",
        str(sim.sysfs_root),  # type: ignore[attr-defined]
        "--pod",
        f"{p.namespace}/{p.name}",
    )
    assert proc.returncode == 0, proc.stderr
    assert [x["name"] for x in json.loads(proc.stdout)["pods"]] == [p.name]
    assert sim.request_count["/v1.PodResourcesLister/Get"] == 1


def test_snapshot_takes_the_kubelet_answer_limits(make_sim: MakeSim) -> None:
    """`podres snapshot --kubelet-max-pods N` reads N pods and counts the rest as an anomaly."""
    sim = make_sim("demo")
    proc = run(
        "snapshot",
        "--kubelet-socket",
        str(sim.socket_path),
        "--path.sysfs",
        str(sim.sysfs_root),  # type: ignore[attr-defined]
        "--kubelet-max-pods",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["pods"]) == 2
    assert data["node"]["anomalies"]["pods_over_limit"] == len(sim.node.pods) - 2


def test_snapshot_without_socket_names_the_flag(tmp_path: Path) -> None:
    """No kubelet socket: exit 2 and one message naming --kubelet-socket."""
    proc = run("snapshot", "--kubelet-socket", str(tmp_path / "none.sock"), "--path.sysfs", "/sys")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "--kubelet-socket" in proc.stderr and "none.sock" in proc.stderr
    assert proc.stdout == ""


def test_bad_flag_value_exits_2() -> None:
    """A bad flag value exits 2 naming the flag."""
    proc = run("export", "--listen-address", "nowhere")
    assert proc.returncode == 2
    assert "--listen-address" in proc.stderr


def test_demo_runs_a_realistic_node_and_stops_cleanly() -> None:
    """`podres demo` prints its URL, serves the demo node's numbers, and exits 0 on SIGTERM."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            *PODRES,
            "demo",
            "--listen-address",
            "127.0.0.1:0",
            "--poll-interval",
            "0.5s",
            "--churn-interval",
            "0.5s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            m = re.search(r"(http://\S+)/metrics", line)
            url = m.group(1) if m else None
        assert url, "demo printed no metrics URL"
        wait_until(lambda: http_get(url + "/readyz")[0] == 200, timeout=30)
        s = parse_samples(http_get(url + "/metrics")[2].decode())
        assert sample(s, "podres_pods") >= 30  # type: ignore[operator]
        cpus = select(s, "podres_node_cpus")
        assert {dict(k)["numa_node"] for k in cpus} == {"0", "1"}
        online = sum(
            v
            for k, v in cpus.items()
            if dict(k)["pool"] in ("exclusive", "shared_free", "reserved")
        )
        assert online >= 32
        assert sum(select(s, "podres_node_cpus", pool="reserved").values()) > 0
        resources = {dict(k)["resource"] for k in select(s, "podres_node_devices")}
        assert {"nvidia.com/gpu", "nvidia.com/gpu.shared"} <= resources
        assert any(r.startswith("nvidia.com/mig-") for r in resources)
        ids = {dict(k)["device_id"] for k in select(s, "podres_container_device_info")}
        assert any("::" in i for i in ids) and any(i.startswith("MIG-") for i in ids)
        assert any(re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", i) for i in ids)
        assert select(s, "podres_node_memory_bytes", memory_type="hugepages-1Gi")
        # The simulated host's telemetry, joined to the same pods.
        assert any(dict(k)["pod"] for k in select(s, "podres_gpu_utilization_ratio"))
        assert any(dict(k)["pod"] for k in select(s, "podres_net_receive_bytes_total"))
        assert sample(s, "podres_nvml_available") == 1
        # Pods asking for the plugin's resource were admitted through the real plugin.
        vfs = wait_until(
            lambda: select(
                parse_samples(http_get(url + "/metrics")[2].decode()),
                "podres_container_device_info",
                resource="podres.io/rdma-vf",
            ),
            timeout=30,
        )
        assert all(dict(k)["namespace"] == "hpc" for k in vfs)
        # Churn: the set of pods changes over time.
        pods0 = {dict(k)["pod"] for k in select(s, "podres_container_device_info")}
        wait_until(
            lambda: (
                {
                    dict(k)["pod"]
                    for k in select(
                        parse_samples(http_get(url + "/metrics")[2].decode()),
                        "podres_container_device_info",
                    )
                }
                != pods0
            ),
            timeout=30,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped" in err
