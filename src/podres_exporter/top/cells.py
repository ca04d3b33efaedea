"""The cells of ``podres top``'s tables: each row's texts, and the formatting of values.

Pure: :func:`container_cells` and :func:`device_cells` turn rows into raw cell texts
(:mod:`.render` makes them printable and lays them out). In wide mode the cells of
device ids are never cut: :func:`wrap_cells` folds them onto continuation lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len

from podres_exporter.core.kube import BINARY_SUFFIXES
from podres_exporter.core.model import Holder
from podres_exporter.top.rows import ContainerRow, DeviceRow

ELLIPSIS = "…"
NARROW = 120  # below this width: one space between columns, NUMA and ALIGN in one column
SHORT = 120  # below this width: resource names without their vendor domain
_NO_DECIMALS_FROM = 100  # 100 units and more are shown without a decimal
_TENTHS_BELOW = 10  # ages under 10 s are shown in tenths
_MINUTE = 60
_HOUR = 3600

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
            return f"{x:.0f}{unit}" if x >= _NO_DECIMALS_FROM or x == int(x) else f"{x:.1f}{unit}"
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
    part = f"{x:.0f}" if x >= _NO_DECIMALS_FROM or x == int(x) else f"{x:.1f}"
    return f"{part}/{whole}"


def fmt_ratio(value: float | None) -> str:
    """A 0-1 share as a percentage: ``87%``; ``-`` when unknown."""
    return "-" if value is None else f"{value * 100:.0f}%"


def fmt_age(seconds: float | None) -> str:
    """``0.4s``, ``12s``, ``3m05s``, ``2h10m``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    if seconds < _TENTHS_BELOW:
        return f"{seconds:.1f}s"
    if seconds < _MINUTE:
        return f"{seconds:.0f}s"
    if seconds < _HOUR:
        return f"{int(seconds // _MINUTE)}m{int(seconds % _MINUTE):02d}s"
    return f"{int(seconds // _HOUR)}h{int(seconds % _HOUR // _MINUTE):02d}m"


def short_resource(resource: str) -> str:
    """``nvidia.com/gpu`` -> ``gpu``: the name without its vendor domain."""
    return resource.rpartition("/")[2] or resource


def holder_text(h: Holder) -> str:
    """``namespace/pod/container`` (``namespace/pod`` without a container), unescaped."""
    return f"{h.namespace}/{h.pod}/{h.container}" if h.container else f"{h.namespace}/{h.pod}"


def crop_middle(text: str, width: int) -> str:
    """Cut the middle out of ``text`` to fit ``width``: names differ at their ends."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    tail = (width - 1) // 2
    head = width - 1 - tail
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


@dataclass(frozen=True, slots=True)
class Col:
    header: str
    elastic: bool = False  # shrinks (with an ellipsis) when the table is too wide
    right: bool = False
    min_width: int = 0
    middle: bool = False  # cut in the middle, not at the end, when too long
    wrap: bool = False  # never cut: folded onto continuation lines (wide mode's ids)


def resource_text(resource: str, *, dra: bool, short: bool) -> str:
    """A resource as shown: without its vendor domain when ``short``; a DRA driver
    marked ``(DRA)``."""
    text = short_resource(resource) if short else resource
    return f"{text} (DRA)" if dra else text


def _devices_text(r: ContainerRow, wide: bool, short: bool) -> str:
    """Devices held: a count per resource, or in wide mode every id (never cut)."""
    dra = r.dra_drivers
    if wide:
        by_res: dict[str, list[str]] = {}
        for d in r.devices:
            by_res.setdefault(d.resource, []).append(d.device_id)
        parts = [
            f"{resource_text(res, dra=res in dra, short=False)}: {','.join(ids)}"
            for res, ids in by_res.items()
        ]
    else:
        parts = [
            f"{resource_text(res, dra=res in dra, short=short)}: {n}"
            for res, n in r.device_counts()
        ]
    if r.claims and not dra:  # kubelets before 1.31 name no claim device
        parts.append(f"DRA claims: {len(r.claims)}")
    return ("  " if wide else ", ").join(parts)


def _aligned(value: bool | None) -> str:
    return {True: "yes", False: "NO", None: ""}[value]


def container_cells(
    rows: Sequence[ContainerRow], *, wide: bool, multi_node: bool, width: int
) -> tuple[list[Col], list[list[str]]]:
    """The containers view: columns and cell texts (raw: :func:`_table` escapes them).

    Below ``NARROW`` columns NUMA and ALIGN share a column (``0,1!``: not aligned).
    ``-o wide`` adds PINNED MEMORY, and OWNER (the pod's workload) where a row has one.
    """
    narrow, short = width < NARROW, width < SHORT
    owners = wide and any(r.owner for r in rows)
    cols = [
        Col("NAMESPACE", elastic=True, min_width=6),
        Col("POD", elastic=True, min_width=16, middle=True),
        Col("CONTAINER", elastic=True, min_width=8),
        Col("CPUS", elastic=True, min_width=5),
        Col("BUSY", right=True),
        Col("NUMA"),
        Col("ALIGN"),
        Col("DEVICES", elastic=True, min_width=7, wrap=wide),
        Col("GPU%", right=True),
        Col("GPU MEM", right=True),
    ]
    if wide:
        cols.append(Col("PINNED MEMORY", elastic=True, min_width=8))
    if owners:
        cols.append(Col("OWNER", elastic=True, min_width=8, middle=True))
    if multi_node:
        cols.insert(0, Col("NODE", elastic=True, min_width=6, middle=True))
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
        if owners:
            row.append(r.owner or "-")
        if multi_node:
            row.insert(0, r.node)
        if narrow:
            aligned = row.pop(numa_at + 1)
            row[numa_at] += "!" if aligned == "NO" else ""
        cells.append(row)
    return cols, cells


def device_cells(
    rows: Sequence[DeviceRow], *, wide: bool, multi_node: bool, width: int
) -> tuple[list[Col], list[list[str]]]:
    """The devices view: columns and cell texts (raw: :func:`_table` escapes them)."""
    short = width < SHORT
    cols = [
        Col("RESOURCE", elastic=True, min_width=8),
        Col("DEVICE", elastic=True, min_width=12, middle=not wide, wrap=wide),
        Col("NUMA"),
        Col("HEALTH"),
        Col("HOLDER", elastic=True, min_width=12, middle=True),
        Col("UTIL", right=True),
    ]
    if wide:
        cols += [
            Col("GPU MEM", right=True),
            Col("STATE"),
            Col("PHYSICAL", elastic=True, min_width=12, wrap=True),
        ]
    if multi_node:
        cols.insert(0, Col("NODE", elastic=True, min_width=6, middle=True))
    cells = []
    for r in rows:
        row = [
            resource_text(r.resource, dra=r.dra, short=short),
            r.device_id,
            r.numa_node,
            {True: "ok", False: "UNHEALTHY", None: "-"}[r.healthy],
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


def _pieces(text: str) -> list[str]:
    """``text`` cut after each comma or space: where a wrapped cell may break."""
    pieces: list[str] = []
    start = 0
    for i, ch in enumerate(text):
        if ch in ", " and (i + 1 == len(text) or text[i + 1] not in ", "):
            pieces.append(text[start : i + 1])
            start = i + 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def longest_piece(text: str) -> int:
    """The width of the longest piece of ``text`` a wrapped cell keeps on one line."""
    return max((cell_len(p.rstrip()) for p in _pieces(text)), default=0)


def _fold(piece: str, width: int) -> list[str]:
    """``piece`` in lines of at most ``width`` cells, cut anywhere (an id longer than the
    column: shown whole over several lines)."""
    lines, line = [], ""
    for ch in piece:
        if line and cell_len(line + ch) > width:
            lines.append(line)
            line = ""
        line += ch
    return [*lines, line]


def wrap_text(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken after commas and spaces where
    it can be, folded where it cannot; nothing left out."""
    width = max(width, 1)
    lines: list[str] = []
    line = ""
    for piece in _pieces(text):
        if cell_len((line + piece).rstrip()) <= width:
            line += piece
            continue
        if line.strip():
            lines.append(line.rstrip())
        core = piece.strip()
        *full, last = _fold(core, width)
        lines += full
        line = last + piece[len(piece.rstrip()) :]  # the separator after it stays
    if line.strip() or not lines:
        lines.append(line.rstrip())
    return lines


def wrap_cells(
    cols: Sequence[Col], cells: Sequence[Sequence[str]], widths: Sequence[int]
) -> tuple[list[list[str]], list[int]]:
    """The cells of the ``wrap`` columns folded to their ``widths``: a row whose cell is
    too long continues on lines with only that column filled. Also, for each line, the
    index of the row it belongs to."""
    lines: list[list[str]] = []
    owner: list[int] = []
    for i, row in enumerate(cells):
        folded = [
            wrap_text(v, w) if c.wrap else [v] for v, c, w in zip(row, cols, widths, strict=True)
        ]
        for k in range(max(len(f) for f in folded)):
            lines.append([f[k] if k < len(f) else "" for f in folded])
            owner.append(i)
    return lines, owner
