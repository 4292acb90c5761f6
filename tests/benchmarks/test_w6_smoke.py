"""W6 at its quick size: the simulated run and the bare computation each run apart; the line's fields.

Nothing here looks at how long either took.
"""

from __future__ import annotations

import pytest

import fedrecsim
from benchmarks import w6_prototypes, workloads
from benchmarks.common import Options


def test_w6_is_discovered_at_the_ml1m_shape() -> None:
    assert workloads()["w6"] == "benchmarks.w6_prototypes"
    assert w6_prototypes.STANDARD == (6040, 3706, 1_000_209)


def test_the_floor_computes_the_runs_metrics() -> None:
    users, items, entries = w6_prototypes.QUICK
    simulated = fedrecsim.run(w6_prototypes.tables(users, items, entries)).metrics
    bare = w6_prototypes.floor(users, items, entries)
    assert set(bare) <= set(simulated)
    for name, value in bare.items():
        assert simulated[name] == pytest.approx(value, rel=1e-9), name


def test_the_line_takes_the_best_of_each_side_and_the_largest_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"simulate": iter([(3.0, 400.0), (2.0, 380.0)]), "bare": iter([1.6, 1.8])}

    def isolated(module: str, function: str, **kwargs):  # type: ignore[no-untyped-def]
        assert module == w6_prototypes.__name__ and (kwargs["users"], kwargs["items"]) == w6_prototypes.QUICK[:2]
        if function == "simulate":
            seconds, peak = next(answers["simulate"])
            return {"seconds": seconds, "peak_rss_mb": peak}
        return {"seconds": next(answers["bare"]), "peak_rss_mb": 300.0}

    monkeypatch.setattr(w6_prototypes, "run_isolated", isolated)
    (line,) = list(w6_prototypes.run(Options(quick=True, repeats=2)))
    assert line == (
        "W6 prototypes sim_s=2.00 floor_s=1.60 ratio=1.25 ratio_target_max=1.1 peak_rss_mb=400 "
        "users=600 items=400 entries=20000"
    )

