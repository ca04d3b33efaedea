"""podres-exporter: which container holds which CPUs, devices and memory on a node."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("podres-exporter")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
