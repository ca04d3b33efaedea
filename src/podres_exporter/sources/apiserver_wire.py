"""The API server's side of the opt-in pod-identity route: where it is, who we are, what it says.

:func:`in_cluster` finds the API server the way every in-cluster client does: the
``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT`` variables the kubelet sets in
each container, the ServiceAccount token and the cluster's CA at the paths the kubelet
mounts them (parameters, for the tests). :class:`TokenFile` holds the token and reads it
again when the file changes: a bound token (projected volume) is rotated by the kubelet
about every hour, by swapping the volume's ``..data`` link, so the file a path names is a
new one (:mod:`~podres_exporter.daemon.fileid` tells).

:func:`pod_meta` turns one pod object, as the API server's JSON has it, into a
:class:`~podres_exporter.core.podmeta.PodMeta`; :func:`watch_event` one line of a watch.
Both check every type on the way: a pod they cannot read is None, never an exception.
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from podres_exporter.core.podmeta import OwnerRef, PodMeta, ResourceHealth, Route
from podres_exporter.daemon.fileid import FileIdentity, file_identity

SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_PATH: Final = f"{SERVICE_ACCOUNT_DIR}/token"
CA_PATH: Final = f"{SERVICE_ACCOUNT_DIR}/ca.crt"
MAX_PORT: Final = 65535
MAX_TOKEN_BYTES: Final = 64 * 1024
"""A bound token is about 1 KiB; a token file larger than 64 KiB is no token."""


class ApiServerError(Exception):
    """The API server could not be read: unreachable, refused us, or answered nonsense."""


class RelistNeeded(ApiServerError):
    """The resource version we hold is too old (``410 Gone``): list again."""


class TooLarge(ApiServerError):
    """A read refused for its size: the events it held are lost, so the route lists again."""


class Unauthorized(ApiServerError):
    """``401``: the token was not accepted (it may have been rotated since we read it)."""


@dataclass(frozen=True, slots=True)
class ApiServer:
    """Where the API server is and how we prove who we are to it."""

    host: str
    port: int
    token_path: str = TOKEN_PATH
    ca_path: str = CA_PATH

    @property
    def netloc(self) -> str:
        """``host:port`` as a URL has it (an IPv6 address in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts the cluster's CA alone and checks the host name."""
        try:
            return ssl.create_default_context(cafile=self.ca_path)
        except (OSError, ssl.SSLError) as err:
            raise ApiServerError(f"the cluster CA {self.ca_path}: {err}") from err


def in_cluster(
    env: Mapping[str, str], *, token_path: str = TOKEN_PATH, ca_path: str = CA_PATH
) -> ApiServer | None:
    """The API server of the cluster this process runs in, or None outside a cluster
    (no ``KUBERNETES_SERVICE_HOST``). ValueError for a port that is not one."""
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    if not host:
        return None
    raw = env.get("KUBERNETES_SERVICE_PORT", "443").strip() or "443"
    if not raw.isdigit() or not 0 < int(raw) <= MAX_PORT:
        raise ValueError(f"KUBERNETES_SERVICE_PORT={raw!r} is not a port")
    return ApiServer(host.strip("[]"), int(raw), token_path, ca_path)


class TokenFile:
    """The ServiceAccount token, read again when its file changes or when asked to."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._identity: FileIdentity | None = None
        self._token = ""

    def get(self, *, force: bool = False) -> str:
        """The current token; the file read again when it is a new one, or ``force``."""
        identity = file_identity(self.path)
        if force or identity is None or identity != self._identity or not self._token:
            self._token = self._read()
            self._identity = identity
        return self._token

    def _read(self) -> str:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read(MAX_TOKEN_BYTES + 1)
        except OSError as err:
            raise ApiServerError(f"the ServiceAccount token {self.path}: {err}") from err
        if len(data) > MAX_TOKEN_BYTES:
            raise ApiServerError(f"the ServiceAccount token {self.path}: over 64 KiB")
        token = data.decode("ascii", errors="replace").strip()
        if not token or any(c in token for c in "\r\n\ufffd"):
            raise ApiServerError(f"the ServiceAccount token {self.path}: empty or not a token")
        return token


def pods_path(node: str, **params: str) -> str:
    """The request path of this node's pods: ``/api/v1/pods`` with the field selector."""
    query = {"fieldSelector": f"spec.nodeName={node}", **params}
    return "/api/v1/pods?" + urllib.parse.urlencode(query)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _owners(meta: dict[str, Any]) -> tuple[OwnerRef, ...]:
    owners = []
    for ref in map(_dict, _list(meta.get("ownerReferences"))):
        kind, name = _str(ref.get("kind")), _str(ref.get("name"))
        if kind and name:
            owners.append(OwnerRef(kind, name, ref.get("controller") is True))
    return tuple(owners)


def _health(status: dict[str, Any]) -> Mapping[str, tuple[ResourceHealth, ...]]:
    """Each container's ``allocatedResourcesStatus`` (KEP-4680; absent before 1.31)."""
    out: dict[str, tuple[ResourceHealth, ...]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in map(_dict, _list(status.get(key))):
            entries = [
                ResourceHealth(
                    _str(res.get("name")), _str(dev.get("resourceID")), _str(dev.get("health"))
                )
                for res in map(_dict, _list(cs.get("allocatedResourcesStatus")))
                for dev in map(_dict, _list(res.get("resources")))
            ]
            if entries and _str(cs.get("name")):
                out[_str(cs.get("name"))] = tuple(entries)
    return MappingProxyType(out)


def pod_meta(obj: Any) -> PodMeta | None:
    """One pod object (``v1.Pod`` as JSON) as a PodMeta; None without a namespace, name
    and UID. Labels that are not strings are left out."""
    pod = _dict(obj)
    meta, status = _dict(pod.get("metadata")), _dict(pod.get("status"))
    namespace, name, uid = (_str(meta.get(k)) for k in ("namespace", "name", "uid"))
    if not (namespace and name and uid):
        return None
    labels = {k: v for k, v in _dict(meta.get("labels")).items() if isinstance(v, str)}
    return PodMeta(
        namespace=namespace,
        name=name,
        uid=uid,
        route=Route.APISERVER,
        phase=_str(status.get("phase")),
        qos_class=_str(status.get("qosClass")),
        owners=_owners(meta),
        labels=MappingProxyType(labels),
        resource_health=_health(status),
    )


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch: its type, the object's resource version, and the pod (None
    for a BOOKMARK or an ERROR). ``code`` is an ERROR's status code."""

    type: str
    resource_version: str
    pod: PodMeta | None = None
    code: int = 0
    message: str = ""


def watch_event(line: bytes) -> WatchEvent:
    """One line of a watch answer; ApiServerError when it is not a watch event."""
    try:
        event = json.loads(line)
    except ValueError as err:
        raise ApiServerError(f"a watch event that is not JSON: {err}") from err
    event = _dict(event)
    kind, obj = _str(event.get("type")), _dict(event.get("object"))
    version = _str(_dict(obj.get("metadata")).get("resourceVersion"))
    if kind == "ERROR":
        code = obj.get("code")
        return WatchEvent(
            kind, version, code=code if isinstance(code, int) else 0,
            message=_str(obj.get("message"))[:200],
        )  # fmt: skip
    if kind == "BOOKMARK":
        return WatchEvent(kind, version)
    if kind in ("ADDED", "MODIFIED", "DELETED"):
        return WatchEvent(kind, version, pod=pod_meta(obj))
    raise ApiServerError(f"a watch event of unknown type {kind[:40]!r}")


def list_answer(body: bytes) -> tuple[list[PodMeta], str, str]:
    """One page of a list: its pods, the list's resource version, and its ``continue``
    token (empty on the last page). ApiServerError when it is not a list."""
    try:
        answer = _dict(json.loads(body))
    except ValueError as err:
        raise ApiServerError(f"a list answer that is not JSON: {err}") from err
    meta = _dict(answer.get("metadata"))
    version = _str(meta.get("resourceVersion"))
    if not version or not isinstance(answer.get("items"), list):
        raise ApiServerError("a list answer without items or resourceVersion")
    pods = [p for p in map(pod_meta, answer["items"]) if p is not None]
    return pods, version, _str(meta.get("continue"))
