"""Text from peers made safe for a terminal or a console log line, and cut short."""

from __future__ import annotations

__all__ = ["cut", "printable"]


def printable(text: str, keep: str = "") -> str:
    r"""``text`` with each character that is not printable (except those in ``keep``)
    shown as Python writes it.

    Not printable (``str.isprintable``): C0 and C1 controls and DEL (escape sequences,
    line breaks, backspace), format characters (bidi overrides, zero-width ones), line
    and paragraph separators, spaces other than the ASCII one, unassigned code points.
    ``"a\x1b[2J"`` shows as ``a\x1b[2J``, U+202E as ``\u202e``. A backslash stays as it
    is, so the function is idempotent: a message escaped once may pass again unchanged.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in keep else repr(ch)[1:-1] for ch in text)


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters and a count of the rest: ``abc…(+997 chars)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…(+{len(text) - limit} chars)"
