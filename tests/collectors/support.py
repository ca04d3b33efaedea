"""Test support for the collectors: hand-built views and one collector's exposition.

The node: CPUs 0-1 on NUMA node 0, 2-3 on node 1. Two containers, ``ml/train/main``
(TRAIN) and ``web/serve/app`` (SERVE). Each constant below is the input of one
collector's exact-text test; :func:`rich_view` puts them all in one view.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors import Collector, RenderContext
from podres_exporter.core.accounting import account
from podres_exporter.core.identity import DeviceIdentity
from podres_exporter.core.ids import Kind
from podres_exporter.core.join import (
    CpuBusy,
    DrmRow,
    GpuHolderUsage,
    GpuRow,
    Held,
    IbRow,
    IdleDevice,
    Joined,
    NetRow,
    PciRow,
    Resolution,
)
from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ClaimDevice,
    ContainerAlloc,
    DeviceRef,
    DynamicResource,
    Holder,
    KubeletReading,
    MemoryBlock,
    NodeTopology,
    PodAlloc,
    RequestStats,
    Support,
)
from podres_exporter.core.podidentity import PodIdentity, merge
from podres_exporter.core.podlabels import Allowlist
from podres_exporter.core.podmeta import OwnerRef, PodDirectory, PodMeta, ResourceHealth, Route
from podres_exporter.core.telemetry import (
    DrmCardReading,
    GpuInventory,
    GpuReading,
    IbPortReading,
    NetReading,
    PciReading,
    SourceStatus,
    Telemetry,
)
from podres_exporter.core.view import NodeView, Snapshot

TOPOLOGY = NodeTopology(frozenset(range(4)), MappingProxyType({0: 0, 1: 0, 2: 1, 3: 1}))
TRAIN = Holder("ml", "train", "main")
SERVE = Holder("web", "serve", "app")
GIB = 1 << 30
TAKEN_AT = 100.0  # the snapshot's time

# ------------------------------------------------------------------ the kubelet

# TRAIN holds CPU 1, GPU-a1 (allocatable, node 0), 1 GiB on node 0 and a DRA claim of
# two devices; SERVE holds GPU-c3 (no longer allocatable) and a claim with no devices
# yet. GPU-b2 (node 1) is free. Allocatable: CPUs 1-3, 4 GiB of memory per node and
# 2 GiB of 1Gi hugepages on node 1.
READING = KubeletReading(
    ApiVersion.V1,
    (
        PodAlloc(
            "ml",
            "train",
            (
                ContainerAlloc(
                    "main",
                    cpu_ids=frozenset({1}),
                    devices=(DeviceRef("nvidia.com/gpu", "GPU-a1", (0,)),),
                    memory=(MemoryBlock("memory", GIB, (0,)),),
                    dynamic_resources=(
                        DynamicResource(
                            "ml",
                            "gpu-claim",
                            (
                                ClaimDevice("gpu.example.com", "node-a", "gpu-0"),
                                ClaimDevice("gpu.example.com", "node-a", "gpu-1"),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        PodAlloc(
            "web",
            "serve",
            (
                ContainerAlloc(
                    "app",
                    devices=(DeviceRef("nvidia.com/gpu", "GPU-c3", (1,)),),
                    dynamic_resources=(DynamicResource("web", "pending-claim"),),
                ),
            ),
        ),
    ),
    Allocatable(
        cpu_ids=frozenset({1, 2, 3}),
        devices=(
            DeviceRef("nvidia.com/gpu", "GPU-a1", (0,)),
            DeviceRef("nvidia.com/gpu", "GPU-b2", (1,)),
        ),
        memory=(
            MemoryBlock("memory", 4 * GIB, (0,)),
            MemoryBlock("memory", 4 * GIB, (1,)),
            MemoryBlock("hugepages-1Gi", 2 * GIB, (1,)),
        ),
    ),
    Support.SERVED,
    taken_at=90.0,
)

# List: 3 OK and 1 Unavailable, 1 within 10 ms, 3 within 100 ms, 0.5 s in all.
# GetAllocatableResources: 2 OK, both within 10 ms, 8 ms in all.
STATS = RequestStats(
    bucket_bounds=(0.01, 0.1),
    counts=MappingProxyType(
        {("List", "OK"): 3, ("List", "Unavailable"): 1, ("GetAllocatableResources", "OK"): 2}
    ),
    duration_buckets=MappingProxyType({"List": (1, 3), "GetAllocatableResources": (2, 2)}),
    duration_sum=MappingProxyType({"List": 0.5, "GetAllocatableResources": 0.008}),
    duration_count=MappingProxyType({"List": 4, "GetAllocatableResources": 2}),
)

# ------------------------------------------------------------------ GPUs

# GPU-a1: a whole GPU held by TRAIN, every field read, throttled by its power cap.
# GPU-b2: a GPU in MIG mode, held by nobody: board-level fields only, no reason active.
# MIG-c3: a MIG instance of GPU-b2 shared by TRAIN and SERVE: memory only.
# GPU-d4: a GPU lost to NVML: identity only.
GPU_ROWS = (
    GpuRow(
        GpuReading(
            uuid="GPU-a1",
            index=0,
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id="0000:17:00.0",
            numa_node=0,
            mig_enabled=False,
            utilization_gpu_ratio=0.5,
            utilization_memory_ratio=0.25,
            memory_used_bytes=1_000_000_000,
            memory_total_bytes=80_000_000_000,
            power_watts=350.5,
            power_limit_watts=700.0,
            energy_joules_total=123456.5,
            temperature_celsius=65.0,
            sm_clock_hz=1_980_000_000.0,
            memory_clock_hz=2_619_000_000.0,
            clock_event_reasons=("sw_power_cap",),
            pcie_tx_bytes_per_second=1_500_000_000.0,
            pcie_rx_bytes_per_second=250_000.0,
            ecc_corrected_total=3,
            ecc_uncorrected_total=0,
            remapped_rows_correctable=1,
            remapped_rows_uncorrectable=0,
            remapped_rows_pending=False,
            remapped_rows_failure=False,
            xid_errors_total=MappingProxyType({79: 1, 13: 2}),
        ),
        Held((TRAIN,)),
    ),
    GpuRow(
        GpuReading(
            uuid="GPU-b2",
            index=1,
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id="0000:9a:00.0",
            numa_node=1,
            mig_enabled=True,
            power_watts=90.0,
            power_limit_watts=700.0,
            energy_joules_total=5000.0,
            temperature_celsius=40.0,
            sm_clock_hz=345_000_000.0,
            memory_clock_hz=2_619_000_000.0,
            clock_event_reasons=(),
            pcie_tx_bytes_per_second=0.0,
            pcie_rx_bytes_per_second=0.0,
            ecc_corrected_total=0,
            ecc_uncorrected_total=0,
            remapped_rows_correctable=0,
            remapped_rows_uncorrectable=0,
            remapped_rows_pending=False,
            remapped_rows_failure=False,
        ),
        Held(),
    ),
    GpuRow(
        GpuReading(
            uuid="MIG-c3",
            index=1,
            name="NVIDIA H100 80GB HBM3 MIG 1g.10gb",
            pci_bus_id="0000:9a:00.0",
            numa_node=1,
            parent_uuid="GPU-b2",
            gpu_instance_id=9,
            compute_instance_id=0,
            memory_used_bytes=500_000_000,
            memory_total_bytes=10_000_000_000,
        ),
        Held((TRAIN, SERVE)),
    ),
    GpuRow(
        GpuReading(
            uuid="GPU-d4",
            index=2,
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id="0000:ca:00.0",
            healthy=False,
            error="GPU is lost",
        ),
        Held(),
    ),
)
GPU_INVENTORY = GpuInventory(
    available=True, driver_version="550.54.15", gpus=tuple(r.gpu for r in GPU_ROWS)
)

# On GPU-a1: two processes of TRAIN and one of no holder; on MIG-c3: one of SERVE.
GPU_USAGE = (
    GpuHolderUsage("GPU-a1", TRAIN, 2, 1_000_000_000, 0.5, 0.2),
    GpuHolderUsage("GPU-a1", None, 1, None, None, None),
    GpuHolderUsage("MIG-c3", SERVE, 1, 500_000_000, None, None),
)

# ------------------------------------------------------------------ sysfs

# A ConnectX PF held by TRAIN, and one of its VFs: free, no NUMA affinity, no link.
PCI_ROWS = (
    PciRow(
        PciReading(
            address="0000:3b:00.0",
            numa_node=0,
            vendor_id="0x15b3",
            device_id="0x101d",
            class_id="0x020000",
            driver="mlx5_core",
            link_speed_gts=16.0,
            link_width=16,
            max_link_speed_gts=16.0,
            max_link_width=16,
            aer_correctable=MappingProxyType({"RxErr": 2, "BadTLP": 0, "TOTAL_ERR_COR": 2}),
            aer_nonfatal=MappingProxyType({"Undefined": 0, "TOTAL_ERR_NONFATAL": 0}),
            temperature_celsius=55.0,
            power_watts=25.5,
        ),
        Held((TRAIN,)),
    ),
    PciRow(
        PciReading(
            address="0000:3b:00.2",
            vendor_id="0x15b3",
            device_id="0x101e",
            class_id="0x020000",
            physfn="0000:3b:00.0",
        ),
        Held(),
    ),
)

# The PF's interface, up at 200 Gbit/s and held by TRAIN; the VF's, down, free, with
# only its received bytes read.
NET_ROWS = (
    NetRow(
        NetReading(
            interface="ens1f0",
            pci_address="0000:3b:00.0",
            operstate="up",
            carrier=True,
            speed_mbps=200_000,
            rx_bytes=1_234_567_890,
            tx_bytes=987_654,
            rx_packets=1000,
            tx_packets=900,
            rx_errors=0,
            tx_errors=1,
            rx_dropped=5,
            tx_dropped=0,
        ),
        Held((TRAIN,)),
    ),
    NetRow(
        NetReading(
            interface="ens1f0v0",
            pci_address="0000:3b:00.2",
            operstate="down",
            rx_bytes=0,
        ),
        Held(),
    ),
)

# The PF's port, active and held by TRAIN; a port down, with no PCI address, free.
IB_ROWS = (
    IbRow(
        IbPortReading(
            device="mlx5_0",
            port=1,
            pci_address="0000:3b:00.0",
            state="ACTIVE",
            rate="200 Gb/sec (4X HDR)",
            counters=MappingProxyType(
                {"port_rcv_data": 1000, "port_xmit_data": 250, "symbol_error": 0, "link_downed": 1}
            ),
        ),
        Held((TRAIN,)),
    ),
    IbRow(IbPortReading(device="mlx5_1", port=1, state="DOWN"), Held()),
)

# An Intel iGPU, free; an AMD GPU held by SERVE.
DRM_ROWS = (
    DrmRow(
        DrmCardReading(
            card="card0",
            pci_address="0000:00:02.0",
            driver="i915",
            frequency_hz=1_300_000_000.0,
            energy_joules_total=1500.25,
        ),
        Held(),
    ),
    DrmRow(
        DrmCardReading(
            card="card1",
            pci_address="0000:c3:00.0",
            driver="amdgpu",
            busy_ratio=0.75,
            vram_used_bytes=2_000_000_000,
            vram_total_bytes=64_000_000_000,
            power_watts=300.0,
            temperature_celsius=70.0,
        ),
        Held((SERVE,)),
    ),
)

# ------------------------------------------------------------------ CPUs and placement

CPU_BUSY = (CpuBusy(1, "0", TRAIN, 12345.5),)
SHARED_POOL_BUSY_RATIO = MappingProxyType({"1": 0.25, "0": 0.5})

# TRAIN is aligned, SERVE straddles. GPU-a1 idle since 40 s; card1 idle since after
# the snapshot (a clock step), so 0. Three resources: one id of each matched or not.
NUMA_ALIGNED = ((TRAIN, True), (SERVE, False))
GPU_A1 = DeviceIdentity(uuid="GPU-a1", gpu="0")
CARD1 = DeviceIdentity(address="0000:c3:00.0", card="card1")
IDLE = (
    IdleDevice("GPU-a1", TRAIN, 40.0, "nvidia.com/gpu", "GPU-a1", GPU_A1),
    IdleDevice("card1", SERVE, 130.0, "amd.com/gpu", "0000:c3:00.0", CARD1),
)
RESOLUTIONS = (
    Resolution("nvidia.com/gpu", "GPU-a1", Kind.GPU, "GPU-a1", True, GPU_A1),
    Resolution("nvidia.com/gpu", "GPU-c3", Kind.GPU, "GPU-c3", False, DeviceIdentity("GPU-c3")),
    Resolution("amd.com/gpu", "0000:c3:00.0", Kind.PCI, "0000:c3:00.0", True, CARD1),
    Resolution("example.com/widget", "widget-0", Kind.UNKNOWN, "widget-0", False),
)

# ------------------------------------------------------------------ pods

TRAIN_UID = "0b9c2f4e-1d2a-4c5b-9e8f-7a6b5c4d3e2f"
SERVE_UID = "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"
# ml/train: a Job's pod on the Pods API, GPU-a1 unhealthy; web/serve: a Deployment's pod
# (its ReplicaSet named <deployment>-<hash>); kube-system/etcd-node: known by its log
# directory alone (served: the Pods API has not synced yet).
POD_DIRECTORIES = {
    Route.PODS_API: PodDirectory(
        Route.PODS_API,
        MappingProxyType(
            {
                TRAIN_UID: PodMeta(
                    "ml",
                    "train",
                    TRAIN_UID,
                    Route.PODS_API,
                    phase="Running",
                    qos_class="Guaranteed",
                    owners=(OwnerRef("Job", "train", controller=True),),
                    labels=MappingProxyType({"team": "vision", "app.kubernetes.io/name": "t"}),
                    resource_health=MappingProxyType(
                        {
                            "main": (
                                ResourceHealth("nvidia.com/gpu", "GPU-a1", "Unhealthy"),
                                ResourceHealth("nvidia.com/gpu", "GPU-a2", "Healthy"),
                            )
                        }
                    ),
                ),
                SERVE_UID: PodMeta(
                    "web",
                    "serve",
                    SERVE_UID,
                    Route.PODS_API,
                    phase="Running",
                    qos_class="Burstable",
                    owners=(OwnerRef("ReplicaSet", "serve-7d9f8b6c5d", controller=True),),
                    labels=MappingProxyType(
                        {"pod-template-hash": "7d9f8b6c5d", "app.kubernetes.io/name": "serve"}
                    ),
                ),
            }
        ),
        synced=False,
        taken_at=1_700_000_000.0,
    ),
    Route.LOG_DIRS: PodDirectory(
        Route.LOG_DIRS,
        MappingProxyType(
            {
                "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a": PodMeta(
                    "kube-system",
                    "etcd-node",
                    "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a",
                    Route.LOG_DIRS,
                ),
                TRAIN_UID: PodMeta("ml", "train", TRAIN_UID, Route.LOG_DIRS),
            }
        ),
        stale=True,
        taken_at=1_699_999_990.0,
    ),
    Route.APISERVER: None,
}
IDENTITY = merge(POD_DIRECTORIES, Allowlist.of(("team", "app.kubernetes.io/*")))

# ------------------------------------------------------------------ sources

# cpu failed without ever succeeding; gpu is fine; sysfs timed out and serves its last read.
SOURCES = MappingProxyType(
    {
        "gpu": SourceStatus(ok=True, duration_s=0.25, last_success=1_700_000_000.0),
        "sysfs": SourceStatus(
            ok=False, duration_s=5.0, stale=True, error="timed out", last_success=1_699_999_990.0
        ),
        "cpu": SourceStatus(ok=False, duration_s=0.001, error="no /proc/stat"),
    }
)

# ------------------------------------------------------------------ views


def node_view(
    reading: KubeletReading | None = None,
    *,
    telemetry: Telemetry | None = None,
    joined: Joined | None = None,
    stats: RequestStats | None = None,
    kubelet_up: bool = True,
    suspect_empty_readings: int = 0,
    identity: PodIdentity | None = None,
) -> NodeView:
    """A view taken at TAKEN_AT on TOPOLOGY: ``reading`` accounted, ``joined`` as given."""
    snapshot = Snapshot(
        1,
        TAKEN_AT,
        TOPOLOGY,
        reading,
        kubelet_up,
        stats=stats or RequestStats(),
        suspect_empty_readings=suspect_empty_readings,
        telemetry=telemetry,
        identity=identity,
    )
    return NodeView(snapshot, account(reading, TOPOLOGY) if reading else None, joined)


def rich_view() -> NodeView:
    """Every input above in one view: each collector has something to say."""
    return node_view(
        READING,
        telemetry=Telemetry(gpus=GPU_INVENTORY, sources=SOURCES),
        joined=Joined(
            gpus=GPU_ROWS,
            gpu_usage=GPU_USAGE,
            pci=PCI_ROWS,
            net=NET_ROWS,
            infiniband=IB_ROWS,
            drm=DRM_ROWS,
            resolutions=RESOLUTIONS,
            cpu_busy=CPU_BUSY,
            shared_pool_busy_ratio=SHARED_POOL_BUSY_RATIO,
            numa_aligned=NUMA_ALIGNED,
            idle=IDLE,
        ),
        stats=STATS,
        identity=IDENTITY,
    )


class _Families:
    """Hands fixed families to a registry."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> list[Metric]:
        return self._families


def exposition(collector: Collector, view: NodeView, version: str = "1.2.3", **context: str) -> str:
    """The text exposition of ``collector``'s families alone for ``view`` (``context``: the
    render context's other facts, ``node``, ``revision``, ``python_version``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(collector.collect(RenderContext(view, version, **context))))
    return generate_latest(registry).decode()
