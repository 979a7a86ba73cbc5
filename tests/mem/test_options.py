"""Tier 1 tests of cudamagic.mem.options: sizes for --threshold."""

from __future__ import annotations

import pytest

from cudamagic.mem import options

MiB = 1 << 20


def test_parse_bytes():
    assert options.parse_bytes("64MiB") == 64 * MiB
    assert options.parse_bytes("1.5GB") == 1_500_000_000
    assert options.parse_bytes("4096") == 4096
    with pytest.raises(ValueError, match="not a size"):
        options.parse_bytes("lots")
