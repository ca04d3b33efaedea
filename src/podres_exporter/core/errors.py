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


# ------------------------------------------------------------------ podres top


class FetchError(PodresError):
    """A source could not be read. ``exit_code``: 2 (cannot reach what a flag names), 1."""

    def __init__(self, message: str, *, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# ------------------------------------------------------------------ the device plugin


class RegistrationError(PodresError):
    """The kubelet refused the registration or could not be reached."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class AllocationError(PodresError):
    """Allocate was given ids it cannot honour. ``reason``: ``unknown`` or ``unhealthy``."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


# ------------------------------------------------------------------ the simulator


class ScenarioError(PodresError, ValueError):
    """A scenario is invalid. The message names the file (or source) and the key."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")


# The pod status reason of a container the device manager could not admit.
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"


class AdmissionError(PodresError):
    """A container cannot be admitted. ``str()`` is the device manager's error, ``reason``
    the pod status reason (``UnexpectedAdmissionError``, or ``OutOf<resource>`` when the
    node has no such resource at all)."""

    def __init__(self, message: str, *, reason: str = UNEXPECTED_ADMISSION_ERROR) -> None:
        super().__init__(message)
        self.reason = reason

    @property
    def pod_message(self) -> str:
        """The message of the rejected pod's status, as the kubelet words it."""
        if self.reason == UNEXPECTED_ADMISSION_ERROR:
            return f"Allocate failed due to {self}"
        return str(self)


class PreStartError(PodresError):
    """``PreStartContainer`` failed: the container would not start."""
