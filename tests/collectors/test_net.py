"""The net collector: link state and kernel statistics of the kubelet's interfaces."""

from __future__ import annotations

from podres_exporter.collectors import net
from podres_exporter.core.join import Joined
from tests.collectors.support import NET_ROWS, exposition, node_view

EXPECTED = """\
# HELP podres_net_up 1 when the interface's operstate is up.
# TYPE podres_net_up gauge
podres_net_up{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 1.0
podres_net_up{address="0000:3b:00.2",container="",interface="ens1f0v0",namespace="",pod=""} 0.0
# HELP podres_net_carrier 1 when the link has carrier.
# TYPE podres_net_carrier gauge
podres_net_carrier{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 1.0
# HELP podres_net_speed_bytes Link speed in bytes per second.
# TYPE podres_net_speed_bytes gauge
podres_net_speed_bytes{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 2.5e+10
# HELP podres_net_receive_bytes_total Bytes received (kernel statistics).
# TYPE podres_net_receive_bytes_total counter
podres_net_receive_bytes_total{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 1.23456789e+09
podres_net_receive_bytes_total{address="0000:3b:00.2",container="",interface="ens1f0v0",namespace="",pod=""} 0.0
# HELP podres_net_receive_packets_total Packets received (kernel statistics).
# TYPE podres_net_receive_packets_total counter
podres_net_receive_packets_total{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 1000.0
# HELP podres_net_receive_errors_total Errors received (kernel statistics).
# TYPE podres_net_receive_errors_total counter
podres_net_receive_errors_total{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 0.0
# HELP podres_net_receive_drops_total Dropped received (kernel statistics).
# TYPE podres_net_receive_drops_total counter
podres_net_receive_drops_total{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 5.0
# HELP podres_net_transmit_bytes_total Bytes transmitted (kernel statistics).
# TYPE podres_net_transmit_bytes_total counter
podres_net_transmit_bytes_total{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 987654.0
# HELP podres_net_transmit_packets_total Packets transmitted (kernel statistics).
# TYPE podres_net_transmit_packets_total counter
podres_net_transmit_packets_total{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 900.0
# HELP podres_net_transmit_errors_total Errors transmitted (kernel statistics).
# TYPE podres_net_transmit_errors_total counter
podres_net_transmit_errors_total{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 1.0
# HELP podres_net_transmit_drops_total Dropped transmitted (kernel statistics).
# TYPE podres_net_transmit_drops_total counter
podres_net_transmit_drops_total{address="0000:3b:00.0",container="main",interface="ens1f0",namespace="ml",pod="train"} 0.0
"""


def test_net_collector_exact_text() -> None:
    """An interface up at 200 Gbit/s, in bytes per second; one down with a single counter read."""
    assert exposition(net.COLLECTOR, node_view(joined=Joined(net=NET_ROWS))) == EXPECTED
