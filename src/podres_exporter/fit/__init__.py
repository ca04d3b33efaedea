"""``podres fit``: where does a pod fit, by the kubelet's own NUMA admission.

- :mod:`.quantity` (pure): Kubernetes quantities in the units admission counts;
- :mod:`.manifest` (pure): a manifest or the shape flags -> the pod's shape;
- :mod:`.state` (pure): one node's metric samples -> the state the kubelet admits against;
- :mod:`.source`: Prometheus (the fleet, and kube-state-metrics' view where it is there),
  an exporter or the local kubelet, through ``podres top``'s sources;
- :mod:`.answer` (pure): per node, admitted or not, where, why, and how many more;
- :mod:`.output` (pure): the answer as a table or JSON;
- :mod:`.main`: the command line (:func:`add_fit_parser`, :func:`run_fit`).

The admission itself is :mod:`podres_exporter.core.topology`.
"""

from __future__ import annotations

from podres_exporter.fit.main import add_fit_parser, run_fit

__all__ = ["add_fit_parser", "run_fit"]
