"""A pod's shape from what users have: a manifest (``-f FILE``, ``-f -``) or flags.

A manifest is YAML or JSON, one document or several (``---``), or a ``List`` (what
``kubectl get -o yaml`` writes). The pod is a ``Pod``'s spec, or the pod template of a
``Deployment``, ``StatefulSet``, ``DaemonSet``, ``ReplicaSet``, ``ReplicationController``,
``Job``, ``CronJob`` or ``PodTemplate``; the first such document, or the one
``--name`` names. Only the containers' and init containers' ``resources`` are read.

On the command line, ``--cpu``, ``--memory``, ``--gpu`` and ``--resource NAME=QUANTITY``
make one container whose limits equal its requests (a Guaranteed pod when it names cpu
and memory); each ``--container 'cpu=4,memory=8Gi,nvidia.com/gpu=1'`` adds another.

Every error is a :class:`~podres_exporter.core.errors.ConfigError` naming the flag or the
file and the key to fix (``pod.yaml: spec.containers[0].resources.limits.cpu: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from podres_exporter.core.errors import ConfigError
from podres_exporter.core.topology import CPU, MEMORY, Container, Pod
from podres_exporter.fit.quantity import resource_amount

__all__ = ["GPU_RESOURCE", "MAX_MANIFEST_BYTES", "Shape", "pod_from_flags", "pod_from_manifest"]

GPU_RESOURCE = "nvidia.com/gpu"
"""The resource ``--gpu N`` requests."""
MAX_MANIFEST_BYTES = 8 * 2**20
"""The largest manifest read (a pod spec is kilobytes; a List of a namespace's workloads
may be a few megabytes)."""

# Where each kind keeps its pod spec, as a path of keys from the document's root.
_POD_SPEC: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
KINDS = tuple(_POD_SPEC)
"""The kinds whose pod ``podres fit`` reads."""


@dataclass(frozen=True, slots=True)
class Shape:
    """The pod asked about and where it came from (``kind/name`` of a manifest, or
    ``flags``)."""

    pod: Pod
    origin: str


class _Bad(ValueError):
    """A problem at a key path of a document."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)


def _documents(text: str, where: str) -> list[Any]:
    try:
        return [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: not YAML{at}: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deep to be a manifest") from None


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _workloads(docs: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every document (and every item of a ``List``) that is a mapping, with its key path."""
    out: list[tuple[str, dict[str, Any]]] = []
    for i, doc in enumerate(docs):
        at = f"document {i + 1}: " if len(docs) > 1 else ""
        if isinstance(doc, dict) and doc.get("kind") == "List":
            items = doc.get("items")
            if not isinstance(items, list):
                raise _Bad(_join(at, "items"), "a List needs a list of items")
            out.extend(
                (_join(at, f"items[{j}]"), item)
                for j, item in enumerate(items)
                if isinstance(item, dict)
            )
        elif isinstance(doc, dict):
            out.append((at, doc))
    return out


def _join(path: str, key: str) -> str:
    if not path or path.endswith(": "):  # the root, or a document's ("document 2: ")
        return path + key
    return f"{path}{key}" if key.startswith("[") else f"{path}.{key}"


def _name_of(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _pick(docs: Sequence[Any], name: str) -> tuple[str, dict[str, Any]]:
    """The first workload of a known kind (the one named ``name`` if given)."""
    found = _workloads(docs)
    kinds = [(p, d) for p, d in found if d.get("kind") in _POD_SPEC]
    if name:
        named = [(p, d) for p, d in kinds if _name_of(d) == name]
        if not named:
            there = ", ".join(f"{d['kind']}/{_name_of(d)}" for _, d in kinds) or "none"
            raise _Bad("", f"no workload named {name!r} (--name); workloads: {there}")
        return named[0]
    if not kinds:
        seen = sorted({str(d.get("kind")) for _, d in found if "kind" in d})
        also = f" (found: {', '.join(seen)})" if seen else ""
        raise _Bad("", f"no pod or workload{also}; expected a kind of {', '.join(KINDS)}")
    return kinds[0]


def _pod_spec(path: str, doc: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    node: Any = doc
    for key in _POD_SPEC[str(doc["kind"])]:
        path = _join(path, key)
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            raise _Bad(path, "missing, or not a mapping")
        node = node[key]
    return path, node


def _resources(path: str, table: Any) -> dict[str, int]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise _Bad(path, "expected a mapping of resource names to quantities")
    out: dict[str, int] = {}
    for resource, value in table.items():
        if not isinstance(resource, str) or not resource:
            raise _Bad(path, f"{resource!r} is no resource name")
        try:
            out[resource] = resource_amount(resource, value)
        except ValueError as err:
            raise _Bad(_join(path, resource), str(err)) from None
    return out


def _container(path: str, raw: Any, index: int) -> Container:
    if not isinstance(raw, dict):
        raise _Bad(path, "expected a container (a mapping)")
    name = raw.get("name", f"container-{index}")
    if not isinstance(name, str):
        raise _Bad(_join(path, "name"), "expected a string")
    res = raw.get("resources") or {}
    if not isinstance(res, dict):
        raise _Bad(_join(path, "resources"), "expected a mapping with requests and limits")
    at = _join(path, "resources")
    return Container(
        name=name,
        requests=_resources(_join(at, "requests"), res.get("requests")),
        limits=_resources(_join(at, "limits"), res.get("limits")),
    )


def _containers(path: str, spec: Mapping[str, Any], key: str) -> tuple[Container, ...]:
    raw = spec.get(key)
    if raw is None:
        return ()
    at = _join(path, key)
    if not isinstance(raw, list):
        raise _Bad(at, "expected a list of containers")
    return tuple(_container(_join(at, f"[{i}]"), c, i) for i, c in enumerate(raw))


def pod_from_manifest(text: str, where: str, *, name: str = "") -> Shape:
    """The pod of the manifest ``text`` (read from ``where``, a path or ``-`` for stdin,
    as messages name it); ConfigError naming ``where`` and the key at fault."""
    shown = "stdin (-f -)" if where == "-" else f"-f {where}"
    docs = _documents(text, shown)
    try:
        path, doc = _pick(docs, name)
        spec_path, spec = _pod_spec(path, doc)
        containers = _containers(spec_path, spec, "containers")
        if not containers:
            raise _Bad(_join(spec_path, "containers"), "a pod needs at least one container")
        init = _containers(spec_path, spec, "initContainers")
    except _Bad as err:
        raise ConfigError(f"{shown}: {err}") from None
    kind, pod_name = str(doc["kind"]), _name_of(doc) or "unnamed"
    return Shape(Pod(pod_name, containers, init), f"{kind}/{pod_name}")


def _parse_spec(text: str, flag: str) -> dict[str, int]:
    """``cpu=4,memory=8Gi,nvidia.com/gpu=1`` (``--container``) as resource amounts."""
    out: dict[str, int] = {}
    for part in text.split(","):
        resource, eq, value = part.strip().partition("=")
        if not eq or not resource.strip():
            raise ConfigError(f"{flag} {text!r}: expected RESOURCE=QUANTITY[,...], got {part!r}")
        out[resource.strip()] = _amount(resource.strip(), value, f"{flag} {text!r}: {resource}")
    return out


def _amount(resource: str, value: object, what: str) -> int:
    try:
        return resource_amount(resource, value)
    except ValueError as err:
        raise ConfigError(f"{what}: {err}") from None


def pod_from_flags(  # noqa: PLR0913 - one argument per shape flag
    *,
    cpu: str | None,
    memory: str | None,
    gpu: str | None,
    resources: Sequence[str],
    containers: Sequence[str],
    name: str = "shape",
) -> Shape:
    """The pod the shape flags describe; ConfigError naming the flag at fault, or when no
    flag names a resource."""
    first: dict[str, int] = {}
    if cpu is not None:
        first[CPU] = _amount(CPU, cpu, f"--cpu {cpu!r}")
    if memory is not None:
        first[MEMORY] = _amount(MEMORY, memory, f"--memory {memory!r}")
    if gpu is not None:
        first[GPU_RESOURCE] = _amount(GPU_RESOURCE, gpu, f"--gpu {gpu!r}")
    for text in resources:
        resource, eq, value = text.partition("=")
        if not eq or not resource:
            raise ConfigError(f"--resource {text!r}: expected NAME=QUANTITY")
        first[resource] = _amount(resource, value, f"--resource {text!r}")
    specs = [first] if first else []
    specs.extend(_parse_spec(text, "--container") for text in containers)
    if not specs:
        raise ConfigError(
            "no pod to fit: give -f FILE (or -f - for stdin), or a shape such as "
            "--cpu 8 --memory 64Gi --gpu 4"
        )
    built = tuple(
        Container(f"c{i}", requests=dict(spec), limits=dict(spec)) for i, spec in enumerate(specs)
    )
    return Shape(Pod(name, built), "flags")
