"""podres-exporter: which container holds which CPUs, devices and memory on a node."""

import os
from importlib.metadata import PackageNotFoundError, version

# gRPC's C core writes lines of its own to stderr (an INFO line for a GOAWAY at each
# kubelet restart), which are no events of ours and break a JSON log: errors only,
# unless the operator sets GRPC_VERBOSITY. It is read when grpc is imported, so here,
# before any module of the package imports grpc.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

try:
    __version__ = version("podres-exporter")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
