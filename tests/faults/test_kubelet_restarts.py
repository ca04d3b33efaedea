"""The kubelet restarted again and again under both daemons, run as processes: the exporter
reads it afresh after every restart, the plugin registers again every time, and neither
leaks threads or file descriptors."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from podres_sim import ContainerSpec, PodSpec, SimKubelet, parse_scenario
from tests.deviceplugin.support import accepted, plugin_flags
from tests.faults.support import PODRES, DaemonProcess, Starter, exporter_flags, host_of
from tests.support import sample, wait_until

pytestmark = pytest.mark.slow

VF = "podres.io/rdma-vf"
SCENARIO = f"""
name = "restarts"
seed = 5
[device_plugins]
resources = ["{VF}"]
[node]
numa_nodes = 1
cpus_per_numa_node = 8
reserved_cpus = "0"
[[node.devices]]
resource = "example.com/widget"
ids = ["widget-0", "widget-1"]
numa = 0
[[pods]]
namespace = "hpc"
name = "rank"
[[pods.containers]]
name = "main"
cpu = 2
memory = "1Gi"
devices = {{ "{VF}" = 1, "example.com/widget" = 1 }}
"""
RESTARTS = 50
WARM = 5  # restarts after which the counts are the baseline
# Above the baseline after every restart: a connection or a thread being wound down.
THREAD_SLACK = 4
FD_SLACK = 8


def start_plugin(daemons: Starter, sim: SimKubelet, directory: Path) -> DaemonProcess:
    host = host_of(sim)
    config = directory / "plugin.toml"
    config.write_text(host.plugin_config())
    assert sim.device_manager is not None
    return daemons(
        "plugin",
        [
            *PODRES,
            "plugin",
            *plugin_flags(config, sim.device_manager.directory, host.sysfs),
            "--health-interval",
            "200ms",
        ],
    )


def fresh(exporter: DaemonProcess, since: float, pods: int) -> bool:
    """Whether the exporter serves a reading taken after ``since`` with ``pods`` pods."""
    s = exporter.scrape()
    taken = sample(s, "podres_kubelet_last_success_timestamp_seconds") or 0.0
    return (
        sample(s, "podres_kubelet_up") == 1 and taken > since and sample(s, "podres_pods") == pods
    )


def counts(*daemons: DaemonProcess) -> list[tuple[int, int]]:
    """(threads, fds) of each daemon, once short-lived connections have wound down."""
    time.sleep(0.3)
    return [(d.threads(), d.fds()) for d in daemons]


def test_fifty_kubelet_restarts(
    kubelet: Callable[..., SimKubelet], daemons: Starter, short_dir: Path
) -> None:
    """50 restarts: after each the exporter serves a new reading (with the pod admitted
    just before) and the plugin is registered again; threads and fds stay flat, and each
    daemon logs at most one failure per restart, no traceback."""
    sim = kubelet(parse_scenario(SCENARIO))
    dm = sim.device_manager
    assert dm is not None
    exporter = daemons("exporter", [*PODRES, "export", *exporter_flags(sim)])
    plugin = start_plugin(daemons, sim, short_dir)
    exporter.wait_url()
    plugin.wait_url()
    wait_until(lambda: accepted(dm, VF) and dm.connected(VF), timeout=20)
    wait_until(lambda: sim.node.pod("hpc", "rank").admitted, timeout=20)  # type: ignore[union-attr]
    wait_until(lambda: fresh(exporter, 0.0, len(sim.node.pods)), timeout=20)

    baseline: list[tuple[int, int]] = []
    for i in range(RESTARTS):
        registrations = len(accepted(dm, VF))
        sim.admit(PodSpec.of("churn", f"p{i}", ContainerSpec.of("c", cpu="10m", memory="1Mi")))
        pods = len(sim.node.pods)
        before = time.time()
        sim.restart(warmup=0)
        wait_until(lambda: fresh(exporter, before, pods), timeout=10)  # noqa: B023
        wait_until(lambda: len(accepted(dm, VF)) > registrations and dm.connected(VF), timeout=10)  # noqa: B023
        if i == WARM - 1:
            baseline = counts(exporter, plugin)
    final = counts(exporter, plugin)

    for daemon, (threads0, fds0), (threads, fds) in zip(
        (exporter, plugin), baseline, final, strict=True
    ):
        assert threads <= threads0 + THREAD_SLACK, (daemon.name, threads0, threads)
        assert fds <= fds0 + FD_SLACK, (daemon.name, fds0, fds)
    assert len(exporter.events("kubelet_socket_recreated")) == RESTARTS
    assert len(exporter.events("kubelet_read_failed")) <= RESTARTS
    assert len(plugin.events("plugin_registered")) >= RESTARTS + 1
    for daemon in (exporter, plugin):
        assert not daemon.problems(), daemon.problems()[:5]
        # gRPC's own log lines (a GOAWAY at each restart, at INFO) are not JSON events.
        assert not daemon.foreign_lines(), daemon.foreign_lines()[:3]
        code, _ = daemon.terminate()
        assert code == 0, daemon.tail()
