"""The project's exception tree.

Third-party errors (``grpc.RpcError``, ``OSError``, ``tomllib.TOMLDecodeError``) are
caught at the edge that meets them and re-raised as one of these, ``from`` the
original, so the rest of the code handles a small documented set.
"""

from __future__ import annotations


class PodresError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(PodresError):
    """A setting has a bad value. The message names the flag, variable or file key."""


class SourceError(PodresError):
    """A data source (the kubelet, sysfs) could not be read."""


class KubeletError(SourceError):
    """The kubelet answered with an error we do not retry specially.

    ``code`` is the gRPC status code name (``"UNKNOWN"``, ``"INTERNAL"`` ...).
    """

    def __init__(self, message: str, *, method: str, code: str) -> None:
        super().__init__(message)
        self.method = method
        self.code = code


class KubeletUnavailable(KubeletError):
    """The kubelet cannot be reached: socket missing, refused, or UNAVAILABLE."""


class KubeletRateLimited(KubeletError):
    """The kubelet rejected the call with its rate limiter (RESOURCE_EXHAUSTED)."""


class KubeletResponseTooLarge(KubeletError):
    """The response exceeded our receive limit; raise --kubelet-max-message-size."""


class KubeletTimeout(KubeletError):
    """The call ran past its deadline."""


class KubeletNotServed(KubeletError):
    """The RPC is unimplemented or disabled by a feature gate on this kubelet."""
