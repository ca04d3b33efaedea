"""Hostile names in `podres top`: no control character from the data reaches the terminal.

Names, ids and label values come from the kubelet, an exporter or Prometheus and may hold
escape sequences, line breaks, C1 controls, bidi overrides, zero-width characters and rich
markup. Every frame (tables, headers, a live frame, the notice) and every error message shows
them escaped; ``-o json`` keeps them exact.
"""

from __future__ import annotations

import http.server
import io
import json
import re
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from podres_exporter.core.errors import FetchError
from podres_exporter.core.printable import printable
from podres_exporter.top.fetch import ExporterSource, PrometheusSource
from podres_exporter.top.jsonout import to_json
from podres_exporter.top.live import State, _draw, _Loop
from podres_exporter.top.render import Screen, render
from podres_exporter.top.rows import Reading, build
from podres_exporter.top.selection import Options
from tests.top.support import (
    BACKSPACE,
    BIDI,
    C1,
    CR,
    ESC,
    LINE_SEP,
    MARKUP,
    NEWLINE,
    NUL_DEL,
    OSC8,
    OSC52,
    ZERO_WIDTH,
    hostile_data,
    hostile_reading,
)

SHOWN = {
    ESC: r"kill\x1b[2J\x1b[Hpod",
    OSC8: r"\x1b]8;;http://evil.example/\x07link\x1b]8;;\x07",
    OSC52: r"clip\x1b]52;c;cm0gLXJmIH4K\x07",
    NEWLINE: r"two\nlines",
    CR: r"over\rwrite",
    BACKSPACE: r"back\x08\x08ed",
    C1: r"csi\x9b31m",
    BIDI: r"abc\u202edcba",
    ZERO_WIDTH: r"ze\u200bro\u2060w\ufeff",
    MARKUP: "[bold red]styled[/]",
    LINE_SEP: r"line\u2028sep\x85nel",
    NUL_DEL: r"nul\x00del\x7f",
}

# What the renderer itself may write: SGR styles (colour frames), and the live loop's
# cursor home, erase to end of line and erase below.
OWN_SEQUENCES = re.compile(r"\x1b\[[0-9;]*m|\x1b\[H|\x1b\[K|\x1b\[J")


def assert_terminal_safe(text: str) -> None:
    """Nothing in ``text`` but printable characters, newlines and the renderer's own styles."""
    rest = OWN_SEQUENCES.sub("", text)
    bad = sorted({f"U+{ord(c):04X}" for c in rest if not (c.isprintable() or c == "\n")})
    assert not bad, f"unescaped characters reach the terminal: {bad}"
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", rest)


FRAMES = [
    pytest.param(
        Options(view=view, wide=wide), width, id=f"{view}-{'wide' if wide else 'table'}-{width}"
    )
    for view in ("containers", "devices")
    for wide in (False, True)
    for width in (80, 400)
]


@pytest.mark.parametrize(("options", "width"), FRAMES)
def test_frames_show_hostile_names_escaped(options: Options, width: int) -> None:
    """Tables and headers, both views, at any width: control characters and bidi or
    zero-width ones show escaped, and markup shows literally."""
    data = hostile_data()
    for color in (False, True):
        frame = render(data, options, width, color=color)
        assert_terminal_safe(frame)
        assert max(len(OWN_SEQUENCES.sub("", line)) for line in frame.splitlines()) <= width
    if width < 400:
        return
    frame = render(data, options, width)
    shown = [SHOWN[ESC], SHOWN[BIDI], SHOWN[OSC52], SHOWN[CR]]  # node, resource, NUMA
    shown += [SHOWN[NUL_DEL]] if options.view == "containers" else []  # memory type
    shown += [SHOWN[OSC8], SHOWN[MARKUP], SHOWN[LINE_SEP]]  # pods
    for text in shown:
        assert text in frame, text
    assert f"refresh failed: {SHOWN[ESC]} {SHOWN[NEWLINE]}" in frame


def test_a_styled_live_frame_keeps_markup_literal_and_only_its_own_sequences() -> None:
    """A live frame (title, filter prompt, colour) escapes the data; `[bold red]` in a name
    is text, not a style."""
    data = hostile_data()
    screen = Screen(title=f"podres top  {OSC52}", prompt=f"pod filter: {CR}")
    options = Options(namespace="", pod="")
    frame = render(data, options, 400, 60, screen=screen, color=True)
    assert_terminal_safe(frame)
    plain = OWN_SEQUENCES.sub("", frame)
    assert SHOWN[MARKUP] in plain
    assert f"podres top  {SHOWN[OSC52]}" in plain
    assert f"pod filter: {SHOWN[CR]}_" in plain


def test_filters_and_empty_messages_are_escaped() -> None:
    """A filter typed or passed on the command line shows escaped in the state line and in
    the no-match message."""
    data = hostile_data()
    options = Options(namespace=f"no{ESC}", view="devices")
    frame = render(data, options, 200, 40, screen=Screen(), color=True)
    assert_terminal_safe(frame)
    assert f"namespace=no{SHOWN[ESC]}" in frame


class _Failing:
    """A source whose first read is hostile and whose refreshes fail with a hostile error."""

    description = f"exporter {OSC8}"

    def read(self) -> Reading:
        raise FetchError(f"the exporter said {ESC}{NEWLINE}", exit_code=1)

    def close(self) -> None:
        pass


def test_the_live_loop_writes_only_its_own_sequences() -> None:
    """What the live loop writes to the terminal, a failed refresh's notice included."""
    loop = _Loop(_Failing(), hostile_reading())
    loop.refresh()
    out = io.StringIO()
    _draw(out, loop, State(Options()), f"podres top  {OSC8}", (300, 50))
    written = out.getvalue()
    assert written.startswith("\x1b[H")
    assert_terminal_safe(written)
    assert f"the exporter said {SHOWN[ESC]}{SHOWN[NEWLINE]}" in written


def test_json_keeps_hostile_names_exact() -> None:
    """-o json escapes nothing itself: JSON does, and the names round-trip exactly."""
    data = hostile_data()
    text = json.dumps(to_json(data, Options(view="devices")), indent=2)
    assert_terminal_safe(text)  # JSON's own escapes (ensure_ascii) are terminal-safe
    doc = json.loads(text)
    assert doc["notice"] == f"refresh failed: {ESC} {NEWLINE}"
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert set(nodes) == {ESC, BIDI}
    holders = {(h["namespace"], h["pod"], h["container"])
               for d in nodes[ESC]["devices"] for h in d["holders"]}  # fmt: skip
    assert holders == {
        (ESC, OSC8, NEWLINE),
        (BIDI, MARKUP, C1),
        (ZERO_WIDTH, LINE_SEP, BACKSPACE),
    }
    assert {d["resource"] for d in nodes[ESC]["devices"]} == {OSC52}


@pytest.mark.parametrize("text", list(SHOWN))
def test_printable_escapes_once_and_is_idempotent(text: str) -> None:
    """One function: readable escapes; applying it again changes nothing."""
    assert printable(text) == SHOWN[text]
    assert printable(printable(text)) == printable(text)
    assert printable("gpu-node-a1 \u00e9t\u00e9 \u4e2d") == "gpu-node-a1 \u00e9t\u00e9 \u4e2d"
    assert printable("\U000e0041tag\u00a0") == r"\U000e0041tag\xa0"


# ------------------------------------------------------------------ real HTTP sources


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the class's status and body."""

    status: ClassVar[int] = 200
    body: ClassVar[bytes] = b""
    content_type: ClassVar[str] = "text/plain"

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[type[_Handler]]:
    """A real HTTP server on loopback; the test sets what it answers. ``.url`` on the class."""
    handler = type("Handler", (_Handler,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler
    server.shutdown()
    server.server_close()


def test_an_exporter_with_hostile_label_values_renders_them_escaped(
    serve: type[_Handler],
) -> None:
    """An exporter's /metrics with escape sequences, C1 and bidi in its label values."""
    lines = [
        "# TYPE podres_kubelet_up gauge",
        "podres_kubelet_up 1",
        "# TYPE podres_container_device_info gauge",
    ]
    for ns, pod, dev in [(ESC, OSC8, C1), (BIDI, MARKUP, ZERO_WIDTH)]:
        labels = f'namespace="{ns}",pod="{pod}",container="c",resource="{OSC52}",device_id="{dev}"'
        lines.append(f'podres_container_device_info{{{labels},numa_node="0"}} 1')
    serve.body = ("\n".join(lines) + "\n").encode()
    source = ExporterSource(serve.url)  # type: ignore[attr-defined]
    data = build(source.read(), source=source.description)
    for view in ("containers", "devices"):
        frame = render(data, Options(view=view, wide=True), 400)
        assert_terminal_safe(frame)
        for text in (ESC, BIDI, MARKUP, C1 if view == "devices" else OSC52):
            assert SHOWN[text] in frame


def test_error_messages_from_a_source_are_escaped(serve: type[_Handler]) -> None:
    """An HTTP error body and a Prometheus error text end up in the message `podres top`
    prints: escaped there too."""
    serve.status, serve.body = 500, f"boom {ESC}{C1}{BIDI}".encode()
    with pytest.raises(FetchError) as info:
        ExporterSource(serve.url).read()  # type: ignore[attr-defined]
    assert str(info.value).isprintable()
    assert f"boom {SHOWN[ESC]}{SHOWN[C1]}{SHOWN[BIDI]}" in str(info.value)
    serve.status, serve.content_type = 200, "application/json"
    serve.body = json.dumps({"status": "error", "error": f"bad {OSC52}{NEWLINE}"}).encode()
    prometheus = PrometheusSource(serve.url)  # type: ignore[attr-defined]
    try:
        with pytest.raises(FetchError) as info:
            prometheus.read()
    finally:
        prometheus.close()
    assert str(info.value).isprintable()
    assert f"bad {SHOWN[OSC52]}{SHOWN[NEWLINE]}" in str(info.value)
