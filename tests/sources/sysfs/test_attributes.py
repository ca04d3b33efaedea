"""Attribute files read the plain way (``sources/sysfs/attributes.py``)."""

from __future__ import annotations

from pathlib import Path

from podres_exporter.sources.sysfs.attributes import AttributeReader


def test_an_attribute_longer_than_a_page_is_read_whole(tmp_path: Path) -> None:
    """One read takes a sysfs attribute whole; a longer file (not sysfs: a test tree, a
    bind mount) is read to its end, not cut at the first chunk."""
    reader = AttributeReader()
    long = tmp_path / "long"
    long.write_text("x" * 10_000 + "\n")
    assert reader.read_text(str(long)) == "x" * 10_000
    exact = tmp_path / "exact"
    exact.write_text("y" * 4096)
    assert reader.read_text(str(exact)) == "y" * 4096
    assert reader.read_text(str(tmp_path / "missing")) is None
    assert reader.read_text(str(tmp_path)) is None  # a directory: EISDIR on read
