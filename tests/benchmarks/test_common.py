"""`benchmarks.common`: the peak memory a fresh interpreter reports is its own."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from benchmarks.common import run_isolated


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the inherited peak is Linux's getrusage")
def test_a_child_started_by_a_parent_holding_memory_reports_its_own_peak_not_the_parents() -> None:
    held = np.ones(400 * 1024 * 1024 // 8)  # 400 MiB, every page touched
    child = run_isolated("builtins", "dict")  # a fresh interpreter that allocates next to nothing
    assert held[-1] == 1.0
    # A bare interpreter with numpy imported holds some tens of MiB; the parent's 400 MiB must not show.
    assert child["peak_rss_mb"] < 200, child
