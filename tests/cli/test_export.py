"""The exporter end to end: simulated kubelet -> poller -> HTTP, parsed as Prometheus would."""

from __future__ import annotations

import platform
import re
import socket
import subprocess
import threading
import time
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from podres_exporter import __version__
from podres_exporter.buildinfo import BuildInfo
from podres_exporter.cli.export import Exporter
from podres_exporter.core.errors import ConfigError
from podres_sim import SimKubelet
from tests.support import exporter_settings, http_get, sample, scrape, select, wait_until

MakeSim = Callable[..., SimKubelet]
MakeExporter = Callable[..., Exporter]
ROOT = Path(__file__).resolve().parents[2]


def ready(exp: Exporter) -> bool:
    return http_get(exp.url + "/readyz")[0] == 200


def test_endpoints(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """/healthz, /readyz, / and an unknown path answer as documented."""
    sim = make_sim("minimal")
    exp = make_exporter(sim)
    assert exp.url == f"http://127.0.0.1:{exp.server.port}"
    wait_until(lambda: ready(exp))
    assert http_get(exp.url + "/healthz")[::2] == (200, b"ok\n")
    assert http_get(exp.url + "/readyz")[::2] == (200, b"ready\n")
    status, headers, body = http_get(exp.url + "/")
    assert status == 200 and b"/metrics" in body and headers["Content-Type"].startswith("text/html")
    assert b"poll interval: <code>200ms</code>" in body
    assert str(sim.socket_path).encode() not in body and b"kubelet.sock" not in body, "no path"
    assert http_get(exp.url + "/nope")[0] == 404


def test_a_taken_port_names_the_flag(make_sim: MakeSim) -> None:
    """An address that cannot be bound: ConfigError naming it and --listen-address."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"cannot listen on 127.0.0.1:{port} \(--listen"):
            Exporter(exporter_settings(make_sim("minimal"), listen_address=("127.0.0.1", port)))


def test_scrapes_never_call_the_kubelet(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """Many scrapes between two polls cause no kubelet call and one rendering."""
    sim = make_sim("minimal")
    exp = make_exporter(sim, poll_interval_s=3600.0)
    wait_until(lambda: ready(exp))
    calls = dict(sim.request_count)
    renders_before = exp.exposition.renders
    results: list[int] = []

    def one() -> None:
        results.append(http_get(exp.url + "/metrics")[0])

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 20
    assert dict(sim.request_count) == calls
    assert exp.exposition.renders - renders_before <= 1


def test_content_negotiation_and_gzip(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """OpenMetrics on request (one # EOF at the very end), text otherwise, gzip when accepted."""
    exp = make_exporter(make_sim("minimal"))
    wait_until(lambda: ready(exp))
    status, headers, body = http_get(
        exp.url + "/metrics",
        {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"},
    )
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert headers["Content-Encoding"] == "gzip"
    text = body.decode()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    assert "podres_snapshot_age_seconds" in text and "podres_kubelet_up" in text
    # One gzip member: a decoder that reads only the first (as curl does) sees it all.
    req = urllib.request.Request(exp.url + "/metrics", headers={"Accept-Encoding": "gzip"})  # noqa: S310
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - a loopback test URL
        raw = resp.read()
    member = zlib.decompressobj(31)  # one gzip member, then stop
    text = member.decompress(raw).decode()
    assert member.eof and member.unused_data == b""
    assert "podres_kubelet_up" in text and "podres_snapshot_age_seconds" in text
    assert "process_resident_memory_bytes" in text
    status, headers, body = http_get(exp.url + "/metrics", {"Accept-Encoding": "gzip;q=0"})
    assert headers["Content-Type"].startswith("text/plain")
    assert "Content-Encoding" not in headers
    assert "# EOF" not in body.decode()


def test_socket_missing_at_start_then_appears(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """Started before the kubelet: not ready, kubelet_up 0, retrying; ready once it appears."""
    sim = make_sim("minimal", start=False)
    with capture_logs() as logs:
        exp = make_exporter(sim)
        wait_until(lambda: sample(scrape(exp.url), "podres_kubelet_up") == 0)
    status, _, body = http_get(exp.url + "/readyz")
    assert (status, body) == (503, b"not ready: kubelet unreachable\n"), "no path, no gRPC text"
    failed = [e for e in logs if e["event"] == "kubelet_read_failed"]
    assert failed and str(sim.socket_path) in failed[0]["error"], "the log has the details"
    sim.start()
    wait_until(lambda: ready(exp))
    s = scrape(exp.url)
    assert sample(s, "podres_kubelet_up") == 1
    assert sample(s, "podres_pods") == len(sim.node.pods)


def test_kubelet_going_away_keeps_last_data(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """The kubelet stops: last data still served, up 0, age grows; it comes back: up 1."""
    sim = make_sim("minimal")
    exp = make_exporter(sim)
    wait_until(lambda: ready(exp))
    before = scrape(exp.url)
    sim.stop()
    down = wait_until(lambda: (s := scrape(exp.url)) and sample(s, "podres_kubelet_up") == 0 and s)
    assert select(down, "podres_node_cpus") == select(before, "podres_node_cpus")
    age0 = sample(down, "podres_snapshot_age_seconds")
    wait_until(lambda: sample(scrape(exp.url), "podres_snapshot_age_seconds") > age0 + 0.3)  # type: ignore[operator]
    assert http_get(exp.url + "/readyz")[0] == 200, "stale data is still data"
    failed = select(scrape(exp.url), "podres_kubelet_requests_total", code="UNAVAILABLE")
    assert sum(failed.values()) >= 1
    sim.restart(warmup=0)
    wait_until(lambda: sample(scrape(exp.url), "podres_kubelet_up") == 1)


def test_restart_window_is_not_an_empty_node(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """A restarted kubelet's brief 'no pods, no CPUs' answer never reaches the metrics."""
    sim = make_sim("minimal")
    exp = make_exporter(sim, empty_confirm_s=5.0)
    wait_until(lambda: ready(exp))
    pods = sample(scrape(exp.url), "podres_pods")
    assert pods
    seen: list[float | None] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(sample(scrape(exp.url), "podres_pods"))

    t = threading.Thread(target=watch)
    t.start()
    sim.restart(warmup=0.8)
    wait_until(lambda: sample(scrape(exp.url), "podres_kubelet_suspect_empty_readings_total") == 1)
    time.sleep(1.0)  # past the warm-up: the full answer is back and must be what is served
    stop.set()
    t.join()
    assert seen and all(v == pods for v in seen), sorted(set(map(str, seen)))


def test_confirmed_empty_node_is_believed(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """An empty answer that persists past --kubelet-empty-confirm is taken as the truth."""
    sim = make_sim("policy-none")
    exp = make_exporter(sim, empty_confirm_s=0.5)
    wait_until(lambda: ready(exp))
    assert sample(scrape(exp.url), "podres_pods")
    for p in list(sim.node.pods):
        sim.remove(p.namespace, p.name)
    wait_until(lambda: sample(scrape(exp.url), "podres_pods") == 0)
    assert sample(scrape(exp.url), "podres_kubelet_suspect_empty_readings_total") == 1


def test_policy_none_shared_pool_is_online_cpus(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """CPU policy none: basis 'online' is 1 and the shared pool is every online CPU."""
    sim = make_sim("policy-none")
    exp = make_exporter(sim)
    wait_until(lambda: ready(exp))
    s = scrape(exp.url)
    assert sample(s, "podres_cpu_shared_pool_basis", basis="online") == 1
    assert sample(s, "podres_cpu_shared_pool_basis", basis="allocatable") == 0
    online = len(sim.node.spec.online_cpus)
    assert sum(select(s, "podres_node_cpus", pool="shared_free").values()) == online
    assert sum(select(s, "podres_node_cpus", pool="reserved").values()) == 0


def test_old_v1alpha1_kubelet(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """A v1alpha1-only kubelet: api_info says so, devices are served, CPU pools are absent."""
    sim = make_sim("v1alpha1")
    exp = make_exporter(sim)
    wait_until(lambda: ready(exp))
    s = scrape(exp.url)
    assert (
        sample(
            s, "podres_kubelet_api_info", api_version="v1alpha1", get_allocatable="unimplemented"
        )
        == 1
    )
    assert not select(s, "podres_node_cpus")
    assert select(s, "podres_node_devices", state="allocated")
    assert not select(s, "podres_node_devices", state="free")
    assert not select(s, "podres_node_allocatable_devices")
    assert select(s, "podres_container_device_info")


def test_get_allocatable_disabled_is_visible(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """GetAllocatableResources disabled: api_info says so; the pool falls back to online CPUs."""
    sim = make_sim("minimal", get_allocatable="disabled")
    exp = make_exporter(sim)
    wait_until(lambda: ready(exp))
    s = scrape(exp.url)
    assert sample(s, "podres_kubelet_api_info", api_version="v1", get_allocatable="disabled") == 1
    assert sample(s, "podres_cpu_shared_pool_basis", basis="online") == 1


@pytest.mark.slow  # 20,000 pods
def test_big_response_through_the_exporter(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """A kubelet answer above 4 MiB is read and served."""
    from podres_sim import synthetic_scenario

    sim = make_sim(synthetic_scenario(pods=20000))
    exp = make_exporter(sim, poll_interval_s=30.0)
    wait_until(lambda: ready(exp), timeout=30)
    assert sample(scrape(exp.url), "podres_pods") == 20000


def test_collector_switches(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """A disabled collector's families are absent and it reports no success series."""
    sim = make_sim("minimal")
    exp = make_exporter(sim, collector_overrides={"cpu": False})
    wait_until(lambda: ready(exp))
    s = scrape(exp.url)
    assert not select(s, "podres_node_cpus")
    assert sample(s, "podres_collector_success", collector="devices") == 1
    assert sample(s, "podres_collector_success", collector="cpu") is None


@pytest.mark.prometheus
def test_promtool_accepts_the_exposition(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """`promtool check metrics` finds no problem in the demo node's exposition."""
    exp = make_exporter(make_sim("demo"))
    wait_until(lambda: ready(exp))
    body = http_get(exp.url + "/metrics")[2]
    proc = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_docs_list_every_metric(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """docs/metrics.md lists every family the demo serves, and serves all it lists."""
    sim = make_sim("demo")
    exp = make_exporter(sim, pod_labels=("team",))
    wait_until(lambda: ready(exp))
    # The Pods API route syncs beside the polls: its device health family follows (its
    # series only for devices not Healthy, which the demo has none of).
    wait_until(
        lambda: b"# TYPE podres_container_device_health_info " in http_get(exp.url + "/metrics")[2]
    )
    text = http_get(exp.url + "/metrics")[2].decode()
    served = set(re.findall(r"^# TYPE (podres_\w+) ", text, re.M))
    served = {
        n + "_total" if f"{n}_total" in text and not n.endswith("_total") else n for n in served
    }
    rows = re.findall(r"^\| ([^|]*`podres_[^|]*)\|", (ROOT / "docs/metrics.md").read_text(), re.M)
    documented = {name for cell in rows for name in re.findall(r"`(podres_\w+)`", cell)}
    assert served == documented, (
        f"served, not documented: {sorted(served - documented)}; "
        f"documented, not served: {sorted(documented - served)}"
    )


def test_the_exporter_names_its_node_and_build(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """podres_node_info carries --node-name, and no other series a node label;
    podres_build_info the version, revision and Python version."""
    exp = make_exporter(
        make_sim("minimal"),
        node_name="gpu-node-7",
        build=BuildInfo(__version__, "0123abc", platform.python_version()),
    )
    wait_until(lambda: ready(exp))
    s = scrape(exp.url)
    assert select(s, "podres_node_info") == {frozenset({("node", "gpu-node-7")}): 1}
    assert not [n for n, labels in s if n != "podres_node_info" and "node" in dict(labels)]
    assert select(s, "podres_build_info") == {
        frozenset(
            {
                ("version", __version__),
                ("revision", "0123abc"),
                ("python_version", platform.python_version()),
            }
        ): 1
    }
