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
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.table import Table
from rich.text import Text

from podres_exporter.core.kube import BINARY_SUFFIXES
from podres_exporter.core.model import Holder
from podres_exporter.core.printable import printable
from podres_exporter.top.rows import ContainerRow, DeviceRow, NodeHeader, TopData
from podres_exporter.top.selection import Options, select, sort_direction

# The key help, longest first: the first that fits the width is shown.
HELP = (
    "q quit  v view  s/S sort  I invert  n/p/r filter namespace/pod/resource  c clear  "
    "w wide  j/k scroll",
    "q quit  v view  s sort  I invert  n/p/r filter  c clear  w wide  j/k scroll",
)
_ELLIPSIS = "…"
_NARROW = 120  # below this width: one space between columns, NUMA and ALIGN in one column
_SHORT = 120  # below this width: resource names without their vendor domain
# Header labels, wide and narrow (below _NARROW columns).
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


# ---------------------------------------------------------------- formatting


# Up to Ti: no node has a Pi of memory to show.
_UNITS_LARGEST_FIRST = tuple(
    (unit, size) for unit, size in reversed(BINARY_SUFFIXES.items()) if size <= 2**40
)


def fmt_bytes(value: float | None) -> str:
    """Bytes in binary units: ``192Gi``, ``12.1Gi``, ``512Mi``; ``-`` when unknown."""
    if value is None:
        return "-"
    for unit, size in _UNITS_LARGEST_FIRST:
        if abs(value) >= size:
            x = value / size
            return f"{x:.0f}{unit}" if x >= 100 or x == int(x) else f"{x:.1f}{unit}"
    return f"{value:.0f}B"


def fmt_pair(used: float | None, total: float | None) -> str:
    """``used/total`` in the unit of ``total``: ``57.8/79.6Gi``."""
    if used is None:
        return "-"
    if total is None or total <= 0:
        return fmt_bytes(used)
    whole = fmt_bytes(total)
    unit = whole.lstrip("0123456789.")
    size = BINARY_SUFFIXES.get(unit, 1)
    x = used / size
    part = f"{x:.0f}" if x >= 100 or x == int(x) else f"{x:.1f}"
    return f"{part}/{whole}"


def fmt_ratio(value: float | None) -> str:
    """A 0-1 share as a percentage: ``87%``; ``-`` when unknown."""
    return "-" if value is None else f"{value * 100:.0f}%"


def fmt_age(seconds: float | None) -> str:
    """``0.4s``, ``12s``, ``3m05s``, ``2h10m``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def short_resource(resource: str) -> str:
    """``nvidia.com/gpu`` -> ``gpu``: the name without its vendor domain."""
    return resource.rpartition("/")[2] or resource


def holder_text(h: Holder) -> str:
    """``namespace/pod/container`` (``namespace/pod`` without a container), unescaped."""
    return f"{h.namespace}/{h.pod}/{h.container}" if h.container else f"{h.namespace}/{h.pod}"


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
    return out + _ELLIPSIS


def crop_middle(text: str, width: int) -> str:
    """Cut the middle out of ``text`` to fit ``width``: names differ at their ends."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return _ELLIPSIS[:width]
    tail = (width - 1) // 2
    head = width - 1 - tail
    return text[:head] + _ELLIPSIS + (text[-tail:] if tail else "")


def _wrap(label: str, items: Sequence[str], width: int, hang: int = 0) -> list[str]:
    """``label`` then ``items`` (made :func:`printable`) packed two spaces apart, continued
    ``hang`` past the first."""
    items = [printable(item) for item in items]
    label_width = 10 if width < _NARROW else 19
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
    label = _LABELS[width < _NARROW]
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
            if d.unallocated is None or d.allocatable is None:
                item = f"{d.resource} {d.allocated} held"
            else:
                item = f"{d.resource} {d.unallocated}/{d.allocatable}"
            if d.allocated_unhealthy:
                item += f" ({d.allocated_unhealthy} held unhealthy)"
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


@dataclass(frozen=True, slots=True)
class _Col:
    header: str
    elastic: bool = False  # shrinks (with an ellipsis) when the table is too wide
    right: bool = False
    min_width: int = 0
    middle: bool = False  # cut in the middle, not at the end, when too long


def _fit(cols: Sequence[_Col], cells: Sequence[Sequence[str]], width: int, gap: int) -> list[int]:
    """Column widths: each column's natural width, the elastic ones shrunk to fit ``width``."""
    natural = [
        max([cell_len(c.header)] + [cell_len(row[i]) for row in cells]) for i, c in enumerate(cols)
    ]
    widths = list(natural)
    excess = sum(widths) + gap * (len(cols) - 1) - width
    while excess > 0:
        # Take one column of the widest elastic column above its minimum, until it fits.
        candidates = [
            i
            for i, c in enumerate(cols)
            if c.elastic and widths[i] > max(c.min_width, min(cell_len(c.header), 6), 4)
        ]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: (widths[i], -i))
        widths[widest] -= 1
        excess -= 1
    return widths


def _table(
    cols: Sequence[_Col],
    cells: Sequence[Sequence[str]],
    width: int,
    styles: Sequence[Callable[[str], str]] | None = None,
) -> Table:
    gap = 1 if width < _NARROW else 2
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


def _plain_table(cols: Sequence[_Col], cells: Sequence[Sequence[str]], width: int) -> list[str]:
    """The lines rich draws for :func:`_table` without styles, or [] when rich must lay
    it out (the columns do not fit ``width``). Thousands of rows through rich take
    seconds; this takes milliseconds.
    """
    gap = 1 if width < _NARROW else 2
    cells = [[printable(v) for v in row] for row in cells]
    widths = _fit(cols, cells, width, gap)
    if sum(widths) + gap * (len(cols) - 1) > width:
        return []
    sep = " " * gap

    def cell(text: str, c: _Col, w: int) -> str:
        if c.middle:
            text = crop_middle(text, w)
        size = cell_len(text)
        if size > w:
            return set_cell_size(text, w - 1) + _ELLIPSIS
        pad = " " * (w - size)
        return pad + text if c.right else text + pad

    lines = [sep.join(cell(c.header, c, w) for c, w in zip(cols, widths, strict=True))]
    lines += [
        sep.join(cell(v, c, w) for v, c, w in zip(row, cols, widths, strict=True)) for row in cells
    ]
    return lines


def _devices_text(r: ContainerRow, wide: bool, short: bool) -> str:
    if wide:
        by_res: dict[str, list[str]] = {}
        for d in r.devices:
            by_res.setdefault(d.resource, []).append(d.device_id)
        return "  ".join(f"{res}: {','.join(ids)}" for res, ids in by_res.items())
    return ", ".join(
        f"{short_resource(res) if short else res}: {n}" for res, n in r.device_counts()
    )


def _aligned(value: bool | None) -> str:
    return {True: "yes", False: "NO", None: ""}[value]


def container_cells(
    rows: Sequence[ContainerRow], *, wide: bool, multi_node: bool, width: int
) -> tuple[list[_Col], list[list[str]]]:
    """The containers view: columns and cell texts (raw: :func:`_table` escapes them).

    Below ``_NARROW`` columns NUMA and ALIGN share a column (``0,1!``: not aligned).
    """
    narrow, short = width < _NARROW, width < _SHORT
    cols = [
        _Col("NAMESPACE", elastic=True, min_width=6),
        _Col("POD", elastic=True, min_width=16, middle=True),
        _Col("CONTAINER", elastic=True, min_width=8),
        _Col("CPUS", elastic=True, min_width=5),
        _Col("BUSY", right=True),
        _Col("NUMA"),
        _Col("ALIGN"),
        _Col("DEVICES", elastic=True, min_width=7),
        _Col("GPU%", right=True),
        _Col("GPU MEM", right=True),
    ]
    if wide:
        cols.append(_Col("PINNED MEMORY", elastic=True, min_width=8))
    if multi_node:
        cols.insert(0, _Col("NODE", elastic=True, min_width=6, middle=True))
    numa_at = [c.header for c in cols].index("NUMA")
    if narrow:
        del cols[numa_at + 1]
    cells = []
    for r in rows:
        mark = "*" if r.gpu_shared else ""
        row = [
            r.namespace,
            r.pod,
            r.container or ("(pod)" if r.shared_pool is None else "(pod pool)"),
            r.cpulist or "-",
            fmt_ratio(r.busy) if r.cpus else "",
            ",".join(r.numa_nodes) or "-",
            _aligned(r.aligned),
            _devices_text(r, wide, short) or "-",
            fmt_ratio(r.gpu_util) + mark if r.gpu_util is not None else "",
            fmt_pair(r.gpu_mem_used, r.gpu_mem_total) + mark if r.gpu_mem_used is not None else "",
        ]
        if wide:
            row.append(", ".join(f"{t} {fmt_bytes(v)}" for t, v in r.memory) or "-")
        if multi_node:
            row.insert(0, r.node)
        if narrow:
            aligned = row.pop(numa_at + 1)
            row[numa_at] += "!" if aligned == "NO" else ""
        cells.append(row)
    return cols, cells


def device_cells(
    rows: Sequence[DeviceRow], *, wide: bool, multi_node: bool, width: int
) -> tuple[list[_Col], list[list[str]]]:
    """The devices view: columns and cell texts (raw: :func:`_table` escapes them)."""
    short = width < _SHORT
    cols = [
        _Col("RESOURCE", elastic=True, min_width=8),
        _Col("DEVICE", elastic=True, min_width=12, middle=True),
        _Col("NUMA"),
        _Col("HEALTH"),
        _Col("HOLDER", elastic=True, min_width=12, middle=True),
        _Col("UTIL", right=True),
    ]
    if wide:
        cols += [
            _Col("GPU MEM", right=True),
            _Col("STATE"),
            _Col("PHYSICAL", elastic=True, middle=True),
        ]
    if multi_node:
        cols.insert(0, _Col("NODE", elastic=True, min_width=6, middle=True))
    cells = []
    for r in rows:
        row = [
            short_resource(r.resource) if short else r.resource,
            r.device_id,
            r.numa_node,
            "ok" if r.healthy else "UNHEALTHY",
            ", ".join(holder_text(h) for h in r.holders) or "free",
            fmt_ratio(r.util) if r.util is not None else "",
        ]
        if wide:
            physical = r.physical_id if r.physical_id and r.physical_id != r.device_id else ""
            row += [
                fmt_pair(r.mem_used, r.mem_total) if r.mem_used is not None else "",
                r.state,
                physical,
            ]
        if multi_node:
            row.insert(0, r.node)
        cells.append(row)
    return cols, cells


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
        "no pods on this node hold exclusive CPUs, devices or pinned memory "
        f"({pods} pods, all in the shared CPU pool)"
    )


def _footnotes(shown: Sequence[ContainerRow], options: Options, width: int) -> list[str]:
    """What the marks in the containers shown mean."""
    notes = []
    if options.view == "containers" and any(r.gpu_shared for r in shown):
        notes.append("* its share of a GPU that other containers hold too")
    if options.view == "containers" and width < _NARROW and any(r.aligned is False for r in shown):
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
    tail = _tail_lines(width, screen)
    first, shown = 0, cells
    position: list[str] = []
    if height is not None and cells:
        notes = len(_footnotes(containers, options, width))
        room = max(1, height - len(top) - notes - len(tail) - 3)  # blank, header, position
        first = max(0, min(screen.offset if screen else 0, max(0, len(cells) - room)))
        if len(cells) > room:
            shown = cells[first : first + room]
            position = [f"rows {first + 1}-{first + len(shown)} of {len(cells)} (j/k to scroll)"]
    visible = containers[first : first + len(shown)] if options.view == "containers" else ()
    bottom = position + _footnotes(visible, options, width) + tail
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
