"""A frame of ``podres top``: a pure function of the rows, the options and the width.

:func:`render` draws the per-node headers and the table of the selected view with
rich, on a Console that writes to a string: ``width`` columns, no colour unless
asked, nothing read from the environment. The same call draws ``--once`` output,
the golden frames of the tests and, with ``color=True`` and a :class:`Screen`, each
live frame.

Names, ids and label values come from the kubelet, an exporter or Prometheus, and any
of them may hold escape sequences, line breaks or bidi overrides. Every text bound for
the terminal passes :func:`printable` before its width is measured (table cells in
:func:`_table`, header items in :func:`_wrap`, every other line in :func:`_crop`), and
rich is given :class:`~rich.text.Text`, never markup.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.table import Table
from rich.text import Text

from podres_exporter.core.printable import printable
from podres_exporter.top.cells import (
    ELLIPSIS,
    NARROW,
    Col,
    container_cells,
    crop_middle,
    device_cells,
    fmt_age,
    fmt_bytes,
    fmt_pair,
    longest_piece,
    resource_text,
    wrap_cells,
)
from podres_exporter.top.rows import ContainerRow, NodeHeader, TopData
from podres_exporter.top.selection import Options, select, sort_direction

# Re-exported: the tests and the callers of render take them from here.
__all__ = [
    "HELP",
    "Screen",
    "container_cells",
    "crop_middle",
    "device_cells",
    "fmt_age",
    "fmt_bytes",
    "fmt_pair",
    "header_lines",
    "render",
]

# The key help, longest first: the first that fits the width is shown.
HELP = (
    "q quit  v view  s/S sort  I invert  n/p/r filter namespace/pod/resource  c clear  "
    "w wide  j/k scroll",
    "q quit  v view  s sort  I invert  n/p/r filter  c clear  w wide  j/k scroll",
)
_WRAP_FLOOR = 48  # the widest a wrapping column insists on: a MIG UUID, a PCI path
# Header labels, wide and narrow (below NARROW columns).
_LABELS = {
    False: {"cpus": " shared CPUs free", "devices": " devices free", "memory": " memory free"},
    True: {"cpus": " cpu free", "devices": " dev free", "memory": " mem free"},
}


@dataclass(frozen=True, slots=True)
class Screen:
    """What a live frame adds: a title, the scroll offset, the filter being typed."""

    title: str = ""
    offset: int = 0
    prompt: str | None = None


def _crop(text: str, width: int) -> str:
    """One line of ``text`` (made :func:`printable`) cut at ``width`` with an ellipsis."""
    text = printable(text)
    if cell_len(text) <= width:
        return text
    out = ""
    for ch in text:
        if cell_len(out + ch) > width - 1:
            break
        out += ch
    return out + ELLIPSIS


def _wrap(label: str, items: Sequence[str], width: int, hang: int = 0) -> list[str]:
    """``label`` then ``items`` (made :func:`printable`) packed two spaces apart, continued
    ``hang`` past the first."""
    items = [printable(item) for item in items]
    label_width = 10 if width < NARROW else 19
    indent = " " * (label_width + hang)
    lines: list[str] = []
    line = ""
    for item in items:
        candidate = f"{line}  {item}" if line else item
        prefix = label_width if not lines else len(indent)
        if line and prefix + cell_len(candidate) > width:
            lines.append(line)
            line = item
        else:
            line = candidate
    lines.append(line)
    first = f"{label:<{label_width}}"
    return [_crop((first if i == 0 else indent) + text, width) for i, text in enumerate(lines)]


# ---------------------------------------------------------------- header


def header_lines(h: NodeHeader, width: int) -> list[str]:
    """A node's header: status line, free shared CPUs, free devices, free memory."""
    kubelet = {True: "up", False: "DOWN", None: "?"}[h.kubelet_up]
    status = [h.node, f"kubelet {kubelet}", f"data {fmt_age(h.age_s)} old"]
    if h.pods is not None:
        status.append(f"{h.pods} pods, {h.containers or 0} containers")
    lines = [_crop("   ".join(status), width)]
    label = _LABELS[width < NARROW]
    if h.cpus:
        cpu_items = [f"numa{c.numa_node} {c.shared_free}/{c.allocatable}" for c in h.cpus]
        cpu_items.append(
            f"(exclusive {sum(c.exclusive for c in h.cpus)}, "
            f"reserved {sum(c.reserved for c in h.cpus)})"
        )
        lines += _wrap(label["cpus"], cpu_items, width)
    else:
        lines += _wrap(label["cpus"], ["not reported by this kubelet"], width)
    if h.devices:
        dev_items = []
        for d in h.devices:
            name = resource_text(d.resource, dra=d.dra, short=False)
            if d.unallocated is None or d.allocatable is None:
                item = f"{name} {d.allocated} held"
            else:
                item = f"{name} {d.unallocated}/{d.allocatable}"
            if d.allocated_unhealthy:
                item += f" ({d.allocated_unhealthy} held unhealthy)"
            if d.shared:
                item += f" ({d.shared} shared)"
            dev_items.append(item)
        lines += _wrap(label["devices"], dev_items, width)
    if h.memory:
        numas = list(dict.fromkeys(m.numa_node for m in h.memory))
        for i, numa in enumerate(numas):
            mem_items = [f"numa{numa}"] + [
                f"{m.memory_type} {fmt_pair(m.free, m.allocatable)}"
                for m in h.memory
                if m.numa_node == numa
            ]
            hang = cell_len(mem_items[0]) + 2
            lines += _wrap(label["memory"] if i == 0 else "", mem_items, width, hang)
    return lines


# ---------------------------------------------------------------- tables


def _fit(
    cols: Sequence[Col],
    cells: Sequence[Sequence[str]],
    width: int,
    gap: int,
    floors: Sequence[int] = (),
) -> list[int]:
    """Column widths: each column's natural width, the elastic ones shrunk to fit ``width``:
    first down to ``floors`` (where given), then, if still too wide, to their minimum."""
    natural = [
        max([cell_len(c.header)] + [cell_len(row[i]) for row in cells]) for i, c in enumerate(cols)
    ]
    widths = list(natural)
    excess = sum(widths) + gap * (len(cols) - 1) - width
    for tier in (floors, ()):
        while excess > 0:
            # Take one column of the widest elastic column above its minimum, until it fits.
            candidates = [
                i
                for i, c in enumerate(cols)
                if c.elastic
                and widths[i]
                > max(c.min_width, min(cell_len(c.header), 6), 4, tier[i] if tier else 0)
            ]
            if not candidates:
                break
            widest = max(candidates, key=lambda i: (widths[i], -i))
            widths[widest] -= 1
            excess -= 1
    return widths


def _table(
    cols: Sequence[Col],
    cells: Sequence[Sequence[str]],
    width: int,
    styles: Sequence[Callable[[str], str]] | None = None,
) -> Table:
    gap = 1 if width < NARROW else 2
    cells = [[printable(v) for v in row] for row in cells]
    widths = _fit(cols, cells, width, gap)
    cells = [
        [crop_middle(v, w) if c.middle else v for v, c, w in zip(row, cols, widths, strict=True)]
        for row in cells
    ]
    table = Table(
        box=None,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0) if gap == 1 else (0, 1),
        header_style="bold",
        expand=False,
        show_header=True,
    )
    for c, w in zip(cols, widths, strict=True):
        table.add_column(
            c.header,
            width=w,
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if c.right else "left",
        )
    for row in cells:
        if styles is None:
            table.add_row(*(Text(v) for v in row))
        else:
            table.add_row(*(Text(v, style=s(v)) for v, s in zip(row, styles, strict=True)))
    return table


def _plain_table(cols: Sequence[Col], cells: Sequence[Sequence[str]], width: int) -> list[str]:
    """The lines rich draws for :func:`_table` without styles, or [] when rich must lay
    it out (the columns do not fit ``width``). Thousands of rows through rich take
    seconds; this takes milliseconds.
    """
    gap = 1 if width < NARROW else 2
    cells = [[printable(v) for v in row] for row in cells]
    widths = _fit(cols, cells, width, gap)
    if sum(widths) + gap * (len(cols) - 1) > width:
        return []
    sep = " " * gap

    def cell(text: str, c: Col, w: int) -> str:
        if c.middle:
            text = crop_middle(text, w)
        size = cell_len(text)
        if size > w:
            return set_cell_size(text, w - 1) + ELLIPSIS
        pad = " " * (w - size)
        return pad + text if c.right else text + pad

    lines = [sep.join(cell(c.header, c, w) for c, w in zip(cols, widths, strict=True))]
    lines += [
        sep.join(cell(v, c, w) for v, c, w in zip(row, cols, widths, strict=True)) for row in cells
    ]
    return lines


def _wrapped(
    cols: Sequence[Col], cells: Sequence[Sequence[str]], width: int
) -> tuple[list[Col], list[list[str]], list[int]]:
    """``cells`` with the cells of wrapping columns (wide mode's ids) folded onto
    continuation lines to fit ``width``: the columns to lay them out with, the lines,
    and for each line the index of its row."""
    if not any(c.wrap for c in cols):
        return list(cols), [list(row) for row in cells], list(range(len(cells)))
    cells = [[printable(v) for v in row] for row in cells]
    # A wrapping column keeps room for its longest piece (an id, mostly; up to a cap) while
    # other columns can shrink; only then are its ids folded over lines.
    floors = [
        min(_WRAP_FLOOR, max((longest_piece(row[i]) for row in cells), default=0)) if c.wrap else 0
        for i, c in enumerate(cols)
    ]
    widths = _fit(cols, cells, width, 1 if width < NARROW else 2, floors)
    lines, owner = wrap_cells(cols, cells, widths)
    # Folded to their width, the wrapping columns are not shrunk again when laid out.
    return [replace(c, elastic=False) if c.wrap else c for c in cols], lines, owner


def _style(value: str) -> str:
    if value in ("DOWN", "NO", "UNHEALTHY"):
        return "bold red"
    if value == "free":
        return "green"
    return ""


def _empty_message(data: TopData, options: Options) -> str:  # noqa: PLR0911 - one reason each
    """Why the table has no rows."""
    if not data.nodes:
        return "no data: the source returned no podres metrics"
    filters = options.filters()
    if options.view == "devices":
        if any(n.devices for n in data.nodes):
            return "no devices match the filters (" + _filter_text(filters) + ")"
        return "no devices on this node: the kubelet reports no device plugin resources"
    if any(n.containers for n in data.nodes):
        return "no containers match the filters (" + _filter_text(filters) + ")"
    headers = [n.header for n in data.nodes]
    if all(h.pods is None for h in headers):
        if any(h.kubelet_up is False for h in headers):
            return "no pods on this node known yet: the kubelet has not answered (kubelet DOWN)"
        return "no pods on this node known (the source serves no pod counts)"
    pods = sum(h.pods or 0 for h in headers)
    if pods == 0:
        return "no pods on this node: the kubelet lists none"
    return (
        "no pods on this node hold exclusive CPUs, devices, DRA claims or pinned memory "
        f"({pods} pods, all in the shared CPU pool)"
    )


def _unplaced_notes(data: TopData) -> list[str]:
    """How many containers the headers count have no row, and how to list them."""
    if not any(n.containers for n in data.nodes):
        return []  # the empty message says why
    hidden = sum(n.unplaced or 0 for n in data.nodes)
    if not hidden:
        return []
    return [
        f"+ {hidden} more container{'s hold' if hidden > 1 else ' holds'} nothing placed "
        "(shared CPU pool only): not listed",
        "  list every pod: kubectl get pods -A -o wide",
    ]


def _footnotes(
    data: TopData, shown: Sequence[ContainerRow], options: Options, width: int
) -> list[str]:
    """What the marks in the containers shown mean, and what the table leaves out."""
    notes = _unplaced_notes(data) if options.view == "containers" else []
    if options.view == "containers" and any(r.gpu_shared for r in shown):
        notes.append("* its share of a GPU that other containers hold too")
    if options.view == "containers" and width < NARROW and any(r.aligned is False for r in shown):
        notes.append("! not NUMA-aligned: its CPUs, devices and memory are on different nodes")
    return [_crop(n, width) for n in notes]


def _filter_text(filters: Sequence[tuple[str, str]]) -> str:
    return " ".join(f"{k}={v}" for k, v in filters) or "none"


def _state_line(options: Options) -> str:
    """View, sort column and direction, filters: what the keys have changed."""
    parts = [
        f"view {options.view}",
        f"sort {options.sort_key} ({sort_direction(options)})",
        f"filter {_filter_text(options.filters())}",
    ]
    if options.wide:
        parts.append("wide")
    return "   ".join(parts)


def _top_lines(data: TopData, options: Options, width: int, screen: Screen | None) -> list[str]:
    """Above the table: a live frame's title, the notice, the node headers, the state line."""
    top: list[str] = []
    if screen is not None:
        top.append(_crop(screen.title or "podres top", width))
    if data.notice:
        top.append(_crop(f"! {data.notice}", width))
    for n in data.nodes:
        if top:
            top.append("")
        top += header_lines(n.header, width)
    if screen is not None:
        top += ["", _crop(_state_line(options), width)]
    return top


def _tail_lines(width: int, screen: Screen | None) -> list[str]:
    """The last lines of a live frame: the filter being typed, the key help."""
    tail: list[str] = []
    if screen is not None:
        if screen.prompt is not None:
            tail.append(_crop(screen.prompt + "_", width))
        tail.append(_crop(next((h for h in HELP if len(h) <= width), HELP[-1]), width))
    return tail


def render(
    data: TopData,
    options: Options,
    width: int,
    height: int | None = None,
    *,
    screen: Screen | None = None,
    color: bool = False,
) -> str:
    """The frame for ``data`` as text, ``width`` columns wide (and at most ``height`` lines).

    Pure: the same arguments give the same text. With ``height`` the table is cut to fit
    (from ``screen.offset``) and says which rows it shows. ``color`` adds ANSI styles.
    """
    width = max(width, 40)
    top = _top_lines(data, options, width, screen)
    multi = len(data.nodes) > 1
    containers, devices = select(data, options)
    if options.view == "devices":
        cols, cells = device_cells(devices, wide=options.wide, multi_node=multi, width=width)
    else:
        cols, cells = container_cells(containers, wide=options.wide, multi_node=multi, width=width)
    cols, cells, owner = _wrapped(cols, cells, width)
    tail = _tail_lines(width, screen)
    first, shown = 0, cells
    position: list[str] = []
    if height is not None and cells:
        notes = len(_footnotes(data, containers, options, width))
        room = max(1, height - len(top) - notes - len(tail) - 3)  # blank, header, position
        first = max(0, min(screen.offset if screen else 0, max(0, len(cells) - room)))
        if len(cells) > room:
            shown = cells[first : first + room]
            what = "lines" if len(cells) > len(set(owner)) else "rows"
            position = [f"{what} {first + 1}-{first + len(shown)} of {len(cells)} (j/k to scroll)"]
    visible = (
        [containers[i] for i in sorted(set(owner[first : first + len(shown)]))]
        if options.view == "containers"
        else []
    )
    bottom = position + _footnotes(data, visible, options, width) + tail
    console = Console(
        width=width,
        file=io.StringIO(),
        color_system="standard" if color else None,
        force_terminal=color,
        force_jupyter=False,
        force_interactive=False,
        legacy_windows=False,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
        record=False,
        _environ={},
    )
    for line in top:
        console.print(Text(line, style=_status_style(line)) if color else Text(line))
    console.print()
    plain = [] if color or not cells else _plain_table(cols, shown, width)
    if plain:
        assert isinstance(console.file, io.StringIO)
        console.file.write("\n".join(plain) + "\n")
    elif cells:
        styles = [_style] * len(cols) if color else None
        console.print(_table(cols, shown, width, styles))
    else:
        console.print(Text(printable(_empty_message(data, options))))
    for line in bottom:
        console.print(Text(line))
    assert isinstance(console.file, io.StringIO)
    text = console.file.getvalue()
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def _status_style(line: str) -> str:
    return "bold red" if "kubelet DOWN" in line or line.startswith("! ") else ""
