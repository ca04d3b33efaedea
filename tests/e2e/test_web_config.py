"""The shipped ``web-config`` component on a real single-node cluster, with client
certificates required.

The install of docs/security.md ("TLS and basic auth with a web-config file"): the e2e
install with the device plugin, ``deploy/components/web-config``, and a Secret
``podres-web-config`` whose ``web-config.yml`` says ``RequireAndVerifyClientCert``, with a
CA, a server and a client certificate made by the test. The kubelet's HTTPS probes send no client
certificate: both DaemonSets must still become Ready and stay up with no restart, while
``/metrics`` refuses a client without a certificate and answers one with a certificate of
the CA. Everything is deleted afterwards.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.daemon.web.spies import https_get
from tests.daemon.web.tlsutil import Issued, client_context, issue, make_ca
from tests.e2e.cluster import Cluster, wait_for
from tests.e2e.conftest import PLUGIN_OVERLAY, REPO
from tests.e2e.test_install import NAMESPACE, PART_OF, daemon_processes, pods_ready

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

PORTS = {"exporter": 9842, "device-plugin": 9843}
# The probes' period (10 s) times their failure threshold (3), and a margin: a liveness
# probe that failed would have restarted the container by then.
LIVENESS_WINDOW_S = 40

WEB_CONFIG = """\
tls_server_config:
  cert_file: tls.crt
  key_file: tls.key
  client_ca_file: ca.crt
  client_auth_type: RequireAndVerifyClientCert
"""


def kustomization(directory: Path) -> str:
    """The install with the component and the Secret, in ``directory`` (paths relative to
    it, so that the checkout may be anywhere)."""
    overlay = os.path.relpath(PLUGIN_OVERLAY, directory)
    component = os.path.relpath(REPO / "deploy" / "components" / "web-config", directory)
    return f"""\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {overlay}
components:
  - {component}
secretGenerator:
  - name: podres-web-config
    namespace: {NAMESPACE}
    files: [web-config.yml, tls.crt, tls.key, ca.crt]
    options:
      disableNameSuffixHash: true
"""


class Pki:
    """The test's CA and the client certificate it issued."""

    def __init__(self) -> None:
        self.ca = make_ca("podres e2e CA")
        self.server = issue(self.ca, "podres-exporter", dns=("podres-exporter",))
        self.client: Issued = issue(self.ca, "prometheus", dns=(), ips=())


def restarts(cluster: Cluster) -> dict[str, int]:
    """Each container's restart count, by pod name."""
    pods = cluster.get_json("pods", "-n", NAMESPACE, "-l", PART_OF)["items"]
    return {
        p["metadata"]["name"]: sum(
            c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])
        )
        for p in pods
    }


@pytest.fixture(scope="module")
def locked(cluster: Cluster, crds: None) -> Iterator[tuple[Cluster, Pki]]:
    """The install with the web-config component and client certificates required;
    removed afterwards, the daemons gone."""
    pki = Pki()
    with tempfile.TemporaryDirectory(prefix="podres-e2e-web-") as tmp:
        directory = Path(tmp)
        (directory / "web-config.yml").write_text(WEB_CONFIG)
        (directory / "tls.crt").write_bytes(pki.server.cert_pem)
        (directory / "tls.key").write_bytes(pki.server.key_pem)
        (directory / "ca.crt").write_bytes(pki.ca.cert_pem)
        (directory / "kustomization.yaml").write_text(kustomization(directory))
        cluster.kubectl("apply", "-k", str(directory))
        try:
            yield cluster, pki
        finally:
            cluster.kubectl("delete", "-k", str(directory), "--wait=true", "--timeout=120s")
            wait_for("the daemons' processes to exit", lambda: not daemon_processes(), 60)


def test_required_client_certificates_leave_the_probes_working(
    locked: tuple[Cluster, Pki],
) -> None:
    """With RequireAndVerifyClientCert, both DaemonSets become Ready through the kubelet's
    HTTPS probes and stay so with no restart; /metrics answers 403 to a client without a
    certificate and 200 to one with a certificate of the CA."""
    cluster, pki = locked
    started = time.monotonic()
    for component in PORTS:
        wait_for(
            f"the {component} to be Ready behind the web-config",
            partial(pods_ready, cluster, NAMESPACE, f"app.kubernetes.io/component={component}"),
            timeout=180,
            interval=1,
        )
    time.sleep(max(0.0, LIVENESS_WINDOW_S - (time.monotonic() - started)))
    assert pods_ready(cluster, NAMESPACE), "a pod is no longer Ready"
    counts = restarts(cluster)
    assert len(counts) == len(PORTS) and set(counts.values()) == {0}, counts
    bare, certified = client_context(pki.ca), client_context(pki.ca, pki.client)
    for component, port in PORTS.items():
        assert https_get(port, bare, "/healthz")[0] == 200, component
        assert https_get(port, bare, "/readyz")[0] == 200, component
        assert https_get(port, bare, "/metrics") == (
            403,
            b"a client certificate is required\n",
        ), component
        status, body = https_get(port, certified, "/metrics")
        assert status == 200 and b"podres_" in body, (component, status, body[:200])
