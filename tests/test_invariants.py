"""An invariant monitor's report: counts, and a detail that never hides how many violations it left out."""

from __future__ import annotations

from fedrecsim.invariants import InvariantMonitor


def test_a_holding_invariant_reports_its_description() -> None:
    monitor = InvariantMonitor("masks_cancel", "every sum equals the plain sum")
    assert monitor.check(True, "round 0")
    assert monitor.report() == {
        "name": "masks_cancel", "checked": 1, "violations": 0, "detail": "every sum equals the plain sum",
    }


def test_the_first_three_violations_are_described_and_the_rest_counted() -> None:
    monitor = InvariantMonitor("masks_cancel", "every sum equals the plain sum")
    for index in range(5):
        assert not monitor.check(False, f"round {index}")
    monitor.check(True, "round 5")
    assert monitor.report() == {
        "name": "masks_cancel", "checked": 6, "violations": 5,
        "detail": "round 0; round 1; round 2; 2 more not listed",
    }


def test_three_violations_are_all_listed_with_nothing_more_said() -> None:
    monitor = InvariantMonitor("masks_cancel", "every sum equals the plain sum")
    for index in range(3):
        monitor.check(False, f"round {index}")
    assert monitor.report()["detail"] == "round 0; round 1; round 2"
