"""Whether a real NVIDIA driver answers here, and what it says of its GPUs.

:func:`probe` asks the real ``pynvml`` (``nvmlInit``, the device count, each GPU's
identity, MIG devices where MIG is already on) and shuts NVML down again; it changes
nothing on the GPU. :func:`nvidia_smi` parses ``nvidia-smi -q``, the driver's own report,
which the tier compares the exporter with. ``python -m tests.gpu.probe`` prints the
verdict in one line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

SKIP_PREFIX = "gpu tier: no NVIDIA driver answers here"


@dataclass(frozen=True)
class Device:
    """One GPU (or MIG device: ``parent`` set) as NVML names it."""

    uuid: str
    index: int
    name: str
    minor: int | None = None
    mig_enabled: bool | None = None
    parent: str | None = None


@dataclass(frozen=True)
class Probe:
    """What the driver said: ``ok`` with its devices, or the ``message`` of why not."""

    ok: bool
    message: str
    driver_version: str | None = None
    cuda_version: str | None = None
    nvml_version: str | None = None
    devices: tuple[Device, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.parent is None)

    @property
    def migs(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.parent is not None)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _cuda_version(nvml: Any) -> str | None:
    try:
        version = int(getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2")())  # noqa: B009
    except Exception:  # noqa: BLE001 - any failure: the version is unknown
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _optional(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or None when it fails or ``fn`` is None (a pynvml without it)."""
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a query the board or driver lacks: unknown
        return None


def _devices(nvml: Any) -> list[Device]:
    out: list[Device] = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = _optional(nvml.nvmlDeviceGetHandleByIndex, index)
        if handle is None:  # a GPU this process may not talk to (NO_PERMISSION)
            continue
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        mode = _optional(nvml.nvmlDeviceGetMigMode, handle)
        enabled = None if mode is None else int(mode[0]) == nvml.NVML_DEVICE_MIG_ENABLE
        out.append(
            Device(
                uuid=uuid,
                index=index,
                name=_text(nvml.nvmlDeviceGetName(handle)),
                minor=_optional(getattr(nvml, "nvmlDeviceGetMinorNumber", None), handle),
                mig_enabled=enabled,
            )
        )
        if not enabled:
            continue
        for slot in range(int(_optional(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0)):
            mig = _optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            if mig is None:
                continue
            out.append(
                Device(
                    uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                    index=index,
                    name=_text(_optional(nvml.nvmlDeviceGetName, mig) or ""),
                    parent=uuid,
                )
            )
    return out


def probe() -> Probe:
    """Ask the real driver; never raises."""
    try:
        import pynvml
    except ImportError as err:
        return Probe(False, f"{SKIP_PREFIX} (cannot import pynvml: {err})")
    try:
        pynvml.nvmlInit()
    except Exception as err:  # noqa: BLE001 - NVMLError and anything else: no driver here
        return Probe(False, f"{SKIP_PREFIX} (nvmlInit: {err})")
    try:
        devices = _devices(pynvml)
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        nvml_version = (
            _text(_optional(getattr(pynvml, "nvmlSystemGetNVMLVersion", None)) or "") or None
        )
        cuda = _cuda_version(pynvml)
    except Exception as err:  # noqa: BLE001 - a driver that answers init but not this
        return Probe(False, f"gpu tier: the NVIDIA driver answers nvmlInit, then fails: {err}")
    finally:
        _optional(pynvml.nvmlShutdown)
    if not devices:
        return Probe(False, f"{SKIP_PREFIX} (nvmlInit succeeded, but NVML lists no GPU)", driver)
    count = len([d for d in devices if d.parent is None])
    return Probe(
        True,
        f"gpu tier: {count} GPU(s), driver {driver}, CUDA {cuda}",
        driver_version=driver,
        cuda_version=cuda,
        nvml_version=nvml_version,
        devices=tuple(devices),
    )


_SECTION = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_KEY = re.compile(r"^(\s*)([^:]+?)\s*:\s*(.*?)\s*$")
_HEADER = re.compile(r"^(\s*)(\S.*?)\s*$")


def parse_nvidia_smi_q(text: str) -> dict[str, Any]:
    """``nvidia-smi -q`` -> {"driver_version", "cuda_version", "gpus": [...]}: per GPU in
    the order printed (the NVML index), its bus id, product name, UUID, minor number and
    current MIG mode."""
    out: dict[str, Any] = {"driver_version": None, "cuda_version": None, "gpus": []}
    gpu: dict[str, Any] | None = None
    heading = ""  # the indented heading a nested key sits under ("MIG Mode")
    for line in text.splitlines():
        section = _SECTION.match(line)
        if section:
            gpu = {"index": len(out["gpus"]), "bus_id": section.group(1)}
            out["gpus"].append(gpu)
            continue
        pair = _KEY.match(line)
        if pair is None:
            header = _HEADER.match(line)
            if header and len(header.group(1)) == 4:
                heading = header.group(2)
            continue
        indent, key, value = len(pair.group(1)), pair.group(2), pair.group(3)
        if gpu is None:
            if key == "Driver Version":
                out["driver_version"] = value
            elif key == "CUDA Version":
                out["cuda_version"] = value
            continue
        if indent == 4:
            heading = ""
            names = {"Product Name": "name", "GPU UUID": "uuid", "Minor Number": "minor"}
            if key in names and names[key] not in gpu:
                gpu[names[key]] = int(value) if key == "Minor Number" and value.isdigit() else value
        elif heading == "MIG Mode" and key == "Current":
            gpu["mig_mode"] = value
    return out


def nvidia_smi() -> tuple[dict[str, Any] | None, str]:
    """``nvidia-smi -q`` parsed, or None with why not (absent, failed)."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return None, "nvidia-smi is not on PATH: the comparison with it is skipped"
    try:
        done = subprocess.run(
            [program, "-q"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"nvidia-smi -q failed: {err}"
    if done.returncode != 0:
        return None, f"nvidia-smi -q exited {done.returncode}: {done.stderr.strip()[:200]}"
    return parse_nvidia_smi_q(done.stdout), "nvidia-smi -q"


def main() -> int:
    found = probe()
    sys.stdout.write(found.message + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
