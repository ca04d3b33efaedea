"""A stand-in for the NVIDIA driver, to run the GPU tier's own tests where none is.

:func:`write_standin` writes a ``pynvml`` module that answers with a
:class:`~podres_sim.nvml.FakeNvml`: put its folder on ``PYTHONPATH`` and every process
of the tier, the exporter and the plugin included, "finds" the same GPUs: an H100 whose
board answers NOT_SUPPORTED for PCIe throughput, and an A100 with MIG already on and one
MIG device. The module answers each NVML function the fake has from one fake, made at
the first call of one (the simulator imports pynvml itself, so the fake cannot be made
at import); everything else (constants, errors, structures) is the real module's, and an
NVML function the fake lacks is absent, as in an older pynvml. It proves the tier's tests
run, skip and report as they should; it proves nothing about a real driver.
"""

from __future__ import annotations

from pathlib import Path

H100 = "GPU-5f1d8c3a-0b6e-4c2d-9a7f-3e4d5c6b7a80"
A100 = "GPU-5f1d8c3a-0b6e-4c2d-9a7f-3e4d5c6b7a81"
MIG = "MIG-5f1d8c3a-0b6e-4c2d-9a7f-3e4d5c6b7a82"

_MODULE = f'''\
"""A stand-in NVIDIA driver for the GPU tier's own tests, imported as pynvml."""
import importlib
import inspect
import os
import sys
import types

_here = os.path.dirname(os.path.abspath(__file__))
_name = __name__
del sys.modules[_name]
_path = list(sys.path)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
_real = importlib.import_module("pynvml")
sys.path[:] = _path
_KEPT = {{"nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct"}}


class _Standin(types.ModuleType):
    _fake = None

    def __dir__(self):
        return dir(_real)

    def __getattr__(self, name):
        value = getattr(_real, name)
        if not (inspect.isfunction(value) and name.startswith("nvml")) or name in _KEPT:
            return value
        answer = getattr(_Standin._made(), name, None)
        if not inspect.ismethod(answer):
            raise AttributeError(name)
        return answer

    @staticmethod
    def _made():
        if _Standin._fake is None:
            from podres_sim.nvml import FakeNvml

            fake = FakeNvml()
            fake.add_gpu({H100!r}, pci_bus_id="0000:17:00.0", numa_node=0, memory_used=1 << 30)
            fake.set_unsupported("nvmlDeviceGetPcieThroughput", {H100!r})
            migs = [({MIG!r}, 7, 0, 10 << 30)]
            fake.add_mig_gpu({A100!r}, instances=migs, pci_bus_id="0000:9a:00.0")
            _Standin._fake = fake
        return _Standin._fake


sys.modules[_name] = _Standin(_name)
'''


def write_standin(directory: Path) -> Path:
    """The stand-in ``pynvml`` module in ``directory`` (which goes on PYTHONPATH)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pynvml.py"
    path.write_text(_MODULE)
    return path
