"""A real single-node Kubernetes cluster from upstream binaries, under private directories.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet on containerd,
all started as child processes of the test run. containerd and the kubelet live in a
private mount namespace where the well-known host paths a DaemonSet mounts
(``/var/lib/kubelet``, ``/var/log/pods``, ``/var/log/containers``, ``/run/containerd``)
are bind mounts of directories under the run's work directory: the manifests mount the
paths a real node has, and nothing of the host is touched. Everything is torn down
(workloads, processes, cgroups, mounts) so that the suite can run twice in a row.
Used by ``tests/e2e`` (its conftest builds the images and starts one for the session).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.support import free_port

KUBE_COMPONENTS = ("kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE_NAME = "podres-e2e"
PAUSE_IMAGE = "localhost/podres-e2e/pause:1"
# The containerd runtime handler that the GPU overlays' RuntimeClass `nvidia` names
# (runc here: see _start_containerd).
NVIDIA_RUNTIME_HANDLER = "nvidia"
# The host paths a node agent's manifests mount; inside the cluster's mount namespace each
# is a bind mount of a directory under the work directory.
PRIVATE_HOST_PATHS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd")
CGROUP_ROOT = Path("/sys/fs/cgroup")


class ClusterError(RuntimeError):
    """The cluster could not be brought up (the message says which part and where its log is)."""


def wait_for(what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    """Poll ``predicate`` until truthy; raise :class:`ClusterError` naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as err:  # noqa: BLE001 - a probe that fails is retried until the deadline
            last_error = err
        else:
            if value:
                return value
        time.sleep(interval)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}: {last_error or ''}")


def unpack_binaries(source: Path, dest: Path) -> dict[str, Path]:
    """The four Kubernetes binaries from ``source`` (plain, or ``NAME-v*-linux-amd64[.xz]``)."""
    dest.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name in KUBE_COMPONENTS:
        plain = source / name
        if plain.is_file() and os.access(plain, os.X_OK):
            out[name] = plain
            continue
        candidates = sorted(source.glob(f"{name}-v*"))
        if not candidates:
            raise ClusterError(f"no {name} binary in {source} (PODRES_E2E_KUBERNETES)")
        packed = candidates[-1]
        target = dest / packed.name.removesuffix(".xz")
        if not target.exists() or target.stat().st_mtime < packed.stat().st_mtime:
            tmp = target.with_suffix(".partial")
            if packed.suffix == ".xz":
                with tmp.open("wb") as fh:
                    subprocess.run(["xz", "-dc", str(packed)], stdout=fh, check=True)
            else:
                shutil.copyfile(packed, tmp)
            tmp.chmod(0o755)
            tmp.rename(target)
        out[name] = target
    return out


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Cluster:
    """One single-node cluster. ``start()`` brings it up; ``stop()`` removes every trace."""

    binaries: dict[str, Path]
    work: Path
    node_name: str = NODE_NAME
    processes: dict[str, Process] = field(default_factory=dict)
    _created_dirs: list[Path] = field(default_factory=list)
    _holder: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.work = self.work.resolve()
        self.logs = self.work / "logs"
        # The node paths inside the mount namespace, as seen from here.
        self.kubelet_root = self.private("/var/lib/kubelet")
        self.pod_resources_socket = self.kubelet_root / "pod-resources" / "kubelet.sock"
        self.device_plugin_dir = self.kubelet_root / "device-plugins"
        self.pod_logs = self.private("/var/log/pods")
        self.containerd_dir = self.work / "containerd"
        self.containerd_socket = self.containerd_dir / "containerd.sock"
        self.kubeconfig = self.work / "kubeconfig"
        self.token = secrets.token_hex(16)
        self.ports = {
            name: free_port()
            for name in (
                "etcd",
                "etcd-peer",
                "apiserver",
                "kubelet",
                "kubelet-healthz",
                "controller-manager",
                "scheduler",
            )
        }

    def private(self, path: str) -> Path:
        """The work directory behind the node path ``path`` in the cluster's mount namespace."""
        return self.work / "host" / path.strip("/").replace("/", "-")

    # ------------------------------------------------------------------ plumbing

    def _spawn(self, name: str, argv: Sequence[str], *, in_namespace: bool = False) -> Process:
        self.logs.mkdir(parents=True, exist_ok=True)
        log_path = self.logs / f"{name}.log"
        if in_namespace:
            argv = self.in_namespace(*argv)
        fh: IO[bytes]
        with log_path.open("ab") as fh:
            popen = subprocess.Popen(
                list(argv),
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc = Process(name, popen, log_path)
        self.processes[name] = proc
        return proc

    def in_namespace(self, *argv: str) -> list[str]:
        """``argv`` as a command run in the cluster's mount namespace (the node's view)."""
        assert self._holder is not None
        return ["nsenter", f"--mount=/proc/{self._holder.pid}/ns/mnt", "--", *argv]

    def _expect_alive(self, name: str) -> None:
        proc = self.processes[name]
        if not proc.alive():
            raise ClusterError(
                f"{name} exited ({proc.popen.returncode}); log {proc.log}:\n{proc.tail()}"
            )

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; raise with its stderr when ``check`` and it fails."""
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """containerd, etcd, API server; then kubelet, controller-manager and scheduler."""
        self.work.mkdir(parents=True, exist_ok=True)
        self._make_namespace()
        self._start_containerd()
        self._start_etcd()
        self._start_apiserver()
        self.start_kubelet()
        self._start_controllers()
        wait_for("the node to be Ready", self._node_ready, timeout=120, interval=1)

    def _make_namespace(self) -> None:
        """A process holding a private mount namespace with the node paths bind-mounted."""
        script = ["set -e"]
        for path in PRIVATE_HOST_PATHS:
            private = self.private(path)
            private.mkdir(parents=True, exist_ok=True)
            target = Path(path)
            if not target.exists():
                self._created_dirs.append(target)
            script += [f"mkdir -p {target}", f"mount --bind {private} {target}"]
        # Some virtual machines hot-plug memory into a NUMA node as it is used, so the node's
        # MemTotal grows while the machine runs. The kubelet's memory manager (Static) checks
        # its checkpoint against the machine at every start and refuses to start when the
        # total changed, which no real node does between two kubelet restarts: the kubelet's
        # view of each node's meminfo is frozen at what it was when the cluster started.
        frozen = self.work / "host" / "node-meminfo"
        frozen.mkdir(parents=True, exist_ok=True)
        for meminfo in sorted(Path("/sys/devices/system/node").glob("node[0-9]*/meminfo")):
            copy = frozen / meminfo.parent.name
            copy.write_text(meminfo.read_text())
            script.append(f"mount --bind {copy} {meminfo}")
        script += ["mount --make-rshared /", "echo ready", "exec sleep infinity"]
        self._holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "\n".join(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self._holder.stdout is not None
        line = self._holder.stdout.readline()
        if line.strip() != b"ready":
            _, err = self._holder.communicate(timeout=5)
            self._holder = None
            raise ClusterError(f"cannot make a private mount namespace (needs root): {err!r}")

    def _start_containerd(self) -> None:
        cni = self.work / "cni"
        cni.mkdir(parents=True, exist_ok=True)
        # Only the loopback plugin: every pod here uses the host's network.
        (cni / "10-loopback.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "podres-e2e",
                    "plugins": [{"type": "loopback"}],
                }
            )
        )
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = self.containerd_dir / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(
            f"""version = 2
root = "{self.containerd_dir / "root"}"
state = "{self.containerd_dir / "state"}"
[grpc]
  address = "{self.containerd_socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.containerd_dir / "opt"}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # writing -998 to /proc/self/oom_score_adj is refused in unprivileged sandboxes
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
    # A second handler named `nvidia`, on plain runc, for pods of the RuntimeClass `nvidia`
    # that the GPU overlays ask for. It stands in for the handler the NVIDIA GPU Operator's
    # container toolkit registers (nvidia-container-runtime, which adds the driver's
    # libraries and the GPUs' device nodes): here there is no GPU, so runc alone is right.
    # The default runtime stays runc; pods that name no RuntimeClass are unchanged.
    [{cri}.containerd.runtimes.{NVIDIA_RUNTIME_HANDLER}]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.{NVIDIA_RUNTIME_HANDLER}.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"""
        )
        self._spawn("containerd", ["containerd", "--config", str(config)], in_namespace=True)
        wait_for("containerd", lambda: self._ctr("version").returncode == 0, timeout=30)

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    def import_image(self, archive: Path) -> None:
        """Import a docker-archive tar into containerd's Kubernetes namespace."""
        result = self._ctr("images", "import", str(archive))
        if result.returncode != 0:
            raise ClusterError(f"ctr images import {archive}: {result.stderr.strip()}")

    def _start_etcd(self) -> None:
        port, peer = self.ports["etcd"], self.ports["etcd-peer"]
        self._spawn(
            "etcd",
            [
                "etcd",
                "--data-dir",
                str(self.work / "etcd"),
                "--name",
                "podres-e2e",
                "--listen-client-urls",
                f"http://127.0.0.1:{port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"podres-e2e=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
            ],
        )
        wait_for("etcd", lambda: _http_ok(f"http://127.0.0.1:{port}/health"), timeout=30)

    def _start_apiserver(self) -> None:
        pki = self.work / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        sa_key, sa_pub = pki / "sa.key", pki / "sa.pub"
        if not sa_key.exists():
            subprocess.run(
                ["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True
            )
            subprocess.run(
                ["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)],
                check=True,
                capture_output=True,
            )
        tokens = pki / "tokens.csv"
        tokens.write_text(f'{self.token},admin,admin,"system:masters"\n')
        port = self.ports["apiserver"]
        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--cert-dir={pki}",
                "--authorization-mode=Node,RBAC",
                f"--token-auth-file={tokens}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                "--enable-priority-and-fairness=false",
            ],
        )
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "e2e",
                    "clusters": [
                        {
                            "name": "e2e",
                            "cluster": {
                                "server": f"https://127.0.0.1:{port}",
                                "insecure-skip-tls-verify": True,
                            },
                        }
                    ],
                    "users": [{"name": "admin", "user": {"token": self.token}}],
                    "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
                }
            )
        )

        def ready() -> bool:
            self._expect_alive("kube-apiserver")
            return self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0

        wait_for("the API server's /readyz", ready, timeout=90, interval=0.5)

    def kubelet_config(self) -> dict[str, Any]:
        """CPU manager static with one reserved CPU, memory manager Static, Get on."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": self.ports["kubelet"],
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.ports["kubelet-healthz"],
            "readOnlyPort": 0,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            # 500m of CPU reserved: the static policy then keeps one whole CPU (CPU 0) out of
            # the exclusive pool, while 1.5 CPUs stay allocatable on a 2-CPU machine, so the
            # node agents' small requests fit beside a Guaranteed pod with one whole CPU.
            "cpuManagerPolicy": "static",
            "kubeReserved": {"cpu": "500m", "memory": "500Mi"},
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "memoryManagerPolicy": "Static",
            "reservedMemory": [{"numaNode": 0, "limits": {"memory": "600Mi"}}],
            "featureGates": {"KubeletPodResourcesGet": True},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "fileCheckFrequency": "2s",
            "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "2s",
            "cgroupsPerQOS": True,
        }

    def start_kubelet(self, config: Mapping[str, Any] | None = None) -> None:
        """Start the kubelet with ``config`` (:meth:`kubelet_config` when None)."""
        path = self.work / "kubelet.json"
        path.write_text(json.dumps(self.kubelet_config() if config is None else config))
        self._spawn(
            "kubelet",
            [
                str(self.binaries["kubelet"]),
                f"--config={path}",
                f"--kubeconfig={self.kubeconfig}",
                f"--hostname-override={self.node_name}",
                "--root-dir=/var/lib/kubelet",
                "--v=2",
            ],
            in_namespace=True,
        )

    def stop_kubelet(self) -> None:
        """Stop the kubelet as a node does before a restart: its pods keep running."""
        proc = self.processes.pop("kubelet", None)
        if proc is not None:
            proc.stop()

    def restart_kubelet(self) -> float:
        """Stop and start the kubelet; the monotonic time of the new start."""
        self.stop_kubelet()
        started = time.monotonic()
        self.start_kubelet()
        return started

    def _start_controllers(self) -> None:
        pki = self.work / "pki"
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries["kube-controller-manager"]),
                f"--kubeconfig={self.kubeconfig}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'apiserver.crt'}",
                "--leader-elect=false",
                "--controllers=*,-nodeipam",
                "--use-service-account-credentials=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['controller-manager']}",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.binaries["kube-scheduler"]),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['scheduler']}",
            ],
        )

    def pause_controllers(self) -> None:
        """SIGSTOP the controller-manager: nothing re-creates a deleted DaemonSet pod."""
        self.processes["kube-controller-manager"].popen.send_signal(signal.SIGSTOP)

    def resume_controllers(self) -> None:
        self.processes["kube-controller-manager"].popen.send_signal(signal.SIGCONT)

    def _node_ready(self) -> bool:
        for name in ("kubelet", "kube-controller-manager", "kube-scheduler"):
            self._expect_alive(name)
        result = self.kubectl("get", "node", self.node_name, "-o", "json", check=False)
        if result.returncode != 0:
            return False
        conditions = json.loads(result.stdout)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Delete workloads, stop every process, then remove cgroups, mounts and directories."""
        with contextlib.suppress(Exception):
            if "kube-controller-manager" in self.processes:
                self.resume_controllers()
        with contextlib.suppress(OSError):  # the daemons' logs, before their pods go
            shutil.copytree(self.pod_logs, self.logs / "pods", dirs_exist_ok=True)
        with contextlib.suppress(Exception):
            if self.processes.get("kubelet") and self.processes["kubelet"].alive():
                self._delete_all_pods()
        for name in ("kube-scheduler", "kube-controller-manager", "kubelet"):
            proc = self.processes.pop(name, None)
            if proc is not None:
                proc.stop()
        self._stop_containers()
        for name in ("containerd", "kube-apiserver", "etcd"):
            proc = self.processes.pop(name, None)
            if proc is not None:
                proc.stop()
        if self._holder is not None:
            self._holder.kill()
            self._holder.communicate(timeout=5)  # reaps it and closes its pipes
            self._holder = None
        _remove_cgroups("kubepods")
        for path in reversed(self._created_dirs):
            with contextlib.suppress(OSError):
                path.rmdir()
        self._created_dirs.clear()

    def _delete_all_pods(self) -> None:
        self.kubectl(
            "delete",
            "daemonsets,deployments,pods",
            "--all",
            "--all-namespaces",
            "--wait=false",
            "--grace-period=2",
            check=False,
        )
        with contextlib.suppress(ClusterError):
            wait_for(
                "every pod to be gone",
                lambda: not self.get_json("pods", "--all-namespaces")["items"],
                timeout=60,
                interval=1,
            )

    def _stop_containers(self) -> None:
        """Kill whatever containerd still runs (pods the kubelet did not get to stop)."""
        if "containerd" not in self.processes or not self.processes["containerd"].alive():
            return
        for task in self._ctr("tasks", "ls", "-q").stdout.split():
            self._ctr("tasks", "kill", "-s", "SIGKILL", task)
        deadline = time.monotonic() + 20
        while self._ctr("tasks", "ls", "-q").stdout.split() and time.monotonic() < deadline:
            time.sleep(0.2)
        for task in self._ctr("tasks", "ls", "-q").stdout.split():
            self._ctr("tasks", "delete", "-f", task)
        for container in self._ctr("containers", "ls", "-q").stdout.split():
            self._ctr("containers", "delete", container)
        # shims outlive containerd; they are our children's children in our session
        shims = f"containerd-shim-runc-v2 .*-address {self.containerd_socket}"
        subprocess.run(["pkill", "-f", shims], check=False)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback
            return bool(resp.status == 200)
    except OSError:
        return False


def _remove_cgroups(name: str) -> None:
    """Remove ``name`` and everything under it from every cgroup v1 hierarchy, deepest first."""
    if not CGROUP_ROOT.is_dir():
        return
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / name
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for path in [*dirs, top]:
            with contextlib.suppress(OSError):
                path.rmdir()
