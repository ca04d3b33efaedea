"""Every health signal we export feeds an alert: each health family is read by some alert
expression (with the matcher that makes it a fault), and every health-looking family documented
in docs/metrics.md is either one of them or listed with the reason it has no alert. (That every
alert's runbook anchor is a heading of docs/runbooks.md: test_rules.py.)"""

from __future__ import annotations

import re

import pytest

from tests.rules.test_rules import RUNBOOKS, alert_rules

# Health family -> a matcher an alert's selector of it must carry ("" for none).
HEALTH_SIGNALS = {
    "podres_pci_link_width_lanes": "",
    "podres_pci_max_link_width_lanes": "",
    "podres_pci_link_speed_transfers_per_second": "",
    "podres_pci_max_link_speed_transfers_per_second": "",
    "podres_pci_aer_errors_total": 'severity="fatal"',
    "podres_net_carrier": "",
    "podres_infiniband_port_active": "",
    "podres_gpu_clock_event_reason": 'reason=~"',
    "podres_node_memory_bytes": 'memory_type=~"hugepages-.*"',
    "podres_gpu_healthy": "",
    "podres_gpu_xid_errors_total": "",
    "podres_gpu_ecc_errors_total": 'type="uncorrected"',
    "podres_gpu_remapping_failed": "",
    "podres_gpu_remapping_pending": "",
    "podres_kubelet_up": "",
    "podres_collector_success": "",
    "podres_source_stale": "",
    "podres_node_device_info": 'state="allocated_unhealthy"',
    "podres_plugin_registered": "",
}
# Families that look like health signals but have no alert of their own, with the reason.
NO_ALERT = {
    "podres_kubelet_last_success_timestamp_seconds": "PodresKubeletUnreachable and "
    "PodresSnapshotStale say when the kubelet's data ages",
    "podres_source_up": "a failed read leaves the source stale: PodresTelemetrySourceStale",
    "podres_source_last_success_timestamp_seconds": "the same, as a time",
    "podres_nvml_available": "0 on a node without an NVIDIA driver: no data, not a fault",
    "podres_kubelet_config_up": "0 where the kubelet's configuration file is not mounted "
    "(a deployment's choice): no data, not a fault; a file that turns unreadable leaves its "
    "source stale: PodresTelemetrySourceStale",
    "podres_net_up": "the operational state follows the carrier: PodresNICNoCarrier",
    "podres_net_receive_errors_total": "error rates depend on the traffic: no threshold fits "
    "every workload; the boards show them",
    "podres_net_transmit_errors_total": "the same",
}  # fmt: skip
# What makes a documented family look like a health signal.
_HEALTH_NAME = re.compile(
    r"_(healthy|up|carrier|active|errors_total|failed|pending|stale|success|registered|reason"
    r"|available)$|_link_"
)


def selectors_of(family: str) -> list[str]:
    """The matchers (``{...}`` text, or ``""``) of every selector of ``family`` in the alerts."""
    found = []
    for rule in alert_rules():
        for match in re.finditer(rf"\b{family}\b(\{{[^}}]*\}})?", rule["expr"]):
            found.append(match.group(1) or "")
    return found


def documented_families() -> set[str]:
    """The metric names in the first column of docs/metrics.md's tables."""
    text = (RUNBOOKS.parent / "metrics.md").read_text(encoding="utf-8")
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("| `podres_"):
            names |= set(re.findall(r"`(podres_\w+)`", line.split("|")[1]))
    return names


@pytest.mark.parametrize(("family", "matcher"), sorted(HEALTH_SIGNALS.items()))
def test_every_health_signal_feeds_an_alert(family: str, matcher: str) -> None:
    """Some alert reads the family, with the matcher that selects the fault."""
    found = selectors_of(family)
    assert found, f"no alert reads {family}"
    assert any(matcher in selector for selector in found), (family, found)


def test_every_documented_health_family_has_an_alert_or_a_reason() -> None:
    """A health-looking family of docs/metrics.md is alerted on, or listed with its reason."""
    health = {name for name in documented_families() if _HEALTH_NAME.search(name)}
    assert len(health) >= 15
    unaccounted = health - set(HEALTH_SIGNALS) - set(NO_ALERT)
    assert not unaccounted, f"health signals without an alert or a reason: {sorted(unaccounted)}"
    assert not set(NO_ALERT) & set(HEALTH_SIGNALS)
    assert set(NO_ALERT) <= documented_families(), "a reason for a family no longer documented"


def test_health_name_pattern_is_not_vacuous() -> None:
    """The pattern picks health names and leaves usage and identity names alone."""
    for name in ("podres_gpu_healthy", "podres_pci_link_width_lanes", "podres_net_carrier"):
        assert _HEALTH_NAME.search(name), name
    for name in ("podres_gpu_utilization_ratio", "podres_gpu_info", "podres_node_cpus"):
        assert not _HEALTH_NAME.search(name), name
