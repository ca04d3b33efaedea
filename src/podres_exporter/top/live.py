"""The live terminal loop of ``podres top``: the only impure part of the view.

It puts the terminal in cbreak mode (keys arrive one by one, unechoed; Ctrl-C still
interrupts) on the alternate screen, refreshes every interval, redraws on each key,
and always restores the terminal in ``finally`` (quit with ``q``, Ctrl-C, SIGTERM or
an error alike). What a key does is the pure :func:`handle_key`; what a frame shows
is the pure :func:`~podres_exporter.top.render.render`.

Keys: ``q`` quit; ``v``/Tab switch view; ``s``/``S`` next/previous sort column;
``I`` invert the order; ``n``/``p``/``r`` type a namespace/pod/resource filter
(Enter applies, Esc cancels, an empty filter clears it); ``c`` clear the filters;
``w`` wide; ``j``/``k``/arrows, PgUp/PgDn, ``g``/``G`` scroll; space refreshes now.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import termios
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import FrameType
from typing import TextIO

from podres_exporter.core.errors import FetchError
from podres_exporter.top.fetch import Source
from podres_exporter.top.render import Screen, render
from podres_exporter.top.rows import Reading, TopData, advance_baseline, build
from podres_exporter.top.selection import SORT_KEYS, VIEWS, Options
from podres_exporter.top.selection import select as select_rows

_ALT_SCREEN_ON = "\x1b[?1049h\x1b[?25l"  # alternate screen, cursor hidden
_ALT_SCREEN_OFF = "\x1b[?25h\x1b[?1049l"
_ESCAPES = {
    "\x1b[A": "up",
    "\x1b[B": "down",
    "\x1b[5~": "pgup",
    "\x1b[6~": "pgdn",
    "\x1b[H": "home",
    "\x1b[F": "end",
    "\x1bOA": "up",
    "\x1bOB": "down",
}
_PAGE = 10


@dataclass(frozen=True, slots=True)
class State:
    """What the keys change: the options, the scroll offset, a filter being typed."""

    options: Options
    offset: int = 0
    editing: str | None = None  # the filter being typed: namespace, pod or resource
    typed: str = ""
    quit: bool = False
    refresh: bool = False

    def screen(self, title: str) -> Screen:
        prompt = None if self.editing is None else f"{self.editing} filter: {self.typed}"
        return Screen(title=title, offset=self.offset, prompt=prompt)


def split_keys(text: str) -> list[str]:
    """Terminal input as keys: escape sequences (arrows, PgUp ...) become names."""
    keys: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\x1b":
            for seq, name in _ESCAPES.items():
                if text.startswith(seq, i):
                    keys.append(name)
                    i += len(seq)
                    break
            else:
                keys.append("esc")
                i += 1
                # Skip the rest of an unknown CSI sequence.
                if text.startswith("[", i):
                    i += 1
                    while i < len(text) and not text[i].isalpha() and text[i] != "~":
                        i += 1
                    i += 1
            continue
        keys.append(text[i])
        i += 1
    return keys


def _cycle(values: tuple[str, ...], current: str, step: int) -> str:
    return values[(values.index(current) + step) % len(values)]


def _apply_filter(state: State) -> State:
    o = state.options
    typed = state.typed.strip()
    options = Options(
        view=o.view,
        sort=o.sort,
        reverse=o.reverse,
        namespace=typed if state.editing == "namespace" else o.namespace,
        pod=typed if state.editing == "pod" else o.pod,
        resource=typed if state.editing == "resource" else o.resource,
        wide=o.wide,
    )
    return replace(state, options=options, editing=None, typed="", offset=0)


# While a filter is typed: Enter applies, Esc (or Ctrl-G) cancels, Backspace deletes,
# Ctrl-U clears, Ctrl-C quits; printable characters are typed.
_EDIT_KEYS: dict[str, Callable[[State], State]] = {
    "\r": _apply_filter,
    "\n": _apply_filter,
    "esc": lambda s: replace(s, editing=None, typed=""),
    "\x07": lambda s: replace(s, editing=None, typed=""),
    "\x7f": lambda s: replace(s, typed=s.typed[:-1]),
    "\x08": lambda s: replace(s, typed=s.typed[:-1]),
    "\x15": lambda s: replace(s, typed=""),
    "\x03": lambda s: replace(s, quit=True),
}


def _sort(state: State, step: int) -> State:
    o = state.options
    new = _cycle(SORT_KEYS[o.view], o.sort_key, step)
    return replace(state, options=replace(o, sort=new, reverse=False), offset=0)


def _scroll(step: int) -> Callable[[State], State]:
    return lambda s: replace(s, offset=max(0, s.offset + step))


def _edit_filter(name: str) -> Callable[[State], State]:
    return lambda s: replace(s, editing=name, typed=str(getattr(s.options, name)))


_QUIT: Callable[[State], State] = lambda s: replace(s, quit=True)  # noqa: E731 - a table entry
_NEXT_VIEW: Callable[[State], State] = lambda s: replace(  # noqa: E731 - a table entry
    s, options=replace(s.options, view=_cycle(VIEWS, s.options.view, 1)), offset=0
)
_KEYS: dict[str, Callable[[State], State]] = {
    "q": _QUIT,
    "Q": _QUIT,
    "\x03": _QUIT,
    "v": _NEXT_VIEW,
    "\t": _NEXT_VIEW,
    "s": lambda s: _sort(s, 1),
    "S": lambda s: _sort(s, -1),
    "I": lambda s: replace(s, options=replace(s.options, reverse=not s.options.reverse)),
    "n": _edit_filter("namespace"),
    "p": _edit_filter("pod"),
    "r": _edit_filter("resource"),
    "c": lambda s: replace(
        s, options=replace(s.options, namespace="", pod="", resource=""), offset=0
    ),
    "w": lambda s: replace(s, options=replace(s.options, wide=not s.options.wide)),
    "j": _scroll(1),
    "down": _scroll(1),
    "k": _scroll(-1),
    "up": _scroll(-1),
    "pgdn": _scroll(_PAGE),
    "pgup": _scroll(-_PAGE),
    "g": lambda s: replace(s, offset=0),
    "home": lambda s: replace(s, offset=0),
    "G": lambda s: replace(s, offset=1 << 30),
    "end": lambda s: replace(s, offset=1 << 30),
    " ": lambda s: replace(s, refresh=True),
}


def handle_key(state: State, key: str) -> State:
    """The state after ``key`` (a character, or a name from :func:`split_keys`). Pure."""
    if state.editing is not None:
        action = _EDIT_KEYS.get(key)
        if action is not None:
            return action(state)
        if len(key) == 1 and key.isprintable():
            return replace(state, typed=state.typed + key)
        return state
    action = _KEYS.get(key)
    return action(state) if action is not None else state


class _Stop(Exception):
    """SIGTERM: leave the loop through ``finally``, restoring the terminal."""


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise _Stop


def _size(out: TextIO) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(out.fileno())
    except (OSError, ValueError):
        return 80, 24
    return size.columns, size.lines


class _Loop:
    """The live loop's state between refreshes: the data shown and what busy compares with."""

    def __init__(self, source: Source, first: Reading) -> None:
        self.source = source
        self.baseline: Reading | None = None
        self.last = first
        self.data: TopData = build(first, None, source=source.description)

    def refresh(self) -> None:
        try:
            new = self.source.read()
        except FetchError as err:
            self.data = replace(self.data, notice=f"refresh failed, showing older data: {err}")
            return
        self.baseline = advance_baseline(self.baseline, self.last, new)
        self.last = new
        self.data = build(new, self.baseline, source=self.source.description)


def _draw(out: TextIO, loop: _Loop, state: State, title: str, size: tuple[int, int]) -> None:
    width, height = size
    frame = render(loop.data, state.options, width, height, screen=state.screen(title), color=True)
    lines = frame.rstrip("\n").split("\n")[:height]
    out.write("\x1b[H" + "\x1b[K\n".join(lines) + "\x1b[K\x1b[J")
    out.flush()


def _clamp(state: State, data: TopData) -> State:
    containers, devices = select_rows(data, state.options)
    total = len(containers if state.options.view == "containers" else devices)
    return replace(state, offset=min(state.offset, max(0, total - 1)))


def run_live(
    source: Source,
    first: Reading,
    options: Options,
    *,
    interval_s: float,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Show ``source`` live until ``q`` or Ctrl-C; the terminal is restored on every exit."""
    inp = stdin or sys.stdin
    out = stdout or sys.stdout
    fd = inp.fileno()
    title = f"podres top  {source.description}  every {interval_s:g}s"
    saved = termios.tcgetattr(fd)
    previous_term = signal.signal(signal.SIGTERM, _on_sigterm)
    state = State(options)
    loop = _Loop(source, first)
    next_refresh = clock() + interval_s
    try:
        tty.setcbreak(fd)
        out.write(_ALT_SCREEN_ON)
        drawn: tuple[object, ...] = ()
        while not state.quit:
            if clock() >= next_refresh or state.refresh:
                state = replace(state, refresh=False)
                next_refresh = clock() + interval_s
                loop.refresh()
            state = _clamp(state, loop.data)
            size = _size(out)
            if (loop.data, state, size) != drawn:
                _draw(out, loop, state, title, size)
                drawn = (loop.data, state, size)
            wait = max(0.0, min(next_refresh - clock(), 0.5))
            if select.select([fd], [], [], wait)[0]:
                for key in split_keys(os.read(fd, 256).decode(errors="replace")):
                    state = handle_key(state, key)
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        out.write(_ALT_SCREEN_OFF)
        out.flush()
        signal.signal(signal.SIGTERM, previous_term)
    return 0
