"""CPU busy shares: a source-computed rate, or the rise of the busy counter between readings.

Also when a second reading is needed, and which earlier reading to compare with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from podres_exporter.core.model import Holder
from podres_exporter.top.rows.samples import (
    BUSY_COUNTER,
    BUSY_RATIO,
    CPU_SOURCE_STAMP,
    Index,
    Reading,
    group,
)


def cpu_stamp(reading: Reading) -> float | None:
    """When the source behind ``reading`` last read CPU times (its first node's), if it says."""
    for s in reading.samples:
        if s.name == CPU_SOURCE_STAMP and s.labels.get("source") == "cpu":
            return s.value
    return None


def node_cpu_stamp(index: Index) -> float | None:
    """When the source last read CPU times, as one node's samples say (None: not said)."""
    for s in index.get(CPU_SOURCE_STAMP):
        if s.labels.get("source") == "cpu":
            return s.value
    return None


def busy_key(labels: Mapping[str, str]) -> tuple[str, str, str, str]:
    """The CPU and holder a busy sample is about: (cpu, namespace, pod, container)."""
    return (
        labels.get("cpu", ""),
        labels.get("namespace", ""),
        labels.get("pod", ""),
        labels.get("container", ""),
    )


def busy_ratios(
    current: Index, previous: Index | None, elapsed_s: float | None
) -> dict[tuple[str, str, str, str], float]:
    """Busy share per (cpu, holder): a source-computed rate, else the counter's rise.

    The rise of ``podres_cpu_busy_seconds_total`` is divided by the time between the
    two CPU-time reads behind it (``podres_source_last_success_timestamp_seconds{source=
    "cpu"}``), or, without that series, by ``elapsed_s`` between the two readings. When
    the source has not read CPU times again in between, nothing is known.
    """
    direct = current.get(BUSY_RATIO)
    if direct:
        return {busy_key(s.labels): min(1.0, max(0.0, s.value)) for s in direct}
    if previous is None:
        return {}
    now_stamp, then_stamp = node_cpu_stamp(current), node_cpu_stamp(previous)
    if now_stamp is not None and then_stamp is not None:
        span: float | None = now_stamp - then_stamp
    else:
        span = elapsed_s
    if span is None or span <= 0:
        return {}
    before = {busy_key(s.labels): s.value for s in previous.get(BUSY_COUNTER)}
    out: dict[tuple[str, str, str, str], float] = {}
    for s in current.get(BUSY_COUNTER):
        key = busy_key(s.labels)
        if key in before and s.value >= before[key]:
            out[key] = min(1.0, (s.value - before[key]) / span)
    return out


def cpu_times_advanced(before: Reading, after: Reading) -> bool:
    """True when ``after`` carries CPU times read since ``before`` (or no CPU-time stamps).

    An exporter that has not polled in between serves the same counters: comparing the
    two would say nothing about busy shares.
    """
    stamps_after = {n: node_cpu_stamp(i) for n, i in group(after).items()}
    if all(v is None for v in stamps_after.values()):
        return True
    return stamps_after != {n: node_cpu_stamp(i) for n, i in group(before).items()}


def advance_baseline(
    baseline: Reading | None, last: Reading | None, new: Reading
) -> Reading | None:
    """The reading to compare ``new`` with for busy shares, given the previous two.

    ``last`` becomes the baseline once ``new`` carries CPU times read after it;
    otherwise the older baseline is kept.
    """
    if last is None:
        return baseline
    return last if cpu_times_advanced(last, new) else baseline


def needs_second_reading(reading: Reading) -> bool:
    """True when busy shares must come from a second reading (no source-computed rate)."""
    names = {s.name for s in reading.samples}
    return BUSY_COUNTER in names and BUSY_RATIO not in names


def mean_busy(
    h: Holder, cpus: Iterable[int], busy: Mapping[tuple[str, str, str, str], float]
) -> float | None:
    """The mean busy share of container ``h``'s exclusive CPUs, None when none is known."""
    cpu_busy = [
        busy[(str(c), *h)] for c in sorted(cpus) if (str(c), *h) in busy
    ]  # every exclusive CPU of the container read twice, or none
    return sum(cpu_busy) / len(cpu_busy) if cpu_busy else None
