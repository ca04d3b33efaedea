"""The PCI collector: identity, link, hwmon and AER errors of the kubelet's PCI functions."""

from __future__ import annotations

from podres_exporter.collectors import pci
from podres_exporter.core.join import Joined
from tests.collectors.support import PCI_ROWS, exposition, node_view

EXPECTED = """\
# HELP podres_pci_info One series per PCI function the kubelet knows: ids, driver, NUMA node, SR-IOV PF.
# TYPE podres_pci_info gauge
podres_pci_info{address="0000:3b:00.0",driver="mlx5_core",numa_node="0",pci_class="0x020000",pci_device="0x101d",pci_vendor="0x15b3",physfn=""} 1.0
podres_pci_info{address="0000:3b:00.2",driver="",numa_node="none",pci_class="0x020000",pci_device="0x101e",pci_vendor="0x15b3",physfn="0000:3b:00.0"} 1.0
# HELP podres_pci_link_speed_transfers_per_second Current PCIe link speed (16 GT/s = 1.6e10).
# TYPE podres_pci_link_speed_transfers_per_second gauge
podres_pci_link_speed_transfers_per_second{address="0000:3b:00.0",container="main",namespace="ml",pod="train"} 1.6e+10
# HELP podres_pci_max_link_speed_transfers_per_second Maximum PCIe link speed (a lower current speed means a degraded link).
# TYPE podres_pci_max_link_speed_transfers_per_second gauge
podres_pci_max_link_speed_transfers_per_second{address="0000:3b:00.0",container="main",namespace="ml",pod="train"} 1.6e+10
# HELP podres_pci_link_width_lanes Current PCIe link width.
# TYPE podres_pci_link_width_lanes gauge
podres_pci_link_width_lanes{address="0000:3b:00.0",container="main",namespace="ml",pod="train"} 16.0
# HELP podres_pci_max_link_width_lanes Maximum PCIe link width (a lower current width means a degraded link).
# TYPE podres_pci_max_link_width_lanes gauge
podres_pci_max_link_width_lanes{address="0000:3b:00.0",container="main",namespace="ml",pod="train"} 16.0
# HELP podres_pci_temperature_celsius Device temperature (hwmon).
# TYPE podres_pci_temperature_celsius gauge
podres_pci_temperature_celsius{address="0000:3b:00.0",container="main",namespace="ml",pod="train"} 55.0
# HELP podres_pci_power_watts Device power (hwmon).
# TYPE podres_pci_power_watts gauge
podres_pci_power_watts{address="0000:3b:00.0",container="main",namespace="ml",pod="train"} 25.5
# HELP podres_pci_aer_errors_total PCIe AER errors by severity and error name.
# TYPE podres_pci_aer_errors_total counter
podres_pci_aer_errors_total{address="0000:3b:00.0",container="main",error="BadTLP",namespace="ml",pod="train",severity="correctable"} 0.0
podres_pci_aer_errors_total{address="0000:3b:00.0",container="main",error="RxErr",namespace="ml",pod="train",severity="correctable"} 2.0
podres_pci_aer_errors_total{address="0000:3b:00.0",container="main",error="Undefined",namespace="ml",pod="train",severity="nonfatal"} 0.0
"""


def test_pci_collector_exact_text() -> None:
    """A held PF with link, hwmon and AER; a free VF with no affinity: its identity only.

    AER errors by severity then name, the kernel's TOTAL_* sums left out.
    """
    assert exposition(pci.COLLECTOR, node_view(joined=Joined(pci=PCI_ROWS))) == EXPECTED


def test_pci_collector_says_nothing_before_the_join() -> None:
    assert exposition(pci.COLLECTOR, node_view()) == ""
