"""The simulated kubelet: the pod-resources gRPC server, the node's admission (CPU,
memory and device managers, churn) and the device manager that device plugins
register with.
"""

from podres_sim.kubelet.node import Node
from podres_sim.kubelet.pods import (
    ChurnEvent,
    ClaimGrant,
    ContainerState,
    DeviceGrant,
    MemoryGrant,
    NodeSnapshot,
    PodState,
)
from podres_sim.kubelet.ratelimit import RATE_LIMITED, TokenBucket
from podres_sim.kubelet.server import (
    GET_ALLOCATABLE_DISABLED,
    GET_DISABLED,
    V1_GET_ALLOCATABLE_METHOD,
    V1_GET_METHOD,
    V1_LIST_METHOD,
    V1ALPHA1_LIST_METHOD,
    SimKubelet,
)

__all__ = [
    "GET_ALLOCATABLE_DISABLED",
    "GET_DISABLED",
    "RATE_LIMITED",
    "V1ALPHA1_LIST_METHOD",
    "V1_GET_ALLOCATABLE_METHOD",
    "V1_GET_METHOD",
    "V1_LIST_METHOD",
    "ChurnEvent",
    "ClaimGrant",
    "ContainerState",
    "DeviceGrant",
    "MemoryGrant",
    "Node",
    "NodeSnapshot",
    "PodState",
    "SimKubelet",
    "TokenBucket",
]
