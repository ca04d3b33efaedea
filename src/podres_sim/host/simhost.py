"""The simulated node's host: hardware and host files beside the simulated kubelet.

For the demo and the tests, everything the exporter reads besides the kubelet:
- a sysfs tree under ``sys/``: the CPU topology and a device tree (SR-IOV VFs with
  their interfaces and statistics, NVIDIA PCI functions) derived from the scenario;
- a procfs under ``proc/``: ``stat`` with per-CPU time that moves (exclusive CPUs
  busy, the shared pool half busy) and ``<pid>/cgroup`` for every GPU process;
- the kubelet's log names under ``log/pods`` and ``log/containers``, which map
  container IDs to containers, and a pod cgroup (systemd driver, cgroup v2) under
  ``sys/fs/cgroup/kubepods.slice`` for every running pod: a finished pod keeps its log
  directory and loses its cgroup, as on a real node;
- a fake NVML (:class:`~podres_sim.nvml.fake.FakeNvml`) with the
  scenario's GPUs and MIG devices, each running processes of its holders;
- the kubelet's own files under ``kubelet/`` (:mod:`podres_sim.host.kubeletfiles`): its
  configuration and its device-manager checkpoint, which follows the pods.

:meth:`SimHost.refresh` follows the simulated kubelet's pods (churn included) and
advances the counters; the demo calls it every second.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from podres_exporter.core.ids import resolve
from podres_exporter.core.model import Holder
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.host.counters import bump_counters
from podres_sim.host.devtree import interface_name, write_device_tree
from podres_sim.host.hardware import NetStats, NicPf, NicVf
from podres_sim.host.kubeletfiles import write_device_checkpoint, write_kubelet_config
from podres_sim.host.layout import devices_for_scenario
from podres_sim.host.topology import write_sysfs
from podres_sim.kubelet import PodState, SimKubelet
from podres_sim.nvml import FakeNvml, nvml_for_devices
from podres_sim.scenario import Scenario

_TICKS = 100  # USER_HZ of the simulated /proc/stat
_MLX_VENDOR = "0x15b3"  # Mellanox
_MLX_VF = "0x101e"  # ConnectX-6 Dx virtual function


def pod_uid(namespace: str, name: str) -> str:
    """A stable pod UID for a simulated pod."""
    return str(uuid.UUID(hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:32]))


def container_id(namespace: str, pod: str, container: str) -> str:
    """A stable 64-hex container ID for a simulated container."""
    return hashlib.sha256(f"{namespace}/{pod}/{container}".encode()).hexdigest()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # readers never see a half-written file


def scenario_nvml(scenario: Scenario, *, clock: Callable[[], float] | None = None) -> FakeNvml:
    """The fake NVML of ``scenario``'s ``nvidia.com/*`` devices: the same GPUs (UUIDs,
    MIG devices, processes) every time for the same scenario, so that a process of its
    own (an exporter under test) can build the NVML of a node simulated elsewhere."""
    gpu_resources: dict[str, list[tuple[str, tuple[int, ...] | None]]] = defaultdict(list)
    for d in scenario.node.devices:
        if d.resource.startswith("nvidia.com/"):
            gpu_resources[d.resource].append((d.id, d.numa))
    nvml = nvml_for_devices(gpu_resources, seed=scenario.seed, clock=clock)
    # One whole GPU sits idle with its memory still allocated: reserved hardware that
    # nobody uses, what podres_held_device_idle_seconds is for.
    whole = [d.id for d in scenario.node.devices if d.resource == "nvidia.com/gpu"]
    if whole:
        idle = nvml.gpu(whole[-1])
        idle.load = 0.0
        idle.utilization_gpu = idle.utilization_memory = 0
        idle.samples.clear()
    return nvml


def _registered_devices(scenario: Scenario, plugin_hardware: list[NicPf]) -> dict[str, list[str]]:
    """Every device the kubelet registers: the scenario's (healthy or not) and the VFs the
    device plugin advertises for each of its resources."""
    registered: dict[str, list[str]] = defaultdict(list)
    for d in scenario.node.devices:
        registered[d.resource].append(d.id)
    for resource, pf in zip(scenario.plugin_resources, plugin_hardware, strict=False):
        registered[resource].extend(vf.address for vf in pf.vfs)
    return dict(registered)


class SimHost:
    """Host files and a fake NVML for the node of ``sim``, under ``root``."""

    def __init__(
        self,
        sim: SimKubelet,
        root: str | Path,
        *,
        seed: int | None = None,
        clock: Callable[[], float] | None = time.monotonic,
    ) -> None:
        self.sim = sim
        self.root = Path(root)
        self.sysfs = self.root / "sys"
        self.procfs = self.root / "proc"
        self.pod_logs = self.root / "log" / "pods"
        self.container_logs = self.root / "log" / "containers"
        self.kubelet_config = self.root / "kubelet" / "config.yaml"
        self.device_checkpoint = (
            self.root / "kubelet" / "device-plugins" / "kubelet_internal_checkpoint"
        )
        scenario = sim.scenario
        self._rng = random.Random(scenario.seed if seed is None else seed)
        write_sysfs(scenario.node, self.sysfs)
        plugin_hardware = self._plugin_hardware()
        write_device_tree(self.sysfs, [*devices_for_scenario(scenario), *plugin_hardware])
        write_kubelet_config(scenario, self.kubelet_config)
        self._registered = _registered_devices(scenario, plugin_hardware)
        self.nvml = scenario_nvml(scenario, clock=clock)
        self._busy = dict.fromkeys(scenario.node.online_cpus, 0.0)
        self._total = dict.fromkeys(scenario.node.online_cpus, 0.0)
        self._lock = threading.Lock()
        self.refresh(seconds=0.0)

    def _plugin_hardware(self) -> list[NicPf]:
        """Hardware for the scenario's device-plugin resources to discover.

        The k-th plugin resource gets one Mellanox ConnectX PF at bus 0xc4 + k with
        seven SR-IOV VFs, on NUMA node k modulo the node's NUMA count; the plugin
        finds them by vendor and device id (see :meth:`plugin_config`).
        """
        spec = self.sim.scenario.device_plugins
        out = []
        for k, _resource in enumerate(spec.resources if spec else ()):
            bus = 0xC4 + k
            vfs = tuple(
                NicVf(
                    f"0000:{bus:02x}:00.{f}",
                    interface_name(f"0000:{bus:02x}:00.{f}"),
                    driver="mlx5_core",
                    vendor_id=_MLX_VENDOR,
                    device_id=_MLX_VF,
                    stats=NetStats(rx_bytes=self._rng.randrange(1 << 30)),
                )
                for f in range(1, 8)
            )
            out.append(
                NicPf(
                    f"0000:{bus:02x}:00.0",
                    interface_name(f"0000:{bus:02x}:00.0"),
                    numa=k % self.sim.scenario.node.numa_nodes,
                    vfs=vfs,
                    driver="mlx5_core",
                    vendor_id=_MLX_VENDOR,
                    device_id="0x101d",
                )
            )
        return out

    def plugin_config(self) -> str:
        """A ``podres plugin`` resource file advertising :meth:`_plugin_hardware`."""
        spec = self.sim.scenario.device_plugins
        blocks = []
        for k, resource in enumerate(spec.resources if spec else ()):
            blocks.append(
                f'[[resource]]\nname = "{resource}"\n'
                f'[resource.discover]\nkind = "pci"\nvendor = "{_MLX_VENDOR}"\n'
                f'device = "{_MLX_VF}"\n# PF bus 0x{0xC4 + k:02x}\n'
            )
        return '[plugin]\nhealth_interval = "500ms"\n\n' + "\n".join(blocks)

    def gpu_backend(self) -> NvmlBackend:
        """An NVML backend over this host's fake NVML."""
        return NvmlBackend(self.nvml)

    def refresh(self, seconds: float = 1.0) -> None:
        """Follow the kubelet's pods and advance every counter by ``seconds``."""
        with self._lock:
            pods = self.sim.node.pods
            self._write_logs(pods)
            self._write_cgroups(pods)
            self._write_stat(pods, seconds)
            self._write_gpu_processes(pods)
            write_device_checkpoint(self.device_checkpoint, self._registered, pods, pod_uid)
            if seconds > 0:
                bump_counters(self.sysfs, self._rng, seconds=seconds)

    def advance_cpu_times(self, seconds: float = 1.0) -> None:
        """Only ``/proc/stat``, ``seconds`` on: what the busy shares read, cheaply on a
        node of thousands of pods (``refresh`` rewrites every pod's files)."""
        with self._lock:
            self._write_stat(self.sim.node.pods, seconds)

    def _write_logs(self, pods: tuple[PodState, ...]) -> None:
        pod_dirs, logs = set(), set()
        for p in pods:
            ns, name = p.namespace, p.name
            pod_dirs.add(f"{ns}_{name}_{pod_uid(ns, name)}")
            for c in p.containers:
                logs.add(f"{name}_{ns}_{c.name}-{container_id(ns, name, c.name)}.log")
        for directory, wanted in ((self.pod_logs, pod_dirs), (self.container_logs, logs)):
            directory.mkdir(parents=True, exist_ok=True)
            have = {e.name for e in directory.iterdir()}
            for name in have - wanted:
                target = directory / name
                if target.is_dir():
                    target.rmdir()
                else:
                    target.unlink()
            for name in wanted - have:
                if directory is self.pod_logs:
                    (directory / name).mkdir()
                else:
                    (directory / name).touch()

    def _write_cgroups(self, pods: tuple[PodState, ...]) -> None:
        """A pod cgroup per running pod, under its QoS slice; others removed."""
        root = self.sysfs / "fs" / "cgroup" / "kubepods.slice"
        wanted: set[Path] = set()
        for p in pods:
            if not p.active:
                continue
            uid = pod_uid(p.namespace, p.name).replace("-", "_")
            qos = p.qos.lower()
            if qos == "guaranteed":
                wanted.add(root / f"kubepods-pod{uid}.slice")
            else:
                wanted.add(root / f"kubepods-{qos}.slice" / f"kubepods-{qos}-pod{uid}.slice")
        for slice_ in ("kubepods-burstable.slice", "kubepods-besteffort.slice"):
            (root / slice_).mkdir(parents=True, exist_ok=True)
        have = set(root.glob("kubepods-pod*.slice")) | set(root.glob("*/kubepods-*-pod*.slice"))
        for gone in have - wanted:
            gone.rmdir()
        for path in wanted - have:
            path.mkdir(parents=True)

    def _write_stat(self, pods: tuple[PodState, ...], seconds: float) -> None:
        exclusive = {cpu for p in pods if p.active for c in p.containers for cpu in c.cpu_ids}
        reserved = set(self.sim.scenario.node.reserved_cpus)
        for cpu in self._busy:
            if cpu in exclusive:
                load = self._rng.uniform(0.55, 1.0)
            elif cpu in reserved:
                load = self._rng.uniform(0.05, 0.25)
            else:
                load = self._rng.uniform(0.25, 0.6)
            self._busy[cpu] += load * seconds
            self._total[cpu] += seconds
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
        for cpu in sorted(self._busy):
            busy = int(self._busy[cpu] * _TICKS)
            idle = int(self._total[cpu] * _TICKS) - busy
            lines.append(f"cpu{cpu} {busy} 0 0 {idle} 0 0 0 0 0 0")
        _write(self.procfs / "stat", "\n".join(lines) + "\n")

    def _write_gpu_processes(self, pods: tuple[PodState, ...]) -> None:
        """Give each GPU process a cgroup of a container holding its device."""
        holders: dict[str, list[Holder]] = defaultdict(list)
        for p in pods:
            if not p.active:
                continue
            for c in p.containers:
                for d in c.devices:
                    key = resolve(d.resource, d.device_id).key.lower()
                    holders[key].append(Holder(p.namespace, p.name, c.name))
        devices: list[tuple[str, list[int]]] = []
        for gpu in self.nvml.gpus:
            devices.append((gpu.uuid, [x.pid for x in gpu.processes]))
            for mig in gpu.mig_devices:
                if mig is not None:
                    devices.append((mig.uuid, [x.pid for x in mig.processes]))
        for device, pids in devices:
            owners = sorted(set(holders.get(device.lower(), [])))
            for i, pid in enumerate(sorted(pids)):
                if owners:
                    h = owners[i % len(owners)]
                    uid = pod_uid(h.namespace, h.pod).replace("-", "_")
                    path = (
                        f"0::/kubepods.slice/kubepods-pod{uid}.slice/"
                        f"cri-containerd-{container_id(*h)}.scope"
                    )
                else:
                    path = "0::/system.slice/nvidia-persistenced.service"
                _write(self.procfs / str(pid) / "cgroup", path + "\n")
