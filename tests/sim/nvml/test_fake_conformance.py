"""The NVML code is checked against the real pynvml API.

What ``sources/gpu/`` uses of the injected module is found by reading its
modules' source (every ``nvml*`` / ``NVML*`` attribute and every such name in a string,
as given to ``getattr``), so a new call cannot escape the check. Each one must
exist in the real ``pynvml`` and in FakeNvml, functions with the same parameters,
constants with the same values; every field the backend reads of an NVML result
must be a field of the real ctypes structure.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from podres_exporter.sources import gpu as gpu_module
from podres_exporter.sources.gpu import NVML_STRUCTS
from podres_sim.nvml import FakeEventData, FakeNvml

_NAME = re.compile(r"^(nvml[A-Z]\w*|NVML\w*)$")


def _names_used_by_backend() -> set[str]:
    names: set[str] = set()
    for module in sorted(Path(gpu_module.__file__).parent.glob("*.py")):
        names |= _names_in(ast.parse(module.read_text()))
    return names - {"NVML_STRUCTS"}


def _names_in(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _NAME.match(node.attr):
            names.add(node.attr)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _NAME.match(node.value)
        ):
            names.add(node.value)
    return names


def _is_error_class(value: object) -> bool:
    return inspect.isclass(value) and issubclass(value, BaseException)


USED = sorted(_names_used_by_backend())
FUNCTIONS = [n for n in USED if inspect.isfunction(getattr(pynvml, n, None))]
CLASSES = [n for n in USED if _is_error_class(getattr(pynvml, n, None))]
# Structure names (NVML_STRUCTS) are checked field by field below, not on the fake.
STRUCTS = [n for n in USED if n in NVML_STRUCTS.values()]
CONSTANTS = [n for n in USED if n not in {*FUNCTIONS, *CLASSES, *STRUCTS}]
FAKE_FUNCTIONS = sorted(
    n for n, v in vars(FakeNvml).items() if n.startswith("nvml") and inspect.isfunction(v)
)


def _params(fn: Callable[..., object]) -> list[tuple[str, object, object]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def test_the_scan_finds_the_backend_api() -> None:
    """The source scan sees the calls, constants and error class the backend uses."""
    assert len(FUNCTIONS) >= 30
    assert {"nvmlInit", "nvmlShutdown", "nvmlEventSetWait", "nvmlDeviceGetNumaNodeId"} <= set(
        FUNCTIONS
    )
    assert "NVMLError" in CLASSES
    assert {"NVML_ERROR_NOT_SUPPORTED", "nvmlEventTypeXidCriticalError"} <= set(CONSTANTS)
    assert "nvmlClocksEventReasonGpuIdle" in CONSTANTS


def test_every_name_the_backend_uses_exists_in_the_real_pynvml() -> None:
    """Every nvml*/NVML* name sources/gpu/ uses is defined by the installed pynvml."""
    missing = [n for n in USED if not hasattr(pynvml, n)]
    assert missing == []


@pytest.mark.parametrize("name", FUNCTIONS)
def test_backend_functions_match_the_real_signature(name: str) -> None:
    """Each function the backend calls exists in the fake with the real parameter list."""
    assert hasattr(FakeNvml, name), f"FakeNvml lacks {name}"
    assert _params(getattr(FakeNvml(), name)) == _params(getattr(pynvml, name))


@pytest.mark.parametrize("name", FAKE_FUNCTIONS)
def test_every_fake_function_is_a_real_one(name: str) -> None:
    """The fake defines no nvml* function the real module lacks, nor other parameters."""
    real = getattr(pynvml, name, None)
    assert inspect.isfunction(real), f"pynvml has no function {name}"
    assert _params(getattr(FakeNvml(), name)) == _params(real)


@pytest.mark.parametrize("name", CONSTANTS)
def test_constants_have_the_real_values(name: str) -> None:
    """Each constant the backend uses has the same value in the fake as in pynvml."""
    assert getattr(FakeNvml, name) == getattr(pynvml, name)


@pytest.mark.parametrize("name", CLASSES)
def test_error_classes_are_the_real_ones(name: str) -> None:
    """The fake exposes pynvml's own error classes."""
    assert getattr(FakeNvml, name) is getattr(pynvml, name)


def test_fake_raises_the_real_error_subclasses() -> None:
    """The fake's errors are pynvml's NVMLError_* with the real .value code."""
    fake = FakeNvml(driver_missing=True)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound) as info:
        fake.nvmlInit()
    assert info.value.value == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.load_driver()
    fake.nvmlInit()
    handle = fake.add_gpu("GPU-0c5a1f2e-8a7f-4c1e-9b3d-111111111111")
    fake.set_unsupported("nvmlDeviceGetPowerUsage")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetPowerUsage(handle)
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlEventSetWait(fake.nvmlEventSetCreate(), 0)


@pytest.mark.parametrize("protocol", list(NVML_STRUCTS), ids=lambda p: p.__name__)
def test_struct_fields_read_exist_in_the_real_structures(protocol: type) -> None:
    """Every field the backend reads of an NVML result is in the real ctypes _fields_."""
    struct = getattr(pynvml, NVML_STRUCTS[protocol])
    real_fields = {f[0] for f in struct._fields_}
    read = set(protocol.__annotations__)
    assert read
    assert read <= real_fields, f"{protocol.__name__}: {read - real_fields}"


def test_the_backend_reads_the_documented_fields() -> None:
    """The structure map covers the results the backend reads, with the expected fields."""
    fields = {name: set(p.__annotations__) for p, name in NVML_STRUCTS.items()}
    assert fields == {
        "c_nvmlUtilization_t": {"gpu", "memory"},
        "c_nvmlMemory_t": {"used", "total"},
        "nvmlPciInfo_t": {"busId"},
        "c_nvmlProcessInfo_t": {"pid", "usedGpuMemory"},
        "c_nvmlProcessUtilizationSample_t": {"pid", "timeStamp", "smUtil", "memUtil"},
        "c_nvmlEventData_t": {"device", "eventType", "eventData"},
    }


def test_fake_event_data_has_the_real_fields() -> None:
    """The fake's event record has exactly the fields of c_nvmlEventData_t."""
    real = [f[0] for f in pynvml.c_nvmlEventData_t._fields_]
    assert list(FakeEventData.__dataclass_fields__) == real
