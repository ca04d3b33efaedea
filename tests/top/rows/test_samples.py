"""Samples grouped per node, and the natural order of numbered names."""

from __future__ import annotations

from podres_exporter.top.rows import build, natural_key
from tests.top.samples import TRAINER, VLLM_A, cpu, reading, s


def test_samples_group_by_node_label_then_instance() -> None:
    """Prometheus samples: one node per node label, else per instance; none of either: origin."""
    data = build(
        reading(
            s("podres_kubelet_up", 1, instance="10.0.0.1:9842", job="podres"),
            s("podres_kubelet_up", 0, instance="10.0.0.2:9842", job="podres", node="gpu-b"),
            cpu(3, "0", "exclusive", {**TRAINER, "instance": "10.0.0.1:9842"}),
            cpu(3, "0", "exclusive", {**VLLM_A, "instance": "10.0.0.2:9842", "node": "gpu-b"}),
            s("podres_pods", 1),
            origin="prom:9090",
        )
    )
    assert [n.header.node for n in data.nodes] == ["10.0.0.1:9842", "gpu-b", "prom:9090"]
    a, b, _ = data.nodes
    assert a.header.kubelet_up is True and b.header.kubelet_up is False
    assert [(r.node, r.pod) for r in a.containers] == [("10.0.0.1:9842", "train-0")]
    assert [(r.node, r.pod) for r in b.containers] == [("gpu-b", "vllm-a")]


def test_natural_key_orders_numbered_names() -> None:
    """kvm2 sorts before kvm10; other ids sort as text."""
    ids = ["kvm10", "kvm2", "GPU-b", "GPU-a", "0000:af:02.1", "0000:af:02.0"]
    assert sorted(ids, key=natural_key) == [
        "0000:af:02.0", "0000:af:02.1", "GPU-a", "GPU-b", "kvm2", "kvm10",
    ]  # fmt: skip
