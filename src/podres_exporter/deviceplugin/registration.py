"""Register: tell the kubelet about a plugin socket, through ``<dir>/kubelet.sock``.

Version ``v1beta1``, the socket's file name, the resource name, and the same options
GetDevicePluginOptions returns. The kubelet dials back during the call; the server
answers on its own threads. gRPC errors become :class:`RegistrationError` here.
"""

from __future__ import annotations

import os
import stat
from typing import Final

import grpc

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from podres_exporter.core.errors import RegistrationError
from podres_exporter.daemon.fileid import FileIdentity, file_identity
from podres_exporter.deviceplugin.config import ResourceConfig
from podres_exporter.deviceplugin.servicer import plugin_options
from podres_exporter.deviceplugin.serving import rpc_text

API_VERSION: Final = "v1beta1"
KUBELET_SOCKET: Final = "kubelet.sock"


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def register(
    kubelet_path: str, endpoint: str, resource: ResourceConfig, *, timeout_s: float
) -> FileIdentity:
    """Register ``endpoint`` for ``resource`` with the kubelet at ``kubelet_path``; the
    identity of the kubelet socket that answered. RegistrationError when refused."""
    kubelet = file_identity(kubelet_path)
    if kubelet is None or not _is_socket(kubelet_path):
        raise RegistrationError(f"no kubelet socket at {kubelet_path}", code="UNAVAILABLE")
    request = pb.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint,
        resource_name=resource.name,
        options=plugin_options(resource),
    )
    with grpc.insecure_channel(
        f"unix://{kubelet_path}", options=[("grpc.use_local_subchannel_pool", 1)]
    ) as channel:
        stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.Register(request, timeout=timeout_s)
        except grpc.RpcError as err:
            code = err.code().name if isinstance(err, grpc.Call) else "UNKNOWN"
            raise RegistrationError(
                f"Register with {kubelet_path}: {rpc_text(err)}", code=code
            ) from err
    return kubelet
