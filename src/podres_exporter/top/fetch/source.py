"""What every source of ``podres top`` is: the :class:`Source` protocol and its errors.

Errors become :class:`FetchError` with the exit status the CLI should use: 2 when what
a flag names cannot be reached or used (a missing socket, permission denied, nothing
listening, an unreachable URL, a path the server answers 404 for) and the message names
the flag; 1 when the source answered but the answer is unusable (another HTTP error, a
query error, no podres metrics).
Their messages carry what a source said (an HTTP error body, a query's error, the
kubelet's error text) made :func:`~podres_exporter.core.printable.printable`: they are
printed to a terminal.
"""

from __future__ import annotations

from typing import Protocol

from podres_exporter.core.errors import FetchError
from podres_exporter.core.printable import printable
from podres_exporter.top.rows import Reading


class Source(Protocol):
    """Where top reads its samples."""

    description: str

    def read(self) -> Reading:
        """One reading; raises FetchError."""
        ...

    def close(self) -> None: ...


def fetch_error(message: str, *, exit_code: int) -> FetchError:
    """A FetchError whose message is safe to print: the source's words escaped."""
    return FetchError(printable(message), exit_code=exit_code)
