"""``python -m podres_exporter.fit [FLAGS]``: ``podres fit`` on its own (the same parser and
run, without importing the other commands)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from podres_exporter.daemon.options import CommandParser
from podres_exporter.fit.main import add_fit_parser, run_fit


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``podres fit`` flags and run it; returns the exit status."""
    parser = CommandParser(prog="podres")
    add_fit_parser(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(["fit", *(sys.argv[1:] if argv is None else argv)])
    return run_fit(ns, os.environ)


if __name__ == "__main__":
    sys.exit(main())
