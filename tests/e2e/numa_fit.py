"""What ``podres fit`` predicts for a pod on the two-NUMA-node kubelet of :mod:`.numa`,
and what the kubelet itself logs of its choice.

``podres fit --exporter URL -f FILE -o json`` as a process once the exporter serves the
kubelet's policies (``podres_kubelet_config_info``); with an exporter that does not, the
same steps in this process (fit's node state from the exposition and its manifest reader)
with the policies of the kubelet configuration the harness wrote, admitted by
``core.topology.admit``: without the policies ``podres fit`` would assume the kubelet's
defaults. :func:`best_hints` reads the Topology Manager's chosen affinity from the
kubelet's log, the prediction's NUMA nodes to compare with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from podres_exporter.core.topology import (
    CpuPolicy,
    MemoryPolicy,
    Policies,
    Scope,
    TopologyPolicy,
    admit,
)
from podres_exporter.fit.manifest import pod_from_manifest
from podres_exporter.fit.state import node_facts
from tests.e2e.cluster import ClusterError
from tests.e2e.numa import REPO
from tests.faults.support import PODRES
from tests.support import Samples, run_in_group, select


def fit_command(url: str, manifest: Path) -> list[str]:
    """``podres fit`` against one exporter, asked about the pod in ``manifest``."""
    return [*PODRES, "fit", "--exporter", url, "-f", str(manifest), "-o", "json"]


@dataclass(frozen=True)
class Prediction:
    """What a predictor said of a pod before it was created: fits or not, the kubelet's
    reason it expects (empty when it fits), the NUMA nodes of the pod's one container
    (None: no preference), by whom, and its whole answer for the log."""

    fits: bool
    reason: str
    numa: tuple[int, ...] | None
    by: str
    answer: str


def fit_available() -> bool:
    """Whether this build has ``podres fit``."""
    return run_in_group([*PODRES, "fit", "--help"], timeout=60, cwd=REPO).returncode == 0


def config_exported(samples: Samples) -> bool:
    """Whether the exporter serves the kubelet's policies (``podres_kubelet_config_info``):
    without them ``podres fit`` assumes the kubelet's defaults (Topology Manager none)."""
    return bool(select(samples, "podres_kubelet_config_info"))


def predict_with_fit(url: str, manifest: Path) -> Prediction:
    """``podres fit --exporter URL -f FILE -o json``: exit 0 fits, 1 fits nowhere."""
    result = run_in_group(fit_command(url, manifest), timeout=60, cwd=REPO)
    if result.returncode not in (0, 1):
        raise ClusterError(f"podres fit exited {result.returncode}: {result.stderr.strip()}")
    node = json.loads(result.stdout)["nodes"][0]
    placements = node["placements"]
    numa = placements[0]["numa_nodes"] if placements else None
    return Prediction(
        result.returncode == 0,
        node["reason"],
        None if numa is None else tuple(numa),
        "podres fit",
        result.stdout,
    )


def policies_of(config: Mapping[str, Any]) -> Policies:
    """The admission policies a kubelet configuration (as written here) sets."""
    return Policies(
        topology=TopologyPolicy(config.get("topologyManagerPolicy", "none")),
        scope=Scope(config.get("topologyManagerScope", "container")),
        cpu=CpuPolicy(config.get("cpuManagerPolicy", "none")),
        memory=MemoryPolicy(config.get("memoryManagerPolicy", "None")),
    )


def predict_in_process(exposition: str, manifest: Path, config: Mapping[str, Any]) -> Prediction:
    """``podres fit``'s own steps in this process, for an exporter that does not serve the
    kubelet's policies: the node state it builds from the exposition, with the policies of
    the kubelet configuration ``config``, and the pod it reads from ``manifest``, admitted
    by ``core.topology.admit``."""
    samples = [s for f in text_string_to_metric_families(exposition) for s in f.samples]
    state = replace(node_facts("", samples).state, policies=policies_of(config))
    decision = admit(state, pod_from_manifest(manifest.read_text(), str(manifest)).pod)
    placements = decision.placements
    return Prediction(
        decision.admitted,
        decision.reason.value,
        placements[0].affinity if placements else None,
        "podres fit's node state + core.topology.admit",
        repr(decision),
    )


_BEST_HINT = re.compile(
    r'"Best TopologyHint" bestHint=\{"NUMANodeAffinity":(null|\d+),"Preferred":(true|false)\}'
    r' pod="(?P<pod>[^"]+)" containerName="(?P<container>[^"]+)"'
)


def best_hints(kubelet_log: str) -> dict[tuple[str, str], tuple[int, ...] | None]:
    """(``namespace/pod``, container) -> the NUMA nodes of the Topology Manager's best hint,
    as the kubelet logs it at ``--v=2`` (None: no affinity; the last one per container)."""
    out: dict[tuple[str, str], tuple[int, ...] | None] = {}
    for m in _BEST_HINT.finditer(kubelet_log):
        mask = None if m.group(1) == "null" else int(m.group(1))
        nodes = (
            None if mask is None else tuple(n for n in range(mask.bit_length()) if mask >> n & 1)
        )
        out[(m.group("pod"), m.group("container"))] = nodes
    return out
