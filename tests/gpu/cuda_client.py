"""The smallest CUDA client: a process with a context (and 64 MiB) on one GPU.

    python -m tests.gpu.cuda_client [DEVICE_UUID]

It needs no package: it calls the CUDA driver API in ``libcuda.so.1``, which the NVIDIA
driver installs beside NVML. ``CUDA_VISIBLE_DEVICES`` set to the device's UUID (a GPU's
or a MIG device's) makes it CUDA device 0. It prints ``ready <pid>`` once the context
holds its memory, then waits until its stdin closes (or it is signalled), and exits.
It changes no setting of the GPU. :func:`find_client` says whether one can run here.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence

_LIBCUDA = "libcuda.so.1"
_MEMORY = 64 << 20


def _check(lib: ctypes.CDLL, what: str, code: int) -> None:
    if code != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(code, ctypes.byref(name))
        raise RuntimeError(f"{what}: CUDA error {code} ({(name.value or b'?').decode()})")


def find_client() -> tuple[bool, str]:
    """Whether the CUDA driver library loads here (True) or why not."""
    try:
        ctypes.CDLL(_LIBCUDA)
    except OSError as err:
        return False, f"no CUDA client can run here ({_LIBCUDA}: {err})"
    return True, f"a CUDA driver API client ({_LIBCUDA} through ctypes)"


def hold_context() -> None:
    """Create a context on CUDA device 0 and allocate memory in it; raises on failure."""
    lib = ctypes.CDLL(_LIBCUDA)
    _check(lib, "cuInit", lib.cuInit(0))
    device = ctypes.c_int()
    _check(lib, "cuDeviceGet", lib.cuDeviceGet(ctypes.byref(device), 0))
    context = ctypes.c_void_p()
    _check(lib, "cuCtxCreate", lib.cuCtxCreate_v2(ctypes.byref(context), 0, device))
    pointer = ctypes.c_uint64()
    _check(lib, "cuMemAlloc", lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(_MEMORY)))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        os.environ["CUDA_VISIBLE_DEVICES"] = args[0]
    try:
        hold_context()
    except (OSError, RuntimeError, AttributeError) as err:
        sys.stdout.write(f"failed {err}\n")
        sys.stdout.flush()
        return 1
    sys.stdout.write(f"ready {os.getpid()}\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the test closes our stdin
    return 0


if __name__ == "__main__":
    sys.exit(main())
