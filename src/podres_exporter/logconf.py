"""structlog set-up: JSON lines or readable console lines.

Commands configure it through :func:`podres_exporter.process.configure_logging`.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("auto", "json", "console")


def configure(
    level: str = "info", *, stream: TextIO | None = None, json: bool | None = None
) -> None:
    """Configure structlog once, at the composition root.

    ``json`` defaults to "stream is not a TTY". Levels below ``level`` are dropped
    before any formatting work.
    """
    out = stream if stream is not None else sys.stderr
    as_json = (not out.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
