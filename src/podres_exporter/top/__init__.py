"""``podres top``: a terminal view of who holds which CPUs, devices and memory.

- :mod:`.rows` (pure): metric samples -> per-node headers, container and device rows;
- :mod:`.selection` (pure): the options, filters and sort orders that pick the rows shown;
- :mod:`.jsonout` (pure): the rows as ``-o json``;
- :mod:`.render` (pure): rows, options and a width -> the text of one frame;
- :mod:`.fetch`: the three sources (local kubelet in-process, an exporter, Prometheus);
- :mod:`.live`: the refresh loop on a terminal, the only impure part of the view;
- :mod:`.main`: the command line (:func:`add_top_parser`, :func:`run_top`).
"""

from __future__ import annotations

from podres_exporter.top.main import add_top_parser, run_top

__all__ = ["add_top_parser", "run_top"]
