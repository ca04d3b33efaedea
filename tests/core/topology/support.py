"""Nodes and pods the topology tests build from, and hypothesis strategies for them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hypothesis import strategies as st

from podres_exporter.core.topology import (
    Container,
    CpuInfo,
    CpuPolicy,
    DeviceInfo,
    MemoryPolicy,
    NodeState,
    NumaMemory,
    Pod,
    Policies,
    Scope,
    TopologyPolicy,
)

GPU = "nvidia.com/gpu"
GiB = 1 << 30
CPU_M = 1000


def cpus(numa: int, cores_per_numa: int, threads: int = 1) -> tuple[CpuInfo, ...]:
    """CPUs numbered NUMA by NUMA, siblings adjacent; one socket per NUMA node."""
    out = []
    per = cores_per_numa * threads
    for n in range(numa):
        for k in range(per):
            cid = n * per + k
            out.append(CpuInfo(cid, cid // threads, n, n))
    return tuple(out)


def node(
    *,
    numa: int = 2,
    cores: int = 4,
    threads: int = 1,
    policy: TopologyPolicy = TopologyPolicy.SINGLE_NUMA_NODE,
    scope: Scope = Scope.CONTAINER,
    cpu: CpuPolicy = CpuPolicy.STATIC,
    memory: MemoryPolicy = MemoryPolicy.NONE,
    reserved: Iterable[int] = (),
    used: Iterable[int] = (),
    gpus: Mapping[str, frozenset[int]] | None = None,
    used_gpus: Iterable[str] = (),
    mem_per_numa: int = 0,
    mem_free: Mapping[int, int] | None = None,
    **options: object,
) -> NodeState:
    """A node: ``numa`` NUMA nodes of ``cores`` cores x ``threads``; ``used`` CPUs and
    ``used_gpus`` already held; ``gpus`` maps a GPU id to its NUMA nodes."""
    cs = cpus(numa, cores, threads)
    res = frozenset(reserved)
    free = frozenset(c.id for c in cs) - res - frozenset(used)
    devices = {GPU: tuple(DeviceInfo(g, ns) for g, ns in (gpus or {}).items())} if gpus else {}
    free_devices = {GPU: frozenset(gpus or {}) - frozenset(used_gpus)} if gpus else {}
    mem = {}
    if mem_per_numa:
        mem = {
            "memory": {
                n: NumaMemory(mem_per_numa, (mem_free or {}).get(n, mem_per_numa))
                for n in range(numa)
            }
        }
    pols = Policies(topology=policy, scope=scope, cpu=cpu, memory=memory, **options)  # type: ignore[arg-type]
    return NodeState(pols, cs, free, res, devices, free_devices, mem)


def guaranteed(name: str = "c", cpu: int = 1, mem: int = GiB, gpu: int = 0) -> Container:
    """A container whose requests equal its limits (cpu in whole CPUs)."""
    q = {"cpu": cpu * CPU_M, "memory": mem}
    if gpu:
        q[GPU] = gpu
    return Container(name, dict(q), dict(q))


def pod(*containers: Container, init: Iterable[Container] = ()) -> Pod:
    """A pod of these containers."""
    return Pod("p", tuple(containers), tuple(init))


@st.composite
def nodes(draw: st.DrawFn, policy: TopologyPolicy | None = None) -> NodeState:
    """A random 1-4 NUMA node, SMT 1 or 2, partly used, with GPUs and memory."""
    numa = draw(st.integers(1, 4))
    threads = draw(st.sampled_from([1, 2]))
    cores = draw(st.integers(1, 4))
    all_ids = list(range(numa * cores * threads))
    used = draw(st.sets(st.sampled_from(all_ids), max_size=len(all_ids)))
    gpus = {
        f"g{i}": frozenset(draw(st.sets(st.integers(0, numa - 1), max_size=2)))
        for i in range(draw(st.integers(0, 6)))
    }
    used_gpus = draw(st.sets(st.sampled_from(sorted(gpus) or ["none"]), max_size=len(gpus)))
    mem_free = {n: draw(st.integers(0, 4)) * GiB for n in range(numa)}
    return node(
        numa=numa,
        cores=cores,
        threads=threads,
        policy=policy or draw(st.sampled_from(list(TopologyPolicy))),
        scope=draw(st.sampled_from(list(Scope))),
        cpu=draw(st.sampled_from(list(CpuPolicy))),
        memory=draw(st.sampled_from(list(MemoryPolicy))),
        used=used,
        gpus=gpus or None,
        used_gpus=used_gpus,
        mem_per_numa=4 * GiB,
        mem_free=mem_free,
        full_pcpus_only=draw(st.booleans()),
    )


@st.composite
def pods(draw: st.DrawFn) -> Pod:
    """A random pod: 1-3 containers and 0-1 init container, Guaranteed or not."""

    def one(name: str) -> Container:
        cpu_m = draw(st.sampled_from([500, 1000, 2000, 3000, 4000]))
        mem = draw(st.integers(1, 6)) * GiB // 2
        gpu = draw(st.integers(0, 3))
        req = {"cpu": cpu_m, "memory": mem}
        if gpu:
            req[GPU] = gpu
        lim = dict(req) if draw(st.integers(0, 4)) else {GPU: gpu} if gpu else {}
        return Container(name, req, lim)

    n = draw(st.integers(1, 3))
    init = [one("init")] if draw(st.booleans()) else []
    return Pod("p", tuple(one(f"c{i}") for i in range(n)), tuple(init))
