"""What ``podres fit`` predicts for a pod on the two-NUMA-node kubelet of :mod:`.numa`,
and what the kubelet itself logs of its choice.

:func:`predict_with_fit` runs ``podres fit --exporter URL -f FILE -o json`` as a user
does, against the exporter beside the kubelet; that exporter must serve the kubelet's
policies (``podres_kubelet_config_info``, :func:`config_exported`), or ``podres fit``
assumes the kubelet's defaults. :func:`best_hints` reads the Topology Manager's chosen
affinity from the kubelet's log, the NUMA nodes to compare the prediction with.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.cluster import ClusterError
from tests.e2e.numa import REPO
from tests.faults.support import PODRES
from tests.support import Samples, run_in_group, select


def fit_command(url: str, manifest: Path) -> list[str]:
    """``podres fit`` against one exporter, asked about the pod in ``manifest``."""
    return [*PODRES, "fit", "--exporter", url, "-f", str(manifest), "-o", "json"]


@dataclass(frozen=True)
class Prediction:
    """What ``podres fit`` said of a pod before it was created: fits or not, the kubelet's
    reason it expects (empty when it fits), the NUMA nodes of the pod's one container
    (None: no preference), and its whole answer (JSON) for the log."""

    fits: bool
    reason: str
    numa: tuple[int, ...] | None
    answer: str


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
        result.stdout,
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
