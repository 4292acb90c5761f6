"""W5 at its quick size: the workload completes its timed epoch and prints its one line."""

from __future__ import annotations

import re

from benchmarks import workloads
from benchmarks.common import Options
from benchmarks.w5_ldp_epoch import run, tables


def test_w5_is_discovered_and_prints_its_line() -> None:
    assert workloads()["w5"] == "benchmarks.w5_ldp_epoch"
    (line,) = list(run(Options(quick=True)))
    match = re.fullmatch(
        r"W5 ldp_implicit users=1000 reports=100000 epoch_s=(\d+\.\d{3}) reports_per_s=([\d,]+) "
        r"reports_per_s_target_min=200,000 peak_rss_mb=(\d+)", line
    )
    assert match is not None, line
    assert float(match.group(1)) > 0 and int(match.group(2).replace(",", "")) > 0
    # The run is a fresh interpreter with numpy and the simulator loaded: its peak is tens of MiB at least.
    assert int(match.group(3)) >= 20


def test_the_standard_size_is_the_papers_medium_setting() -> None:
    standard = tables(10_000)
    assert (standard["data"]["users"], standard["data"]["items"]) == (10_000, 1000)
    assert (standard["protocol"]["d"], standard["protocol"]["k"], standard["protocol"]["proxies"]) == (5, 100, 1)
    assert standard["protocol"]["min_users"] == 10_000
