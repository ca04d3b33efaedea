"""podres-exporter: which container holds which CPUs, devices and memory on a node.

Importing the package does little on purpose: the daemon commands' first step
(:mod:`podres_exporter.entry`) runs right after it, and a SIGHUP before that step would
still end them. ``__version__`` is therefore looked up when first asked for.
"""

import os

# gRPC's C core writes lines of its own to stderr (an INFO line for a GOAWAY at each
# kubelet restart), which are no events of ours and break a JSON log: errors only,
# unless the operator sets GRPC_VERBOSITY. It is read when grpc is imported, so here,
# before any module of the package imports grpc.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed metadata when first asked for."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("podres-exporter")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
