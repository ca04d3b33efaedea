"""What the opt-in API-server route of pod identity costs at 5,000 pods on one node.

Usage: python bench/apiserver_route.py [--quick] [--pods N]

A fake API server in a process of its own (this script with ``--serve``: HTTPS with a
self-signed certificate made by ``openssl``) answers the node-scoped pod list in pages of
500, then a watch that streams one MODIFIED event per pod and ends. Each pod is as the API
server sends it to a client that asks for full objects: metadata with labels, annotations,
owner and ``managedFields``, a spec with one container and its environment, a status with
conditions and a container status (about 3 KiB of JSON). This process runs the exporter's
reader (``sources/apiserver.py``: ``ApiServerPods``) and prints:

- the first list: the time from ``start()`` to a synced directory, the list's bytes;
- the memory: this process's resident memory before, after the list, and its peak
  (``VmHWM``): the reader keeps only the identity of each pod, not its object;
- the watch: the time and CPU to apply one event per pod, per event;
- ``current()``: the cost of the directory handed to a poll after a change.

``--quick`` runs 500 pods (about 5 s).
"""

from __future__ import annotations

import argparse
import http.server
import json
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

NODE = "bench-node"


def pod(i: int, version: int) -> dict[str, Any]:
    """One pod object as the API server's JSON has it, about 3 KiB."""
    name = f"trainer-{i // 8}-{i % 8}"
    labels = {
        "app.kubernetes.io/name": "trainer",
        "app.kubernetes.io/instance": f"run-{i // 8}",
        "team": f"team-{i % 17}",
        "pod-template-hash": "5d4f8c9b7",
        "tier": "gold",
        "batch.kubernetes.io/job-name": f"trainer-{i // 8}",
    }
    managed = [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in labels}},
                      "f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}, "f:env": {}}}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
         "time": "2026-01-01T00:00:05Z", "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}}}},
    ]  # fmt: skip
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": f"ns-{i % 40}", "uid": f"{i:08d}-0000-4000-8000-bench",
            "resourceVersion": str(version), "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": labels,
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z",
                            "prometheus.io/scrape": "false"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "uid": "owner",
                                 "name": f"trainer-{i // 8}", "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": managed,
        },
        "spec": {
            "nodeName": NODE, "restartPolicy": "Never", "serviceAccountName": "default",
            "containers": [{
                "name": "main", "image": "registry.example.com/trainer:1.2.3",
                "command": ["python", "-m", "trainer", "--epochs=10"],
                "env": [{"name": f"VAR_{k}", "value": "x" * 24} for k in range(6)],
                "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
                              "limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
        "status": {
            "phase": "Running", "qosClass": "Guaranteed", "hostIP": "10.0.0.5",
            "podIP": f"10.1.{i // 250}.{i % 250}", "startTime": "2026-01-01T00:00:01Z",
            "conditions": [{"type": t, "status": "True",
                            "lastTransitionTime": "2026-01-01T00:00:02Z"}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{
                "name": "main", "ready": True, "restartCount": 0, "started": True,
                "image": "registry.example.com/trainer:1.2.3", "imageID": "sha256:" + "ab" * 32,
                "containerID": "containerd://" + "cd" * 32,
                "state": {"running": {"startedAt": "2026-01-01T00:00:03Z"}},
            }],
        },
    }  # fmt: skip


def serve(pods: int, directory: Path) -> None:
    """The fake API server: prints its port, serves until killed."""
    page = 500

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
            if query.get("watch") == "1" and query.get("resourceVersion") != "1000":
                time.sleep(3600)  # the watch after the events: nothing more happens
                return
            if query.get("watch") == "1":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(pods):
                    line = json.dumps({"type": "MODIFIED", "object": pod(i, 2000 + i)}) + "\n"
                    data = line.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.write(b"0\r\n\r\n")
                return
            start = int(query.get("continue") or 0)
            end = min(start + page, pods)
            meta = {"resourceVersion": "1000"} | ({"continue": str(end)} if end < pods else {})
            items = [pod(i, 1000) for i in range(start, end)]
            body = json.dumps({"kind": "PodList", "metadata": meta, "items": items}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            """A client gone mid-answer (the reader stopping) is no error here."""

    server = Server(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def measure(pods: int, directory: Path, port: int) -> None:
    from podres_exporter.daemon.backoff import Backoff
    from podres_exporter.sources.apiserver import ApiServerPods, WatchLimits
    from podres_exporter.sources.apiserver_wire import ApiServer

    (directory / "token").write_text("bench")
    server = ApiServer("127.0.0.1", port, str(directory / "token"), str(directory / "tls.crt"))
    reader = ApiServerPods(server, NODE, limits=WatchLimits(), backoff=Backoff(0.5, 1.0))
    list_bytes = sum(len(json.dumps(pod(i, 1000))) for i in range(pods))
    before = status_kib("VmRSS")
    started = time.perf_counter()
    reader.start()
    while not (reader.current().synced and len(reader.current().pods) == pods):
        time.sleep(0.005)
    listed = time.perf_counter() - started
    after_list = status_kib("VmRSS")

    # The watch: one MODIFIED event per pod; done when every pod is at its new version.
    def watched() -> bool:
        return reader._version == str(2000 + pods - 1)

    started = time.perf_counter()
    while not watched():
        time.sleep(0.005)
    applied = time.perf_counter() - started
    snap_started = time.perf_counter()
    rounds = 20
    for _ in range(rounds):
        reader._published = None  # as after a change
        reader.current()
    snapshot = (time.perf_counter() - snap_started) / rounds
    reader.stop()
    rss = f"{before / 1024:.1f} / {after_list / 1024:.1f} MiB"
    per_event = f"{applied:.2f} s ({applied / pods * 1e6:.0f} µs per event, wall)"
    rows = [
        ("pods", f"{pods:,}"),
        ("list (JSON of full pods)", f"{list_bytes / 2**20:.1f} MiB in {-(-pods // 500)} pages"),
        ("first list to synced", f"{listed:.2f} s ({listed / pods * 1e6:.0f} µs per pod)"),
        ("resident memory before / after the list", rss),
        ("peak resident memory (VmHWM)", f"{status_kib('VmHWM') / 1024:.1f} MiB"),
        ("one MODIFIED event per pod, applied", per_event),
        ("current() after a change", f"{snapshot * 1e3:.2f} ms"),
    ]  # fmt: skip
    for name, value in rows:
        print(f"{name:42} {value}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 pods")
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--serve", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    pods = 500 if args.quick else args.pods
    if args.serve:
        serve(pods, Path(args.serve))
        return 0
    with tempfile.TemporaryDirectory(prefix="podres-bench-apiserver-") as tmp:
        directory = Path(tmp)
        openssl = shutil.which("openssl")
        if openssl is None:
            parser.error("openssl is not on PATH (it makes the fake server's certificate)")
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
            check=True, capture_output=True,
        )  # fmt: skip
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", tmp, "--pods", str(pods)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            measure(pods, directory, port)
        finally:
            child.kill()
            child.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
