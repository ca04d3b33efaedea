"""The InfiniBand collector: port identity and state, data in bytes, every other counter."""

from __future__ import annotations

from podres_exporter.collectors import infiniband
from podres_exporter.core.join import Joined
from tests.collectors.support import IB_ROWS, exposition, node_view

EXPECTED = """\
# HELP podres_infiniband_port_info One series per port: PCI address, state and rate.
# TYPE podres_infiniband_port_info gauge
podres_infiniband_port_info{address="0000:3b:00.0",hca="mlx5_0",port="1",port_state="ACTIVE",rate="200 Gb/sec (4X HDR)"} 1.0
podres_infiniband_port_info{hca="mlx5_1",port="1",port_state="DOWN",rate=""} 1.0
# HELP podres_infiniband_port_active 1 when the port state is ACTIVE.
# TYPE podres_infiniband_port_active gauge
podres_infiniband_port_active{container="main",hca="mlx5_0",namespace="ml",pod="train",port="1"} 1.0
podres_infiniband_port_active{container="",hca="mlx5_1",namespace="",pod="",port="1"} 0.0
# HELP podres_infiniband_port_receive_bytes_total Data received.
# TYPE podres_infiniband_port_receive_bytes_total counter
podres_infiniband_port_receive_bytes_total{container="main",hca="mlx5_0",namespace="ml",pod="train",port="1"} 4000.0
# HELP podres_infiniband_port_transmit_bytes_total Data transmitted.
# TYPE podres_infiniband_port_transmit_bytes_total counter
podres_infiniband_port_transmit_bytes_total{container="main",hca="mlx5_0",namespace="ml",pod="train",port="1"} 1000.0
# HELP podres_infiniband_port_counter_total Every other integer counter of the port (counters/ and hw_counters/), by file name.
# TYPE podres_infiniband_port_counter_total counter
podres_infiniband_port_counter_total{container="main",counter="link_downed",hca="mlx5_0",namespace="ml",pod="train",port="1"} 1.0
podres_infiniband_port_counter_total{container="main",counter="symbol_error",hca="mlx5_0",namespace="ml",pod="train",port="1"} 0.0
"""


def test_infiniband_collector_exact_text() -> None:
    """Data counters (4-byte words) in bytes; the other counters by name, the data ones not again."""
    view = node_view(joined=Joined(infiniband=IB_ROWS))
    assert exposition(infiniband.COLLECTOR, view) == EXPECTED
