"""The GPU tier's checks: what a reading of a real GPU and the exporter's series for it must
satisfy. Pure functions of readings and scraped samples, so the normal test suite proves
them against the fake NVML (``test_checks.py``) and the tier applies them to the real one.

Every exported GPU field is in :data:`FIELDS`: the reading's attribute, the series that
carries it, its unit and its plausible range. A field is "read" when the backend gave a
value, "unsupported" when it gave None (NVML answered NOT_SUPPORTED, NO_PERMISSION, ...);
the documented behaviour of an unsupported field is no series at all, never a 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podres_exporter.core.telemetry import CLOCK_EVENT_REASONS, GpuReading
from tests.support import Samples, select

# Bounds of plausibility, not of any board: a reading outside them is a unit or scale
# error (MHz for Hz, mW for W, percent for a ratio), not a hot GPU.
_MAX_WATTS = 2000.0
_MAX_BYTES = 1 << 40
_MAX_HZ = 3e10  # GDDR memory clocks: NVML gives the data rate (9751 MHz on an RTX 3090)
_MIN_CLOCK_HZ = 1e6
_MAX_PCIE_BYTES_PER_S = 256e9
_CELSIUS = (1.0, 125.0)
# Power may sit above the enforced limit for an instant (the limit is an average).
_POWER_OVER_LIMIT = 1.1


@dataclass(frozen=True)
class FieldSpec:
    """One exported field: the reading's attribute, its series (``family``, with the
    extra ``labels`` that select it), its unit, whether it is a counter, and its check
    (None, or what is wrong with the value of ``gpu``)."""

    attr: str
    family: str
    unit: str
    check: Callable[[GpuReading, Any], str | None]
    labels: Mapping[str, str] = field(default_factory=dict)
    counter: bool = False


def _number(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"not a number: {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"not finite: {value!r}"
    return None


def _between(low: float, high: float) -> Callable[[GpuReading, Any], str | None]:
    def check(gpu: GpuReading, value: Any) -> str | None:
        return _number(value) or (
            None if low <= value <= high else f"{value!r} outside [{low:g}, {high:g}]"
        )

    return check


def _integer(low: int, high: int) -> Callable[[GpuReading, Any], str | None]:
    within = _between(low, high)

    def check(gpu: GpuReading, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"not an integer: {value!r}"
        return within(gpu, value)

    return check


def _memory_used(gpu: GpuReading, value: Any) -> str | None:
    problem = _integer(0, _MAX_BYTES)(gpu, value)
    total = gpu.memory_total_bytes
    if problem is None and total is not None and value > total:
        problem = f"used {value} > total {total}"
    return problem


def _power(gpu: GpuReading, value: Any) -> str | None:
    problem = _between(0.0, _MAX_WATTS)(gpu, value)
    limit = gpu.power_limit_watts
    if problem is None and limit is not None and value > limit * _POWER_OVER_LIMIT:
        problem = f"{value} W above the power limit {limit} W"
    return problem


def _clock(gpu: GpuReading, value: Any) -> str | None:
    problem = _between(_MIN_CLOCK_HZ, _MAX_HZ)(gpu, value)
    if problem is None and value % 1e6:
        problem = f"{value!r} Hz is not a whole number of MHz (NVML's unit)"
    return problem


def _flag(gpu: GpuReading, value: Any) -> str | None:
    return None if isinstance(value, bool) else f"not a flag: {value!r}"


def _reasons(gpu: GpuReading, value: Any) -> str | None:
    if not isinstance(value, tuple):
        return f"not a tuple of reasons: {value!r}"
    unknown = [r for r in value if r not in CLOCK_EVENT_REASONS]
    return f"unknown reasons {unknown}" if unknown else None


_RATIO = _between(0.0, 1.0)
_COUNT = _integer(0, 1 << 62)

FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("utilization_gpu_ratio", "podres_gpu_utilization_ratio", "ratio", _RATIO),
    FieldSpec("utilization_memory_ratio", "podres_gpu_memory_utilization_ratio", "ratio", _RATIO),
    FieldSpec("memory_used_bytes", "podres_gpu_memory_used_bytes", "bytes", _memory_used),
    FieldSpec(
        "memory_total_bytes", "podres_gpu_memory_total_bytes", "bytes", _integer(1, _MAX_BYTES)
    ),
    FieldSpec("power_watts", "podres_gpu_power_watts", "watts", _power),
    FieldSpec(
        "power_limit_watts", "podres_gpu_power_limit_watts", "watts", _between(1.0, _MAX_WATTS)
    ),
    FieldSpec(
        "energy_joules_total",
        "podres_gpu_energy_joules_total",
        "joules",
        _between(0.0, 1e15),
        counter=True,
    ),
    FieldSpec("temperature_celsius", "podres_gpu_temperature_celsius", "°C", _between(*_CELSIUS)),
    FieldSpec("sm_clock_hz", "podres_gpu_sm_clock_hertz", "hertz", _clock),
    FieldSpec("memory_clock_hz", "podres_gpu_memory_clock_hertz", "hertz", _clock),
    FieldSpec("clock_event_reasons", "podres_gpu_clock_event_reason", "reasons", _reasons),
    FieldSpec(
        "pcie_tx_bytes_per_second",
        "podres_gpu_pcie_transmit_bytes_per_second",
        "bytes/s",
        _between(0.0, _MAX_PCIE_BYTES_PER_S),
    ),
    FieldSpec(
        "pcie_rx_bytes_per_second",
        "podres_gpu_pcie_receive_bytes_per_second",
        "bytes/s",
        _between(0.0, _MAX_PCIE_BYTES_PER_S),
    ),
    FieldSpec(
        "ecc_corrected_total",
        "podres_gpu_ecc_errors_total",
        "errors",
        _COUNT,
        {"type": "corrected"},
        counter=True,
    ),
    FieldSpec(
        "ecc_uncorrected_total",
        "podres_gpu_ecc_errors_total",
        "errors",
        _COUNT,
        {"type": "uncorrected"},
        counter=True,
    ),
    FieldSpec(
        "remapped_rows_correctable",
        "podres_gpu_remapped_rows_total",
        "rows",
        _COUNT,
        {"cause": "correctable"},
        counter=True,
    ),
    FieldSpec(
        "remapped_rows_uncorrectable",
        "podres_gpu_remapped_rows_total",
        "rows",
        _COUNT,
        {"cause": "uncorrectable"},
        counter=True,
    ),
    FieldSpec("remapped_rows_pending", "podres_gpu_remapping_pending", "flag", _flag),
    FieldSpec("remapped_rows_failure", "podres_gpu_remapping_failed", "flag", _flag),
)
"""Every GPU field the exporter serves from a reading (XIDs and processes apart)."""

# Fields NVML answers on a MIG device; its other fields are board-level, asked of the parent.
MIG_FIELDS = frozenset(
    {"utilization_gpu_ratio", "utilization_memory_ratio", "memory_used_bytes", "memory_total_bytes"}
)


@dataclass(frozen=True)
class FieldResult:
    """One field of one device: ``status`` "read" (``value`` set) or "unsupported"."""

    uuid: str
    attr: str
    family: str
    unit: str
    status: str
    value: Any = None
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {
            "uuid": self.uuid,
            "field": self.attr,
            "series": self.family,
            "unit": self.unit,
            "status": self.status,
            "value": value,
            "problem": self.problem,
        }


def fields_of(gpu: GpuReading) -> tuple[FieldSpec, ...]:
    """The fields a device has: all on a GPU, the MIG ones on a MIG device."""
    if gpu.parent_uuid is None:
        return FIELDS
    return tuple(f for f in FIELDS if f.attr in MIG_FIELDS)


def check_reading(gpu: GpuReading) -> list[FieldResult]:
    """Each field of a healthy device, read or unsupported, with what is wrong with it."""
    out = []
    for spec in fields_of(gpu):
        value = getattr(gpu, spec.attr)
        if value is None:
            out.append(FieldResult(gpu.uuid, spec.attr, spec.family, spec.unit, "unsupported"))
            continue
        problem = spec.check(gpu, value)
        out.append(FieldResult(gpu.uuid, spec.attr, spec.family, spec.unit, "read", value, problem))
    return out


def check_counters(first: GpuReading, second: GpuReading) -> list[str]:
    """Counters that went down between two reads of one device (XIDs included)."""
    problems = []
    for spec in fields_of(first):
        if not spec.counter:
            continue
        a, b = getattr(first, spec.attr), getattr(second, spec.attr)
        if a is not None and b is not None and b < a:
            problems.append(f"{first.uuid} {spec.attr} went down: {a} -> {b}")
    for code, count in first.xid_errors_total.items():
        later = second.xid_errors_total.get(code, 0)
        if later < count:
            problems.append(f"{first.uuid} XID {code} count went down: {count} -> {later}")
    return problems


def check_exposition(gpu: GpuReading, samples: Samples) -> list[str]:
    """The exporter's series of the device agree with what the backend read: a series for
    each field read, none for an unsupported one (never a 0), in the field's unit."""
    problems = []
    for spec in fields_of(gpu):
        found = select(samples, spec.family, uuid=gpu.uuid, **spec.labels)
        value = getattr(gpu, spec.attr)
        if value is None:
            if found:
                problems.append(f"{spec.family}{dict(spec.labels)}: unsupported, yet served")
        elif not found:
            problems.append(f"{spec.family}{dict(spec.labels)}: read, yet not served")
        elif spec.attr == "memory_total_bytes" and set(found.values()) != {float(value)}:
            problems.append(f"{spec.family}: served {sorted(found.values())}, read {value}")
        elif spec.attr == "clock_event_reasons" and len(found) != len(CLOCK_EVENT_REASONS):
            problems.append(f"{spec.family}: {len(found)} reasons served")
    return problems


def check_identity(samples: Samples, uuid: str, index: int, pod: str | None) -> list[str]:
    """The device's info series names its NVML index, and (``pod``: NAMESPACE/NAME) its
    utilisation or memory series names the pod that holds it."""
    problems = []
    info = select(samples, "podres_gpu_info", uuid=uuid)
    if not info:
        return [f"no podres_gpu_info for {uuid}"]
    indices = {dict(labels).get("gpu") for labels in info}
    if indices != {str(index)}:
        problems.append(f"{uuid}: gpu label {sorted(map(str, indices))}, expected {index}")
    if pod is not None:
        namespace, name = pod.split("/")
        held = select(
            samples, "podres_gpu_memory_total_bytes", uuid=uuid, namespace=namespace, pod=name
        )
        if not held:
            problems.append(f"{uuid}: no series names the pod {pod}")
    return problems


def unattributed_processes(samples: Samples, uuid: str) -> float:
    """The device's processes that belong to no container holding it (the series whose
    holder labels are empty)."""
    found = select(samples, "podres_gpu_holder_processes", uuid=uuid)
    return sum(v for labels, v in found.items() if not dict(labels).get("pod"))


def attributed_processes(samples: Samples, uuid: str) -> float:
    """The device's processes attributed to a holding container."""
    found = select(samples, "podres_gpu_holder_processes", uuid=uuid)
    return sum(v for labels, v in found.items() if dict(labels).get("pod"))


def timing_summary(seconds: Sequence[float]) -> dict[str, float]:
    """Milliseconds: the fastest, median and slowest of the reads timed."""
    ordered = sorted(seconds)
    return {
        "reads": len(ordered),
        "min_ms": round(ordered[0] * 1000, 3),
        "median_ms": round(ordered[len(ordered) // 2] * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


def check_snapshot(doc: Any, uuid: str, index: int, holder: str | None) -> list[str]:
    """``podres snapshot``'s JSON names the device with its index, and (``holder``:
    NAMESPACE/POD/CONTAINER) the container that holds it."""
    gpus = (doc.get("telemetry") or {}).get("gpus") if isinstance(doc, dict) else None
    if not isinstance(gpus, list):
        return ["no telemetry.gpus in the snapshot"]
    found = [g for g in gpus if isinstance(g, dict) and g.get("uuid") == uuid]
    if not found:
        return [f"{uuid} is not in the snapshot"]
    (gpu,) = found
    problems = []
    if gpu.get("index") != index:
        problems.append(f"{uuid}: index {gpu.get('index')}, expected {index}")
    if not gpu.get("healthy"):
        problems.append(f"{uuid}: unhealthy: {gpu.get('error')}")
    if holder is not None and gpu.get("holders") != [holder]:
        problems.append(f"{uuid}: holders {gpu.get('holders')}, expected [{holder}]")
    return problems


def runtime_nodes(minor: int | None) -> list[str]:
    """The device nodes a container of the GPU with ``minor`` needs (the control node,
    the GPU's own node, the unified-memory node)."""
    nodes = ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    if minor is not None:
        nodes.insert(1, f"/dev/nvidia{minor}")
    return nodes


def check_allocation(
    envs: Mapping[str, str],
    host_paths: Sequence[str],
    uuids: Sequence[str],
    exists: Callable[[str], bool],
) -> list[str]:
    """An Allocate answer for ``uuids`` (kind ``nvml``): the runtime's variable names
    them, and every device node it returns exists on this machine."""
    problems = []
    visible = envs.get("NVIDIA_VISIBLE_DEVICES")
    if visible != ",".join(uuids):
        problems.append(f"NVIDIA_VISIBLE_DEVICES={visible!r}, expected {','.join(uuids)!r}")
    problems += [f"device node {p} does not exist here" for p in host_paths if not exists(p)]
    return problems


def check_nvidia_smi(smi: Mapping[str, Any], samples: Samples) -> list[str]:
    """The exporter's GPUs against ``nvidia-smi -q`` (:func:`~tests.gpu.probe.
    parse_nvidia_smi_q`): every GPU it lists is served at its index (the order it prints
    them in), with its product name as the model and the same driver version."""
    problems = []
    info = select(samples, "podres_gpu_info")
    served = {dict(labels).get("uuid"): dict(labels) for labels in info}
    listed = [g for g in smi.get("gpus", []) if isinstance(g, Mapping)]
    for gpu in listed:
        labels = served.get(gpu.get("uuid"))
        if labels is None:
            problems.append(f"{gpu.get('uuid')} (nvidia-smi GPU {gpu.get('index')}) not served")
            continue
        if labels.get("gpu") != str(gpu.get("index")):
            problems.append(
                f"{gpu.get('uuid')}: gpu {labels.get('gpu')}, nvidia-smi {gpu.get('index')}"
            )
        if labels.get("model") != gpu.get("name"):
            problems.append(
                f"{gpu.get('uuid')}: model {labels.get('model')!r}, nvidia-smi {gpu.get('name')!r}"
            )
        if labels.get("driver_version") != smi.get("driver_version"):
            problems.append(
                f"{gpu.get('uuid')}: driver {labels.get('driver_version')}, "
                f"nvidia-smi {smi.get('driver_version')}"
            )
    whole = {u for u, labels in served.items() if not labels.get("parent_uuid")}
    unlisted = sorted(str(u) for u in whole - {g.get("uuid") for g in listed})
    if unlisted:
        problems.append(f"served, not listed by nvidia-smi: {unlisted}")
    return problems
