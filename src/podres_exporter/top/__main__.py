"""``python -m podres_exporter.top [FLAGS]``: ``podres top`` on its own."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from podres_exporter.daemon.options import CommandParser
from podres_exporter.top.main import add_top_parser, run_top


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``podres top`` flags and run it; returns the exit status.

    The parser is ``podres top``'s own: an unknown flag gets its usage and the flag it is
    closest to, exit 2. Run as a program (no ``argv``), a one-shot frame ends the process
    once written.
    """
    parser = CommandParser(prog="podres")
    add_top_parser(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(["top", *(sys.argv[1:] if argv is None else argv)])
    return run_top(ns, os.environ, exit_when_done=argv is None)


if __name__ == "__main__":
    sys.exit(main())
