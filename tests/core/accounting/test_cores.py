"""Free whole physical cores per NUMA node, and threads per core (core/accounting/cores.py)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from podres_exporter.core.accounting import account
from podres_exporter.core.accounting.cores import free_cores, physical_cores, threads_per_core
from podres_exporter.core.model import Allocatable, ContainerAlloc, NodeTopology
from tests.core.accounting.support import pod, reading, topo


def smt(t: NodeTopology, threads: int = 2) -> NodeTopology:
    """``t`` with cores of ``threads`` consecutive CPUs."""
    siblings = {
        c: frozenset(range(c - c % threads, c - c % threads + threads)) for c in t.online_cpus
    }
    return replace(t, thread_siblings=MappingProxyType(siblings))


def test_a_core_is_free_only_when_every_sibling_is_in_the_free_shared_pool() -> None:
    """A core with one sibling exclusive or reserved is not free; the rest are, per node."""
    t = smt(topo())  # 2 nodes x 8 CPUs, cores {0,1} {2,3} ... {14,15}
    r = reading(
        (pod("a", ContainerAlloc("main", cpu_ids=frozenset({3}))),),  # core {2,3} taken
        Allocatable(cpu_ids=frozenset(range(16)) - {0, 9}),  # cores {0,1} and {8,9} reserved
    )
    acc = account(r, t)
    assert free_cores(acc.cpu_assignments, t) == {"0": 2, "1": 3}


def test_an_offline_sibling_is_not_part_of_its_core() -> None:
    """The kubelet's topology knows online CPUs only: a core whose other thread is offline
    is free when its online CPU is."""
    t = smt(topo(offline=frozenset({5})))
    acc = account(reading((), Allocatable(cpu_ids=t.online_cpus)), t)
    assert free_cores(acc.cpu_assignments, t) == {"0": 4, "1": 4}
    assert frozenset({4}) in physical_cores(t)


def test_without_sibling_facts_the_counts_are_unknown_not_zero() -> None:
    """No thread_siblings_list read: None for both facts, never 0."""
    t = topo()
    acc = account(reading((), Allocatable(cpu_ids=t.online_cpus)), t)
    assert free_cores(acc.cpu_assignments, t) is None
    assert threads_per_core(t) is None


def test_threads_per_core_counts_as_the_kubelet_does() -> None:
    """CPUs over cores, rounded down: 2 with SMT, 1 without, 1 for 3 CPUs on 2 cores."""
    assert threads_per_core(smt(topo())) == 2
    assert threads_per_core(smt(topo(), threads=1)) == 1
    assert threads_per_core(smt(topo(nodes=1, per_node=4, offline=frozenset({1})))) == 1


def test_every_numa_node_is_present_with_zero_when_nothing_is_free() -> None:
    """A node with every core taken still has its series, at 0."""
    t = smt(topo())
    r = reading(
        (pod("a", ContainerAlloc("main", cpu_ids=frozenset(range(8, 16)))),),
        Allocatable(cpu_ids=t.online_cpus),
    )
    assert free_cores(account(r, t).cpu_assignments, t) == {"0": 4, "1": 0}
