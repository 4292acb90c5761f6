"""W3 at a tiny size: the measurement has its fields, and the collector's share counts only the collector."""

from __future__ import annotations

import gc

from benchmarks import w3_dpmf_netflix


class _Node:
    def __init__(self) -> None:
        self.me = self


def test_w3_measures_its_iterations_and_the_collectors_part_of_them() -> None:
    result = w3_dpmf_netflix.measure(users=2000, rounds=3)
    assert result["users"] == 2000 and result["rounds"] == 3
    assert result["msgs_per_iter"] > 0 and result["cpu_s_per_iter"] > 0
    assert 0 <= result["gc_s_per_iter"] <= result["cpu_s_per_iter"]


def test_garbage_time_counts_the_collections_after_the_first_mark() -> None:
    with w3_dpmf_netflix.GarbageTime() as collector:
        gc.collect()  # the set-up's, say: before the first mark
        collector.mark(1, 2)
        before = collector.total_s
        assert collector.per_iteration() == 0.0  # one mark: no whole iteration yet
        garbage = [_Node() for _ in range(100_000)]
        del garbage
        gc.collect()
        collector.mark(2, 2)
    assert before > 0 and collector.marks == [before, collector.total_s]
    assert collector.per_iteration() == collector.total_s - before > 0
    assert collector._callback not in gc.callbacks
