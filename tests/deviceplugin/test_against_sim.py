"""`podres plugin` as a subprocess against the simulated kubelet: admission through the
plugin, the pod-resources view of what it allocated, health, a kubelet restart, SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podres_exporter.sources.kubelet import KubeletClient
from podres_sim import SimKubelet, parse_scenario
from podres_sim.host import SimHost
from tests.deviceplugin.support import plugin_flags
from tests.support import wait_until

MakeSim = Callable[..., SimKubelet]
VF = "podres.io/rdma-vf"
SCENARIO = f"""
name = "plugin-e2e"
seed = 3
[device_plugins]
resources = ["{VF}"]
resource_grace_s = 1.0
[node]
numa_nodes = 2
cpus_per_numa_node = 8
reserved_cpus = "0"
[[pods]]
namespace = "hpc"
name = "mpi"
[[pods.containers]]
name = "rank"
cpu = 2
memory = "1Gi"
devices = {{ "{VF}" = 2 }}
"""


def start_plugin(sim: SimKubelet, tmp_path: Path) -> subprocess.Popen[str]:
    """The plugin as a process; its log goes to ``plugin_log(tmp_path)``, a file: a pipe
    nobody reads fills up and blocks every plugin thread that logs."""
    host = sim.host  # type: ignore[attr-defined]
    config = tmp_path / "plugin.toml"
    config.write_text(host.plugin_config())
    assert sim.device_manager is not None
    with plugin_log(tmp_path).open("w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "podres_exporter",
                "plugin",
                *plugin_flags(config, sim.device_manager.directory, host.sysfs),
                "--health-interval",
                "200ms",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def plugin_log(tmp_path: Path) -> Path:
    return tmp_path / "plugin.log"


def stop_plugin(proc: subprocess.Popen[str], tmp_path: Path) -> str:
    """SIGTERM, wait, and the plugin's whole log (echoed: pytest shows it on failure)."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    assert proc.stderr is None
    log = plugin_log(tmp_path).read_text()
    sys.stderr.write(log)
    return log


def held(sim: SimKubelet) -> dict[str, tuple[int, ...] | None]:
    r = KubeletClient(str(sim.socket_path)).read()
    return {
        d.device_id: d.numa
        for p in r.pods
        if p.name == "mpi"
        for c in p.containers
        for d in c.devices
    }


def mpi_admitted(sim: SimKubelet) -> bool | None:
    """Whether the MPI pod is admitted; None while the node has no such pod."""
    pod = sim.node.pod("hpc", "mpi")
    return None if pod is None else pod.admitted


def allocatable(sim: SimKubelet) -> set[str]:
    r = KubeletClient(str(sim.socket_path)).read()
    assert r.allocatable is not None
    return {d.device_id for d in r.allocatable.devices if d.resource == VF}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory: plugin socket paths must fit a unix socket's 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="pr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_pods_are_admitted_through_the_real_plugin(short_dir: Path) -> None:
    """The sim kubelet admits the pod through the plugin; List shows what Allocate chose;
    a vanished VF turns unhealthy; a kubelet restart is survived; SIGTERM cleans up."""
    sim = SimKubelet(parse_scenario(SCENARIO), short_dir / "kubelet.sock")
    sim.host = SimHost(sim, short_dir / "host", clock=None)  # type: ignore[attr-defined]
    sim.start()
    tmp_path = short_dir
    dm = sim.device_manager
    assert dm is not None
    assert mpi_admitted(sim) is False, "no plugin yet: rejected at admission"
    proc = start_plugin(sim, tmp_path)
    try:
        wait_until(lambda: mpi_admitted(sim), timeout=20)
        devices = held(sim)
        assert len(devices) == 2 and all(numa == (0,) for numa in devices.values())
        (alloc,) = dm.allocations("hpc/mpi") or [a for a in dm.allocations() if a.resource == VF]
        assert set(alloc.device_ids) == set(devices)
        assert alloc.envs["PCIDEVICE_PODRES_IO_RDMA_VF"].split(",") == sorted(devices)
        assert len(allocatable(sim)) == 7

        # A free VF leaves sysfs: the plugin reports it unhealthy, the kubelet drops it.
        free = sorted(allocatable(sim) - set(devices))[0]
        (sim.host.sysfs / "bus" / "pci" / "devices" / free).unlink()  # type: ignore[attr-defined]
        wait_until(lambda: free not in allocatable(sim), timeout=10)
        assert dm.capacity(VF) == 7 and dm.allocatable(VF) == 6

        # A kubelet restart: sockets deleted, kubelet.sock re-created; the plugin registers
        # again by itself and the pod keeps its devices without a new Allocate.
        registrations = len([r for r in dm.registrations if r.ok])
        sim.restart(warmup=0)
        wait_until(lambda: len([r for r in dm.registrations if r.ok]) > registrations, timeout=10)
        wait_until(lambda: len(allocatable(sim)) == 6, timeout=10)
        assert held(sim) == devices
        assert len([a for a in dm.allocations() if a.resource == VF]) == 1
        assert proc.poll() is None, "no crash"
    finally:
        err = stop_plugin(proc, tmp_path)
        sim.stop()
    assert proc.returncode == 0, err
    assert "signal SIGTERM" in err
    assert not [p for p in dm.directory.iterdir() if p.name.startswith("podres-")], (
        "sockets removed"
    )


def test_kubelet_restart_in_the_middle_of_allocations(short_dir: Path) -> None:
    """Allocate calls in flight while the kubelet restarts: each answers or fails cleanly,
    the plugin re-registers by itself, and the next pod is admitted through it."""
    import threading

    import grpc

    from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as dp
    from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
    from podres_sim import ContainerSpec, PodSpec

    sim = SimKubelet(parse_scenario(SCENARIO), short_dir / "kubelet.sock")
    sim.host = SimHost(sim, short_dir / "host", clock=None)  # type: ignore[attr-defined]
    sim.start()
    dm = sim.device_manager
    assert dm is not None
    proc = start_plugin(sim, short_dir)
    outcomes: list[str] = []
    stop = threading.Event()
    try:
        wait_until(lambda: mpi_admitted(sim), timeout=20)
        endpoint = dm.directory / str(dm.endpoint(VF))
        ids = sorted(allocatable(sim))[:1]

        def hammer() -> None:
            with grpc.insecure_channel(f"unix://{endpoint}") as channel:
                stub = dp_grpc.DevicePluginStub(channel)
                request = dp.AllocateRequest(
                    container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)]
                )
                while not stop.is_set():
                    try:
                        stub.Allocate(request, timeout=2)
                        outcomes.append("OK")
                    except grpc.RpcError as err:
                        outcomes.append(err.code().name)

        worker = threading.Thread(target=hammer)
        worker.start()
        wait_until(lambda: "OK" in outcomes)
        before = len([r for r in dm.registrations if r.ok])
        sim.restart(warmup=0)
        wait_until(lambda: len([r for r in dm.registrations if r.ok]) > before, timeout=10)
        stop.set()
        worker.join(10)
        assert set(outcomes) <= {"OK", "UNAVAILABLE", "CANCELLED"}, set(outcomes)
        assert proc.poll() is None, "the plugin did not crash"
        # Until the new stream delivers, a real kubelet rejects such pods too.
        wait_until(lambda: dm.allocatable(VF) == 7, timeout=10)
        spec = PodSpec.of(
            "hpc", "late", ContainerSpec.of("rank", cpu=1, memory="1Gi", devices={VF: 1})
        )
        admitted = sim.admit(spec)
        assert admitted.admitted, admitted.message
        assert held(sim) and len(allocatable(sim)) == 7
    finally:
        stop.set()
        stop_plugin(proc, short_dir)
        sim.stop()
    assert proc.returncode == 0
