"""The three sources of ``podres top``; each read ends as a :class:`~.rows.Reading`.

- :class:`LocalSource` (the default): the local kubelet socket and the local telemetry,
  read through the exporter's own :class:`~podres_exporter.exporter.reader.NodeReader` and
  rendered in-process by the exporter's collectors. No exporter needed.
- :class:`ExporterSource` (``--exporter URL``): one GET of the exporter's ``/metrics``,
  parsed by :func:`parse_exposition` (only the metrics top reads).
- :class:`PrometheusSource` (``--prometheus URL``): ``/api/v1/query`` for each metric
  top needs, all at one evaluation time; the busy counter as ``rate()``. Every node
  Prometheus scrapes, or the one ``--node`` names.

Errors become :class:`FetchError` with the exit status the CLI should use: 2 when what
a flag names cannot be reached or used (a missing socket, permission denied, nothing
listening, an unreachable URL) and the message names the flag; 1 when the source
answered but the answer is unusable (an HTTP error, a query error, no podres metrics).
Their messages carry what a source said (an HTTP error body, a query's error, the
kubelet's error text) made :func:`~podres_exporter.core.printable.printable`: they are
printed to a terminal.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from podres_exporter.core.errors import (
    ConfigError,
    FetchError,
    KubeletUnavailable,
)
from podres_exporter.core.printable import printable
from podres_exporter.top.rows import (
    BUSY_COUNTER,
    BUSY_RATIO,
    CPU_SOURCE_STAMP,
    METRICS,
    AnySample,
    Reading,
    Sample,
    cpu_stamp,
)

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from podres_exporter.core.view import NodeView
    from podres_exporter.exporter.settings import Settings
    from podres_exporter.sources.gpu import GpuBackend

HTTP_TIMEOUT_S = 5.0
# Collectors whose metrics top does not show: the local source leaves them off.
UNSHOWN_COLLECTORS = frozenset({"build", "dra", "pci", "net", "infiniband"})
# The samples an exporter's /metrics is read for; only the busy counters for a baseline.
WANTED = frozenset({*METRICS, BUSY_RATIO})
BUSY_ONLY = frozenset({BUSY_COUNTER, BUSY_RATIO, CPU_SOURCE_STAMP})
# How often top asks an exporter whether it has polled again (a GET, no parse).
POLL_CHECK_S = 0.25
_CPU_STAMP_LINE = re.compile(
    rb"^" + CPU_SOURCE_STAMP.encode() + rb'\{[^}\n]*source="cpu"[^}\n]*\}[ \t]*(\S+)', re.M
)
# The window of rate(podres_cpu_busy_seconds_total[...]) asked of Prometheus: two
# scrapes fit in it at scrape intervals up to a minute.
RATE_WINDOW = "2m"


class Source(Protocol):
    """Where top reads its samples."""

    description: str

    def read(self) -> Reading:
        """One reading; raises FetchError."""
        ...

    def close(self) -> None: ...


def _error(message: str, *, exit_code: int) -> FetchError:
    """A FetchError whose message is safe to print: the source's words escaped."""
    return FetchError(printable(message), exit_code=exit_code)


def samples_from_families(families: Iterable[Metric]) -> tuple[Sample, ...]:
    """Metric families (as collectors yield or the parser returns) as plain samples."""
    return tuple(
        Sample(s.name, dict(s.labels), float(s.value)) for fam in families for s in fam.samples
    )


_LABEL_SET = re.compile(
    r'(?:[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*=[ \t]*"(?:[^"\\]|\\.)*"[ \t]*,?)*[ \t]*'
)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"n": "\n", "\\": "\\", '"': '"'}


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), m.group(0)), value)


def _split_labels(inner: str) -> dict[str, str] | None:
    """``a="x",b="y"`` split by its quotes, or None unless that is certain to be right.

    Without a backslash every ``"`` delimits a value, so ``",`` ends one and ``="`` starts
    one: the common case (our exporter's own label sets), at a fraction of the regular
    expressions' cost.
    """
    if "\\" in inner or not inner:
        return None
    body = inner[:-1] if inner[-1] == "," else inner
    if not body or body[-1] != '"':
        return None
    flat = body[:-1].replace('",', '="').split('="')
    pairs = len(flat) // 2
    if len(flat) % 2 or inner.count('"') != len(flat):
        return None
    keys = flat[0::2]
    labels = dict(zip(keys, flat[1::2], strict=True))
    if len(labels) != pairs:
        return None
    names = tuple(keys)
    if names not in _GOOD_NAMES:
        if not all(k.isidentifier() and k.isascii() for k in names):
            return None
        if len(_GOOD_NAMES) < _GOOD_NAMES_KEPT:
            _GOOD_NAMES.add(names)
    return labels


# Label-name tuples already checked (a metric's series share theirs), up to a bound.
_GOOD_NAMES: set[tuple[str, ...]] = set()
_GOOD_NAMES_KEPT = 1024


def _labels(line: str, brace: int, close: int, number: int) -> dict[str, str]:
    """The label set between ``brace`` and ``close``, escapes and spacing allowed."""
    if not _LABEL_SET.fullmatch(line, brace + 1, close):
        raise ValueError(f"line {number}: bad labels in {line[:200]!r}")
    return {
        key: _unescape(value) if "\\" in value else value
        for key, value in _LABEL.findall(line, brace + 1, close)
    }


def _wanted_lines(text: str, wanted: Collection[str]) -> Iterator[tuple[int, str]]:
    """The lines of ``text`` that start with a name in ``wanted`` followed by ``{``, a
    space or the line's end, each with its offset in ``text``; found by one regular
    expression (a scan in C), not a Python loop over every line."""
    names = "|".join(re.escape(n) for n in sorted(wanted, key=len, reverse=True))
    for m in re.finditer(rf"^(?:{names})(?=[{{ ]|$).*", text, re.M):
        yield m.start(), m.group()


def _line_number(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def parse_exposition(text: str, wanted: Collection[str] | None = None) -> list[Sample]:
    """The samples of a Prometheus text exposition, those named in ``wanted`` only if given.

    Much faster than ``prometheus_client.parser`` on a large exporter's ``/metrics``: the
    lines of wanted metrics are found by one regular expression, and a line's label set
    is split at its quotes (or, with escapes, checked and split by two regular
    expressions). Comments and timestamps are ignored; a malformed sample line raises
    ValueError naming it.
    """
    out: list[Sample] = []
    lines: Iterable[tuple[int, str]]
    if wanted is None:
        lines = enumerate(text.split("\n"), 1)
        number: Callable[[int], int] = int
    else:
        lines = _wanted_lines(text, wanted)
        number = partial(_line_number, text)
    for where, line in lines:
        if not line or line[0] == "#" or line.isspace():
            continue
        brace, space = line.find("{"), line.find(" ")
        labels: dict[str, str] = {}
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
            if wanted is not None and name not in wanted:
                continue
            close = line.rfind("}")  # label values may hold "}"; the value after it cannot
            if close < brace:
                raise ValueError(f"line {number(where)}: bad labels in {line[:200]!r}")
            labels = _split_labels(line[brace + 1 : close]) or _labels(
                line, brace, close, number(where)
            )
            rest = line[close + 1 :]
        else:
            name = line[:space] if space != -1 else line
            if wanted is not None and name not in wanted:
                continue
            rest = line[len(name) :]
        fields = rest.split()
        if not name or not fields:
            raise ValueError(f"line {number(where)}: no value in {line[:200]!r}")
        try:
            value_f = float(fields[0])
        except ValueError:
            raise ValueError(f"line {number(where)}: bad value in {line[:200]!r}") from None
        out.append(Sample(name, labels, value_f))
    return out


# ---------------------------------------------------------------- local


def check_socket(path: str) -> None:
    """Fail early, naming ``--kubelet-socket``, when the socket is missing or not ours to use."""
    hint = (
        "pass --kubelet-socket PATH (or PODRES_KUBELET_SOCKET), "
        "or read an exporter with --exporter URL"
    )
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _error(
            f"kubelet socket {path} does not exist (not a Kubernetes node, or the kubelet's "
            f"pod-resources socket is elsewhere): {hint}",
            exit_code=2,
        ) from None
    except PermissionError:
        raise _error(
            f"permission denied reaching kubelet socket {path} (it is root-only: run as root): "
            f"{hint}",
            exit_code=2,
        ) from None
    if not stat.S_ISSOCK(st.st_mode):
        raise _error(f"{path} is not a unix socket: {hint}", exit_code=2)
    if not os.access(path, os.R_OK | os.W_OK):
        raise _error(
            f"permission denied on kubelet socket {path} (it is root-only: run as root): {hint}",
            exit_code=2,
        )


class LocalSource:
    """The local kubelet and telemetry, read by the exporter's own NodeReader in-process.

    ``gpu_backend``: NVML by default ("no data" on a node without NVIDIA driver).
    ``wall_clock`` stamps the readings (the kubelet's, the telemetry's and top's own).
    A failed kubelet read after the first one keeps the last reading with
    ``podres_kubelet_up 0``, as the exporter does; the first must succeed.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        node_name: str,
        gpu_backend: GpuBackend | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        # Deferred: the exporter's machinery (gRPC, the collectors) is for this source only.
        from podres_exporter.exporter.reader import NodeReader, enabled_collectors

        self.settings = settings
        self.description = f"kubelet {settings.kubelet_socket}"
        self.origin = node_name
        check_socket(settings.kubelet_socket)
        # Only the collectors behind the metrics top shows: their sources are all it reads.
        chosen = [c for c in enabled_collectors(settings) if c.name not in UNSHOWN_COLLECTORS]
        self._reader = NodeReader.from_settings(
            settings, gpu_backend=gpu_backend, enabled=chosen, wall_clock=wall_clock
        )
        self._view: NodeView | None = None
        self._generation = 0

    def read(self) -> Reading:
        from podres_exporter import __version__
        from podres_exporter.collectors.kubelet import snapshot_age

        previous = self._view
        seen = self._reader.observe()
        if previous is None:  # the first reading must succeed; later ones keep the last good
            if seen.topology is None:
                raise _error(f"{seen.topology_error} (--path.sysfs)", exit_code=2)
            if seen.reading is None:
                error = seen.kubelet_error
                code = 2 if isinstance(error, KubeletUnavailable) else 1
                raise _error(
                    f"cannot read the kubelet at {self.settings.kubelet_socket} "
                    f"(--kubelet-socket): {error}",
                    exit_code=code,
                )
        self._generation += 1
        view = self._reader.view(seen, generation=self._generation, previous=previous)
        self._view = view
        families = [*self._reader.families(view, __version__), snapshot_age(view, seen.taken_at)]
        # The collectors' samples as they are: copying a large node's costs a second.
        samples = tuple(s for fam in families for s in fam.samples)
        return Reading(samples, seen.taken_at, self.origin)

    def read_with_busy(
        self,
        sample_s: float,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Reading:
        """A reading with each exclusive CPU's busy share over ``sample_s`` (:data:`BUSY_RATIO`).

        Per-CPU time is read from procfs before and ``sample_s`` after the reading starts
        (the kubelet read happens in between): one reading, not two, for ``--once``.
        Without procfs the reading has no busy shares.
        """
        from podres_exporter.core.errors import SourceError
        from podres_exporter.sources.procfs import read_cpu_times

        procfs = self.settings.path_procfs
        try:
            before, started = read_cpu_times(procfs), clock()
        except SourceError:
            return self.read()
        reading = self.read()
        sleep(max(0.0, sample_s - (clock() - started)))
        try:
            after, elapsed = read_cpu_times(procfs), clock() - started
        except SourceError:
            return reading
        ratios: list[AnySample] = []
        for s in reading.samples:
            if s.name != BUSY_COUNTER:
                continue
            try:
                cpu = int(s.labels.get("cpu", ""))
            except ValueError:
                continue
            if cpu not in before.busy or cpu not in after.busy:
                continue
            span = after.total[cpu] - before.total[cpu]
            span = span if span > 0 else elapsed  # a procfs whose clock stands still
            rise = after.busy[cpu] - before.busy[cpu]
            ratios.append(Sample(BUSY_RATIO, s.labels, min(1.0, max(0.0, rise / span))))
        return Reading((*reading.samples, *ratios), reading.at, reading.origin)

    def close(self) -> None:
        self._reader.close()


# ---------------------------------------------------------------- HTTP


def _get(url: str, what: str, timeout_s: float) -> bytes:
    """GET ``url``; FetchError naming ``what`` (e.g. ``the exporter at URL (--exporter)``)."""
    req = urllib.request.Request(url, headers={"Accept": "text/plain, application/json"})  # noqa: S310 - the URL's scheme is checked to be http(s)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310
            body: bytes = resp.read()
            return body
    except urllib.error.HTTPError as err:
        detail = err.read()[:300].decode(errors="replace").strip()
        raise _error(
            f"{what} answered HTTP {err.code} for {url}: {detail or err.reason}", exit_code=1
        ) from err
    except urllib.error.URLError as err:
        raise _error(f"cannot reach {what}: {err.reason}", exit_code=2) from err
    except (TimeoutError, ConnectionError) as err:
        raise _error(f"cannot reach {what}: {err}", exit_code=2) from err


def _http_url(url: str, flag: str) -> urllib.parse.SplitResult:
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{flag} {url!r}: expected http://HOST:PORT")
    return parts


def metrics_url(url: str) -> str:
    """``http://host:9842`` or ``host:9842`` or ``.../metrics`` -> the ``/metrics`` URL."""
    parts = _http_url(url, "--exporter")
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class ExporterSource:
    """A running exporter's ``/metrics`` (``--exporter URL``)."""

    def __init__(
        self, url: str, *, timeout_s: float = HTTP_TIMEOUT_S, clock: Callable[[], float] = time.time
    ) -> None:
        self.url = metrics_url(url)
        self.origin = urllib.parse.urlsplit(self.url).netloc
        self.description = f"exporter {self.url}"
        self._timeout = timeout_s
        self._clock = clock

    def read(self, wanted: Collection[str] = WANTED) -> Reading:
        """The samples top reads (``wanted``: these only); FetchError when there are none."""
        what = f"the exporter at {self.url} (--exporter)"
        body = _get(self.url, what, self._timeout)
        at = self._clock()
        try:
            samples = tuple(parse_exposition(body.decode(), wanted))
        except (ValueError, UnicodeDecodeError) as err:
            raise _error(f"{what} served no Prometheus text: {err}", exit_code=1) from err
        if wanted is WANTED and not any(s.name.startswith("podres_") for s in samples):
            raise _error(f"{what} serves no podres_ metrics: is it a podres exporter?", exit_code=1)
        return Reading(samples, at, self.origin)

    def cpu_stamp(self) -> float | None:
        """When the exporter last read CPU times, from one GET (its body is not parsed)."""
        body = _get(self.url, f"the exporter at {self.url} (--exporter)", self._timeout)
        m = _CPU_STAMP_LINE.search(body)
        try:
            return float(m.group(1)) if m else None
        except ValueError:
            return None

    def read_after_poll(
        self,
        first: Reading,
        wait_s: float,
        *,
        wanted: Collection[str] = WANTED,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Reading:
        """A reading of the exporter's next view (``wanted``: these samples only): taken
        once it has read CPU times since ``first`` (its next poll), or after ``wait_s``
        whatever it serves.

        The exporter's busy counters move only when it polls; two reads of one view say
        nothing about busy shares.
        """
        then = cpu_stamp(first)
        deadline = clock() + wait_s
        while then is not None and clock() < deadline:
            if self.cpu_stamp() != then:
                break
            sleep(min(POLL_CHECK_S, max(0.0, deadline - clock())))
        return self.read(wanted)

    def close(self) -> None:
        pass


class PrometheusSource:
    """Every node a Prometheus server scrapes (``--prometheus URL [--node NAME]``).

    Nodes are told apart by the ``node`` label when the scrape config adds one, else by
    ``instance``; ``node`` filters on either (an ``instance`` also matches by its host).
    """

    def __init__(
        self,
        url: str,
        *,
        node: str = "",
        timeout_s: float = HTTP_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        parts = _http_url(url, "--prometheus")
        path = parts.path.rstrip("/")
        for suffix in ("/api/v1/query", "/graph"):
            path = path.removesuffix(suffix)
        self.base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        self.node = node
        self.origin = parts.netloc
        self.description = f"prometheus {self.base}" + (f" node {node}" if node else "")
        self._timeout = timeout_s
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="podres-top-query")

    def _query(self, promql: str, at: float) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        what = f"Prometheus at {self.base} (--prometheus)"
        body = _get(f"{self.base}/api/v1/query?{q}", what, self._timeout)
        try:
            data = json.loads(body)
        except ValueError as err:
            raise _error(f"{what} answered no JSON to {promql!r}", exit_code=1) from err
        if data.get("status") != "success":
            error = str(data.get("error"))[:300]  # as much of an HTTP error's body
            raise _error(f"{what} rejected {promql!r}: {error}", exit_code=1)
        result = data.get("data", {}).get("result", [])
        return result if isinstance(result, list) else []

    def _wanted(self, labels: dict[str, str]) -> bool:
        if not self.node:
            return True
        instance = labels.get("instance", "")
        return self.node in (labels.get("node"), instance, instance.rpartition(":")[0])

    def read(self) -> Reading:
        at = self._clock()
        queries = {name: name for name in METRICS if name not in (BUSY_COUNTER, CPU_SOURCE_STAMP)}
        queries[BUSY_RATIO] = f"rate({BUSY_COUNTER}[{RATE_WINDOW}])"
        results = dict(
            zip(queries, self._pool.map(partial(self._query, at=at), queries.values()), strict=True)
        )
        samples: list[Sample] = []
        seen: set[str] = set()
        for name, result in results.items():
            for item in result:
                labels = {k: str(v) for k, v in item.get("metric", {}).items() if k != "__name__"}
                seen.add(labels.get("node") or labels.get("instance", ""))
                if self._wanted(labels):
                    samples.append(Sample(name, labels, float(item["value"][1])))
        if not seen:
            raise _error(
                f"Prometheus at {self.base} (--prometheus) has no podres metrics: "
                "does it scrape a podres exporter?",
                exit_code=1,
            )
        if not samples:
            raise _error(
                f"--node {self.node!r}: no such node in Prometheus at {self.base} "
                f"(nodes: {', '.join(sorted(seen))})",
                exit_code=2,
            )
        return Reading(tuple(samples), at, self.origin)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
