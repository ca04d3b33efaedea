"""The exporter's "finished pod" rule against the real kubelet of the end-to-end cluster.

``sources.liveness`` reads the kubelet's pod log directories and the pod cgroups under
``kubepods``; ``accounting.pod_state`` says running / finished / undecided from them. Here
a pod that keeps running and a pod that exits at once are created in a namespace of their
own, and the rule's answer for what the real kubelet lists is checked against the API
server's phase. The test needs nothing installed and removes its namespace afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from podres_exporter._generated.podresources.v1 import api_pb2, api_pb2_grpc
from podres_exporter.core.accounting import pod_state
from podres_exporter.core.model import PodLiveness
from podres_exporter.sources.liveness import read_liveness
from tests.e2e.cluster import CGROUP_ROOT, Cluster, wait_for
from tests.e2e.images import PROJECT_IMAGE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NAMESPACE = "e2e-liveness"
RUNNING = "sleeper"
FINISHED = "done"


def pod_manifest(name: str, script: str, resources: dict[str, Any]) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: {PROJECT_IMAGE}
      imagePullPolicy: Never
      command: [sh, -c, {script!r}]
      resources: {resources}
"""


def listed_pods(cluster: Cluster) -> api_pb2.ListPodResourcesResponse:
    """The kubelet's own List answer, straight off its pod-resources socket."""
    with grpc.insecure_channel(f"unix://{cluster.pod_resources_socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        response: api_pb2.ListPodResourcesResponse = stub.List(
            api_pb2.ListPodResourcesRequest(), timeout=5
        )
        return response


def pod_cgroups(uid: str) -> list[str]:
    """Every cgroup directory of pod ``uid`` under a kubepods hierarchy, found by name."""
    return sorted(str(p) for p in CGROUP_ROOT.glob(f"*/kubepods/**/pod{uid}") if p.is_dir())


def phases(cluster: Cluster) -> dict[str, tuple[str, str]]:
    """(phase, uid) of every pod in the test's namespace."""
    return {
        p["metadata"]["name"]: (p["status"].get("phase", ""), p["metadata"]["uid"])
        for p in cluster.get_json("pods", "-n", NAMESPACE)["items"]
    }


@pytest.fixture
def two_pods(cluster: Cluster) -> Iterator[dict[str, str]]:
    """A pod Running and a pod Succeeded in a namespace of their own; their UIDs by name.

    The namespace is deleted afterwards and its pods waited for, so that the tests that
    follow find the node as they expect it (no pod of this test, no CPU held).
    """
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input_text=f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NAMESPACE}}}\n",
    )
    try:
        wait_for(
            "the namespace's default service account",
            lambda: (
                cluster.kubectl("get", "sa", "default", "-n", NAMESPACE, check=False).returncode
                == 0
            ),
            timeout=60,
        )
        # The sleeper first, so that nothing is admitted after the finished pod: the CPU
        # manager may release a finished pod's CPUs when it next allocates.
        cluster.kubectl(
            "apply", "-f", "-", input_text=pod_manifest(RUNNING, "exec sleep infinity", {})
        )
        wait_for(
            f"{RUNNING} to be Running",
            lambda: phases(cluster).get(RUNNING, ("",))[0] == "Running",
            timeout=120,
            interval=0.5,
        )
        # The finished pod holds a whole CPU and pinned memory: what a kubelet before 1.34
        # goes on listing once the pod is done.
        guaranteed = {"limits": {"cpu": "1", "memory": "64Mi"}}
        cluster.kubectl("apply", "-f", "-", input_text=pod_manifest(FINISHED, "exit 0", guaranteed))
        settled = wait_for(
            f"{FINISHED} to be Succeeded",
            lambda: (p := phases(cluster)).get(FINISHED, ("",))[0] == "Succeeded" and p,
            timeout=120,
            interval=0.5,
        )
        assert settled[RUNNING][0] == "Running", settled
        yield {name: uid for name, (_, uid) in settled.items()}
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s")
        wait_for(
            f"the pods of {NAMESPACE} to be gone from the kubelet's List",
            lambda: not any(p.namespace == NAMESPACE for p in listed_pods(cluster).pod_resources),
            timeout=60,
            interval=0.5,
        )


def test_finished_pod_rule_on_the_real_kubelet(cluster: Cluster, two_pods: dict[str, str]) -> None:
    """Every Running pod the real kubelet lists is ``running`` by the rule; the Succeeded
    pod is ``finished``.

    Observed on the v1.28.7 kubelet: List goes on returning the Succeeded pod, its
    container still with its exclusive CPU and its 64 MiB of pinned memory, for as long as
    it was watched (30 s, no pod admitted meanwhile) and until the pod is deleted; its log
    directory
    ``/var/log/pods/<ns>_<pod>_<uid>`` stays, while the kubelet removes its
    ``kubepods/<qos>/pod<uid>`` cgroups (cgroupfs driver, cgroup v1) a moment after.
    """
    done_uid = two_pods[FINISHED]
    # The kubelet removes a finished pod's cgroup in its housekeeping, a little after the
    # API server shows the pod Succeeded.
    wait_for(
        f"the kubelet to remove the cgroups of {FINISHED}",
        lambda: not pod_cgroups(done_uid),
        timeout=60,
        interval=0.5,
    )
    assert pod_cgroups(two_pods[RUNNING]), f"no pod cgroup for {RUNNING} under {CGROUP_ROOT}"

    listed = listed_pods(cluster)
    liveness = read_liveness(cluster.pod_logs, CGROUP_ROOT)
    assert liveness.pod_uids is not None, f"{cluster.pod_logs} unreadable"
    assert liveness.live_uids is not None, f"no kubepods hierarchy under {CGROUP_ROOT}"
    assert liveness.pod_uids.get((NAMESPACE, FINISHED)) == frozenset({done_uid})
    assert liveness.pod_uids.get((NAMESPACE, RUNNING)) == frozenset({two_pods[RUNNING]})

    running_in_api = {
        (p["metadata"]["namespace"], p["metadata"]["name"])
        for p in cluster.get_json("pods", "--all-namespaces")["items"]
        if p["status"].get("phase") == "Running"
    }
    listed_keys = {(p.namespace, p.name) for p in listed.pod_resources}
    assert (NAMESPACE, RUNNING) in listed_keys
    for key in sorted(listed_keys & running_in_api):
        assert pod_state(liveness, *key) == "running", (key, _facts(liveness, key))

    # What the v1.28 kubelet does: the finished pod is still listed, its container still
    # holding the exclusive CPU and the pinned memory it had while it ran.
    (done,) = [p for p in listed.pod_resources if (p.namespace, p.name) == (NAMESPACE, FINISHED)]
    (main,) = done.containers
    assert main.name == "main"
    assert len(main.cpu_ids) == 1, main
    assert [(m.memory_type, m.size) for m in main.memory] == [("memory", 64 * 2**20)], main
    assert pod_state(liveness, NAMESPACE, FINISHED) == "finished", _facts(
        liveness, (NAMESPACE, FINISHED)
    )


def _facts(liveness: PodLiveness, key: tuple[str, str]) -> str:
    """The facts behind one pod's state, for an assertion's message."""
    assert liveness.pod_uids is not None and liveness.live_uids is not None
    uids = liveness.pod_uids.get(key, frozenset())
    alive = uids & liveness.live_uids
    return f"log-dir UIDs {sorted(uids)}, of which with a pod cgroup {sorted(alive)}"
