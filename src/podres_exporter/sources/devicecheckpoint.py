"""The kubelet's device-manager checkpoint (``--kubelet-device-checkpoint``), read-only.

``<kubelet root>/device-plugins/kubelet_internal_checkpoint`` is the JSON file in which
the kubelet keeps every device it has registered per resource, healthy or not, and the
devices it allocated (upstream ``pkg/kubelet/cm/devicemanager/checkpoint/``). It is the
only place on the node that lists unhealthy devices: the pod-resources API does not. The
exporter only reads it, bounded (:data:`MAX_CHECKPOINT_BYTES`), and again only when it
changed; its checksum is not verified (a torn read fails to decode and is retried at the
next poll, the last good reading served meanwhile).
"""

from __future__ import annotations

import json

from podres_exporter.core.kubeletfiles import DeviceCheckpoint, device_checkpoint
from podres_exporter.sources.kubeletconfig import FileReader

MAX_CHECKPOINT_BYTES = 64 << 20
"""Each allocation keeps its whole Allocate answer (base64): some KiB per container with
devices; 64 MiB holds tens of thousands."""


def decode_checkpoint(data: bytes) -> DeviceCheckpoint:
    """A checkpoint file's bytes; ValueError naming what is wrong."""
    try:
        decoded = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not JSON: {err}") from None
    return device_checkpoint(decoded)


def device_checkpoint_reader(path: str) -> FileReader[DeviceCheckpoint]:
    """The reader of the checkpoint at ``path`` (``--kubelet-device-checkpoint``)."""
    return FileReader(path, "--kubelet-device-checkpoint", MAX_CHECKPOINT_BYTES, decode_checkpoint)
