"""``python -m podres_exporter.deviceplugin --config FILE``: the device plugin alone."""

import argparse
import os

from podres_exporter.deviceplugin.main import add_plugin_arguments, run_plugin

_parser = add_plugin_arguments(
    argparse.ArgumentParser(
        prog="python -m podres_exporter.deviceplugin",
        description="Kubelet device plugin (API v1beta1) for the resources of --config.",
    )
)
raise SystemExit(run_plugin(_parser.parse_args(), os.environ))
