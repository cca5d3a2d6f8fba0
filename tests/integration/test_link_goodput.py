"""bench/goodput.py: what a tbf-shaped link of the benchmarks carries, both ways at once, through the same
bridge of network namespaces the time-to-accuracy rows train over. Needs root (ip netns, tc)."""

import os
import shutil
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
sys.path.insert(0, BENCH)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("tc") is None, reason="shaped links need root and tc (ip netns, tbf)"
)


def test_a_shaped_link_carries_less_payload_than_its_rate_and_leaves_no_namespace():
    import goodput

    measured = goodput.measure("50mbit", repeats=1)
    assert measured["nominal_mbit"] == 50 and measured["both_ways"] is True
    # headers, acknowledgements and tbf's queue take a share; the rate is a ceiling nothing exceeds
    assert 0.6 * 50 < measured["goodput_mbit"] < 50, measured
    assert measured["transfers_mbit"] == [measured["goodput_mbit"]]
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in left for name in (*goodput.NAMESPACES, goodput.BRIDGE))


def test_a_rate_the_benchmark_does_not_shape_is_one_line():
    result = subprocess.run(
        [sys.executable, os.path.join(BENCH, "goodput.py"), "3mbit"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(
        "goodput.py: error: argument rate: invalid choice: '3mbit'"
    )
