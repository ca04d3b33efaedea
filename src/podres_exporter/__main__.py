"""``python -m podres_exporter`` is the ``podres`` command."""

from podres_exporter.cli import main

raise SystemExit(main())
