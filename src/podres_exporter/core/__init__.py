"""The pure core: our own frozen model of a node and the rules that account for it.

No I/O, no gRPC, no Prometheus: what the kubelet and the hardware said goes in as the
objects of :mod:`.model` and :mod:`.telemetry`; :mod:`.view` builds what every renderer reads.
"""
