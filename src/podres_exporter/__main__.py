"""``python -m podres_exporter`` is the ``podres`` command."""

from podres_exporter.entry import main

raise SystemExit(main())
