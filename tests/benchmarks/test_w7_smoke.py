"""W7 at a tiny size: one real session per graph, the sum checked, the line's fields; Flower is not started."""

from __future__ import annotations

import importlib.util
import re

from benchmarks import w7_secagg
from benchmarks.common import Options


def test_a_session_sums_the_survivors_and_counts_near_the_analytic_bytes() -> None:
    for graph in ("complete", "sparse"):
        result = w7_secagg.session(12, 64, graph)
        dropped = len(w7_secagg.dropping(12))
        assert result["survivors"] == 12  # they drop after their masked input: their inputs are in the sum
        analytic = w7_secagg.analytic_client_bytes(12, 64, result["degree"], dropped)
        assert 1.0 <= result["client_bytes"] / analytic < 1.25  # msgpack envelopes on small messages


def test_five_percent_drop() -> None:
    assert len(w7_secagg.dropping(200)) == 10 and len(w7_secagg.dropping(20)) == 1


def test_the_quick_run_prints_both_graphs_and_the_summary_line(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "flwr" else real(name, *args))
    lines = list(w7_secagg.run(Options(quick=True)))
    assert lines[0].startswith("W7 secagg bonawitz n=20 length=500 dropped=1")
    assert lines[1].startswith("W7 secagg secagg+ n=20 length=500 dropped=1")
    # Each graph's sessions ran in a fresh interpreter, which reports its own peak.
    assert all(re.search(r" peak_rss_mb=\d+$", line) for line in lines[:2]), lines
    assert re.fullmatch(
        r"W7 secagg ours_s=\d+\.\d{3} flower=not-installed \(pip install -e \.\[peers\]\) ours_client_bytes=\d+ "
        r"peak_rss_mb=\d+",
        lines[2],
    )
