"""Invariant monitors: the simulator's omniscient checks of ground truth, reported in result.json.

A protocol registers a monitor per property it promises (e.g. "the masks cancelled") and calls
``check`` every time the property can be verified. Violations are counted and the first few described
(the detail then says how many more there were), never raised: a run that breaks an invariant still
finishes and says so in ``result.json``.
"""

from __future__ import annotations

from typing import Any

_DETAILS_KEPT = 3


class InvariantMonitor:
    """Counts checks and violations of one named invariant."""

    def __init__(self, name: str, description: str) -> None:
        self.name = name
        self.description = description
        self.checked = 0
        self.violations = 0
        self._details: list[str] = []

    def check(self, holds: bool, detail: str = "") -> bool:
        """Record one verification; ``detail`` describes the case and is kept for the first violations."""
        self.checked += 1
        if not holds:
            self.violations += 1
            if len(self._details) < _DETAILS_KEPT:
                self._details.append(detail)
        return holds

    def report(self) -> dict[str, Any]:
        if self.violations:
            unlisted = self.violations - len(self._details)
            detail = "; ".join(self._details + ([f"{unlisted} more not listed"] if unlisted else []))
        else:
            detail = self.description
        return {"name": self.name, "checked": self.checked, "violations": self.violations, "detail": detail}


__all__ = ["InvariantMonitor"]
