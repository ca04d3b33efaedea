"""Metric samples for top's tests: one node's CPUs, devices and memory, its GPUs (whole,
time-sliced, MIG), and the readings that carry them.
"""

from __future__ import annotations

from podres_exporter.top.rows import Reading, Sample

GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
GPU_S = "GPU-5555aaaa-0000-0000-0000-000000000002"
MIG_1 = "MIG-11111111-0000-0000-0000-000000000003"
MIG_2 = "MIG-22222222-0000-0000-0000-000000000004"
TRAINER = {"namespace": "ml", "pod": "train-0", "container": "trainer"}
VLLM_A = {"namespace": "inf", "pod": "vllm-a", "container": "vllm"}
VLLM_B = {"namespace": "inf", "pod": "vllm-b", "container": "vllm"}
NOBODY = {"namespace": "", "pod": "", "container": ""}


def s(name: str, value: float, **labels: str) -> Sample:
    return Sample(name, labels, value)


def reading(*samples: Sample, at: float = 100.0, origin: str = "node-a") -> Reading:
    return Reading(tuple(samples), at, origin)


def cpu(n: int, numa: str, pool: str, holder: dict[str, str] = NOBODY) -> Sample:
    return s("podres_cpu_assignment_info", 1, cpu=str(n), numa_node=numa, pool=pool, **holder)


NODE = (
    s("podres_kubelet_up", 1),
    s("podres_snapshot_age_seconds", 3.5),
    s("podres_pods", 3),
    s("podres_containers", 4),
    *(
        s("podres_node_cpus", v, numa_node=n, pool=p)
        for n, p, v in [
            ("0", "exclusive", 4),
            ("0", "shared_free", 3),
            ("0", "reserved", 1),
            ("1", "exclusive", 1),
            ("1", "shared_free", 7),
            ("1", "reserved", 0),
        ]
    ),
    s("podres_node_allocatable_cpus", 7, numa_node="0"),
    s("podres_node_allocatable_cpus", 8, numa_node="1"),
    cpu(0, "0", "reserved"),
    *(cpu(c, "0", "exclusive", TRAINER) for c in (4, 5, 6, 7)),
    cpu(12, "1", "exclusive", TRAINER),
    *(cpu(c, "0", "shared_free") for c in (1, 2, 3)),
    *(
        s("podres_node_devices", v, resource="nvidia.com/gpu", numa_node=n, state=st)
        for n, st, v in [
            ("0", "allocated", 1),
            ("0", "free", 1),
            ("0", "allocated_unhealthy", 0),
            ("1", "allocated", 0),
            ("1", "free", 0),
            ("1", "allocated_unhealthy", 1),
        ]
    ),
    s("podres_node_allocatable_devices", 2, resource="nvidia.com/gpu", numa_node="0"),
    s("podres_node_allocatable_devices", 1, resource="nvidia.com/gpu", numa_node="1"),
    *(
        s("podres_node_memory_bytes", gib * 2**30, numa_node=n, memory_type=t, state=st)
        for n, t, st, gib in [
            ("0", "memory", "allocated", 16),
            ("0", "memory", "free", 48),
            ("0", "hugepages-1Gi", "free", 2),
            ("0,1", "memory", "allocated", 32),
        ]
    ),
    s("podres_node_allocatable_memory_bytes", 64 * 2**30, numa_node="0", memory_type="memory"),
    s(
        "podres_node_allocatable_memory_bytes",
        8 * 2**30,
        numa_node="0",
        memory_type="hugepages-1Gi",
    ),
)


GPUS = (
    # A whole GPU held by one container: the device series carry its holder.
    s("podres_gpu_utilization_ratio", 0.4, uuid=GPU_A, **TRAINER),
    s("podres_gpu_memory_used_bytes", 30 * 2**30, uuid=GPU_A, **TRAINER),
    s("podres_gpu_memory_total_bytes", 80 * 2**30, uuid=GPU_A, **TRAINER),
    s("podres_gpu_holder_sm_utilization_ratio", 0.39, uuid=GPU_A, **TRAINER),
    # A time-sliced GPU: exported once with no holder; holder_* give each holder's share.
    s("podres_gpu_shared", 1, uuid=GPU_S),
    s("podres_gpu_utilization_ratio", 0.12, uuid=GPU_S, **NOBODY),
    s("podres_gpu_memory_used_bytes", 40 * 2**30, uuid=GPU_S, **NOBODY),
    s("podres_gpu_memory_total_bytes", 80 * 2**30, uuid=GPU_S, **NOBODY),
    s("podres_gpu_holder_sm_utilization_ratio", 0.07, uuid=GPU_S, **VLLM_A),
    s("podres_gpu_holder_memory_used_bytes", 18 * 2**30, uuid=GPU_S, **VLLM_A),
    s("podres_gpu_holder_memory_used_bytes", 14 * 2**30, uuid=GPU_S, **VLLM_B),
    # MIG instances: memory but no utilisation (NVML has none for MIG); one free.
    s("podres_gpu_memory_used_bytes", 5 * 2**30, uuid=MIG_1, **TRAINER),
    s("podres_gpu_memory_total_bytes", 10 * 2**30, uuid=MIG_1, **TRAINER),
    s("podres_gpu_memory_used_bytes", 2**30, uuid=MIG_2, **NOBODY),
    s("podres_gpu_memory_total_bytes", 10 * 2**30, uuid=MIG_2, **NOBODY),
    s("podres_gpu_healthy", 1, uuid=GPU_A),
    s("podres_gpu_healthy", 1, uuid=GPU_S),
    s("podres_gpu_healthy", 0, uuid=MIG_2),
)


DEVICES = (
    *(
        s("podres_node_device_info", 1, resource=r, device_id=d, numa_node=n, state=st)
        for r, d, n, st in [
            ("nvidia.com/gpu", GPU_A, "0", "allocated"),
            ("nvidia.com/gpu.shared", f"{GPU_S}::0", "0", "allocated"),
            ("nvidia.com/gpu.shared", f"{GPU_S}::1", "0", "allocated"),
            ("nvidia.com/gpu.shared", f"{GPU_S}::2", "0", "free"),
            ("nvidia.com/mig-1g.10gb", MIG_1, "1", "allocated_unhealthy"),
            ("nvidia.com/mig-1g.10gb", MIG_2, "1", "free"),
            ("example.com/nic", "nic10", "none", "free"),
            ("example.com/nic", "nic2", "none", "free"),
        ]
    ),
    *(
        s("podres_container_device_info", 1, resource=r, device_id=d, numa_node=n, **h)
        for r, d, n, h in [
            ("nvidia.com/gpu", GPU_A, "0", TRAINER),
            ("nvidia.com/gpu.shared", f"{GPU_S}::0", "0", VLLM_A),
            ("nvidia.com/gpu.shared", f"{GPU_S}::1", "0", VLLM_B),
            ("nvidia.com/mig-1g.10gb", MIG_1, "1", TRAINER),
            # Held, yet unknown to node_device_info (no GetAllocatableResources).
            ("example.com/fpga", "fpga0", "0", VLLM_B),
        ]
    ),
    *(
        s("podres_device_resolution_info", 1, resource=r, device_id=d, uuid=p, id_kind=k)
        for r, d, p, k in [
            ("nvidia.com/gpu", GPU_A, GPU_A, "gpu"),
            ("nvidia.com/gpu.shared", f"{GPU_S}::0", GPU_S, "gpu"),
            ("nvidia.com/gpu.shared", f"{GPU_S}::1", GPU_S, "gpu"),
            ("nvidia.com/gpu.shared", f"{GPU_S}::2", GPU_S, "gpu"),
            ("nvidia.com/mig-1g.10gb", MIG_1, MIG_1, "mig"),
            ("nvidia.com/mig-1g.10gb", MIG_2, MIG_2, "mig"),
        ]
    ),
)
