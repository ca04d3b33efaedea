"""The alert rules against real data: a Prometheus scraping ``podres demo``.

Every series selector in every alert expression selects series there (metric names and label
values that the exporter and the plugin really serve, under the job and target labels a
cluster install gives), except the few listed in :data:`NOT_ON_THE_DEMO` with the reason. Each
whole expression runs as an instant query: it parses, evaluates, and what it returns carries
``node`` and ``cluster``.
"""

from __future__ import annotations

import re

import pytest

from tests.monitoring.prom import NodePrometheus, alert_exprs

pytestmark = pytest.mark.prometheus


# Selectors that select nothing on the demo, each with the reason; asserted exact, so that a
# selector that stops matching (a renamed metric, a mistyped label value) fails, and an entry
# that the demo comes to serve has to be removed.
_EXPORTER = 'job=~"podres-exporter|podres-system/podres-exporter"'
_VF_LINK = (
    "the demo's held PCI functions are SR-IOV VFs, which report no link of their own (sysfs "
    "reads Unknown and 0, as a real VF's does)"
)
_STRICT = 'topology_manager_policy=~"restricted|single-numa-node"'
NOT_ON_THE_DEMO = {
    f"podres_kubelet_config_info{{{_EXPORTER},{_STRICT}}}": (
        "the demo's kubelet runs no Topology Manager policy (`none`, the kubelet's default; a "
        "pod of it pins memory on both NUMA nodes)"
    ),
    'podres_kubelet_requests_total{code="RESOURCE_EXHAUSTED"}': (
        "the simulated kubelet's rate limit is far above what one exporter polling every 10 s "
        "asks, so no call is rejected"
    ),
    'podres_gpu_xid_errors_total{xid!~"13|31|43|45|68|109"}': (
        "the demo's GPUs report no XID, and the counter's series starts with the first one"
    ),
    'podres_node_device_info{state="allocated_unhealthy"}': (
        "the demo's one unhealthy device (an SR-IOV VF) is held by no pod"
    ),
    'podres_container_device_health_info{health="Unhealthy"}': (
        "the same: the kubelet's per-container health names only held devices, all healthy"
    ),
    **{
        f'podres_pci_{name}{{{_EXPORTER},pod!=""}}': _VF_LINK
        for name in (
            "link_speed_transfers_per_second",
            "link_width_lanes",
            "max_link_speed_transfers_per_second",
            "max_link_width_lanes",
        )
    },
    f'podres_pci_aer_errors_total{{{_EXPORTER},severity="fatal",pod!=""}}': (
        "the demo's held PCI functions are VFs, which it gives no AER counters"
    ),
    f'podres_pci_info{{{_EXPORTER},pci_class=~"0x03.*"}}': (
        "the demo's GPUs are NVIDIA's, read through NVML, not display functions of the pci "
        "collector"
    ),
    f'podres_drm_busy_ratio{{{_EXPORTER},pod!=""}}': (
        "the demo has no AMD or Intel GPU (DRM card) for a pod to hold"
    ),
    f'podres_infiniband_port_active{{{_EXPORTER},pod!=""}}': (
        "the demo's pods hold no InfiniBand port"
    ),
}
# Alerts whose expression must be empty on the healthy demo: its targets are up, its kubelet
# and plugin answer, and its hardware is sound. Those about capacity and placement may fire.
QUIET_ON_THE_DEMO = {
    "PodresExporterAbsent",
    "PodresTargetDown",
    "PodresDevicePluginNotRegistered",
    "PodresDeviceUnhealthyWhileAllocated",
    "PodresResourceNoHealthyDevices",
    "PodresGPUCriticalXid",
    "PodresGPUUncorrectableECCErrors",
    "PodresGPURowRemappingFailed",
    "PodresGPURowRemappingPending",
    "PodresGPUNotAnswering",
    "PodresPCIeLinkDegraded",
    "PodresPCIeFatalAER",
    "PodresNICNoCarrier",
    "PodresInfiniBandPortNotActive",
    "PodresGPUThrottled",
    "PodresHugepagesExhausted",
}
# absent() keeps no label of what it looks for: the one alert that cannot name a node.
WITHOUT_NODE = {"PodresExporterAbsent"}

# PromQL words that are followed by something other than a selector.
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_OPERATORS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      | (?P<range>\[[^\]]*\])
      | (?P<number>\d[\w.]*)
      | (?P<ident>[A-Za-z_:][\w:]*)
      | (?P<open>\()
      | (?P<close>\))
      | (?P<brace>\{)
      | (?P<other>.)""",
    re.VERBOSE,
)
_MATCHERS = re.compile(r"""\{(?:[^}"'`]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)*\}""")


def selectors(expr: str) -> list[str]:
    """The series selectors in a PromQL expression, each as ``name{matchers}`` with the
    whitespace between matchers removed, in order of appearance, each once.

    Function and aggregation names (an identifier before ``(``), keywords, the label lists
    of ``by``, ``on`` and the like, range and subquery brackets, durations and strings
    outside braces are skipped.
    """
    found: list[str] = []
    tokens = [(m.lastgroup, m.group(), m.start(), m.end()) for m in _TOKEN.finditer(expr)]
    tokens = [t for t in tokens if t[0] != "space"]
    i = 0
    while i < len(tokens):
        kind, text, _, end = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if kind == "ident" and text in _GROUPING:
            i += 1
            if following and following[0] == "open":  # skip the label list
                while i < len(tokens) and tokens[i][0] != "close":
                    i += 1
            i += 1
            continue
        # A function or an aggregation: its name comes before "(", or before "by (...)".
        called = following is not None and (
            following[0] == "open" or (following[0] == "ident" and following[1] in _GROUPING)
        )
        if kind == "ident" and (text.lower() in _OPERATORS or called):
            i += 1
            continue
        if kind in ("ident", "brace"):
            name = text if kind == "ident" else ""
            start = end if kind == "ident" else tokens[i][2]
            braces = _MATCHERS.match(expr, start + len(expr[start:]) - len(expr[start:].lstrip()))
            matchers = ""
            if braces:
                matchers = _compact(braces.group())
                while i + 1 < len(tokens) and tokens[i + 1][2] < braces.end():
                    i += 1
            elif kind == "brace":
                raise ValueError(f"unbalanced braces in {expr!r}")
            selector = name + matchers
            if selector not in found:
                found.append(selector)
        i += 1
    return found


def _compact(matchers: str) -> str:
    """``{a="x", b!~"y z"}`` as ``{a="x",b!~"y z"}``: whitespace outside strings removed."""
    parts = re.split(r"""("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)""", matchers)
    return "".join(p if i % 2 else re.sub(r"\s+", "", p) for i, p in enumerate(parts))


def all_selectors() -> list[str]:
    found: list[str] = []
    for expr in alert_exprs().values():
        found += [s for s in selectors(expr) if s not in found]
    return found


# ------------------------------------------------------------------------ the parser itself


def test_selector_parser_finds_selectors_and_nothing_else() -> None:
    """The parser returns selectors with matchers; no function, keyword, label list or number."""
    expr = """
      round(increase(m_total{code="A", b!~"x|y"}[15m])) > 0
      or (
        sum by (cluster, node) (rate(other[5m] offset 1h)) / ignoring (pool) third{}
          and on (cluster, node) group_left (x) {__name__="fourth"} unless bool m_total{code="A"}
      ) > 1e3 and max_over_time(m_total{code="A"}[1h:5m])
    """
    assert selectors(expr) == [
        'm_total{code="A",b!~"x|y"}',
        "other",
        "third{}",
        '{__name__="fourth"}',
        'm_total{code="A"}',
    ]
    assert selectors('x{a="}{ ,"}') == ['x{a="}{ ,"}']


def test_selector_parser_reads_every_alert() -> None:
    """Every alert expression yields selectors, each of one of our metrics or `up`."""
    for name, expr in alert_exprs().items():
        found = selectors(expr)
        assert found, name
        for selector in found:
            assert re.match(r"^(podres_\w+|up)(\{.*\})?$", selector), f"{name}: {selector}"
    assert len(all_selectors()) >= 20


# -------------------------------------------------------------------------------- the demo


def test_every_selector_selects_series_on_the_demo(demo_prometheus: NodePrometheus) -> None:
    """Each selector selects demo series (node, cluster labelled), but exactly the listed ones."""
    empty = []
    for selector in all_selectors():
        series = demo_prometheus.series(selector)
        if not series:
            empty.append(selector)
            continue
        for labels in series:
            assert labels["node"] == demo_prometheus.node, (selector, labels)
            assert labels["cluster"] == demo_prometheus.cluster, (selector, labels)
    assert set(NOT_ON_THE_DEMO) <= set(all_selectors()), "a listed selector is in no rule"
    assert sorted(empty) == sorted(NOT_ON_THE_DEMO)


@pytest.mark.parametrize("name", sorted(alert_exprs()))
def test_alert_expression_evaluates_on_the_demo(demo_prometheus: NodePrometheus, name: str) -> None:
    """The expression evaluates, keeps node and cluster, and health alerts are quiet on the demo."""
    result = demo_prometheus.query(alert_exprs()[name])
    if name in QUIET_ON_THE_DEMO:
        assert result == [], f"{name} would fire on the healthy demo: {result}"
    for row in result:
        if name not in WITHOUT_NODE:
            assert row["metric"].get("node") == demo_prometheus.node, row
            assert row["metric"].get("cluster") == demo_prometheus.cluster, row


def test_a_placement_alert_sees_the_demos_straddling_pod(demo_prometheus: NodePrometheus) -> None:
    """The NUMA alignment alert finds the demo's straddling pod, data/clickhouse-0."""
    result = demo_prometheus.query(alert_exprs()["PodresContainerNUMAMisaligned"])
    pods = {
        (r["metric"]["namespace"], r["metric"]["pod"], r["metric"]["container"]) for r in result
    }
    assert ("data", "clickhouse-0", "clickhouse") in pods
