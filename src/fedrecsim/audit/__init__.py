"""Privacy auditing: an empirical lower bound on a protocol's epsilon from one party's recorded view.

The public API (docs/audit.md): a protocol declares what its claim protects with an `AuditSpec` on its
``ProtocolSpec(audit=...)`` -- a `Neighbouring` relation (`one_rating`, `one_user`, `user_replaced`), a
``claim(scenario) -> Claim`` and its own `Distinguisher`s beside the generic one (`GENERIC`);
`AuditSpec.for_observer` declares a claim against one role's view, `no_dp_claim` a protocol without one. `Audit` runs
an audit from a scenario (``[audit]`` table or ``audit.*`` overrides) and returns an `AuditResult`;
``fedrecsim audit SCENARIO --party ROLE:INDEX --trials N`` does the same from the command line.
A study script audits several claims at once with an `AuditGrid` of `AuditRow`s and prints the
claimed-vs-audited table and the verdict of its `GridResult` (`fedrecsim.audit.grid`; `GridSize` for its data);
its command is an `AuditScript` of what is its own, whose `main` does the rest (`fedrecsim.audit.script`).
The bound itself (`fedrecsim.audit.bounds`): Clopper--Pearson intervals of a threshold test's error rates,
the threshold chosen on one half of the trials and evaluated on the other.
"""

from __future__ import annotations

from .bounds import Bound, Rule, audit_scores, cp_lower, cp_upper
from .distinguishers import GENERIC, Distinguisher, TrialView, first_feature, logistic_fit, view_numbers
from .neighbours import Neighbouring, Row, Target, one_rating, one_user, user_replaced
from .grid import AuditedRow, AuditGrid, AuditRow, Column, GridResult, GridSize, claimed_cell
from .runner import NO_CLAIM, NO_VIOLATION, VIOLATION, Audit, AuditResult
from .script import AuditScript, ScriptRun
from .spec import AuditSettings, AuditSpec, Claim, audit_spec, no_dp_claim

__all__ = [
    "GENERIC", "NO_CLAIM", "NO_VIOLATION", "VIOLATION", "Audit", "AuditGrid", "AuditResult", "AuditRow", "AuditScript",
    "AuditSettings", "AuditSpec", "AuditedRow", "Bound", "Claim", "Column", "Distinguisher", "GridResult", "GridSize", "Neighbouring",
    "Row", "Rule", "ScriptRun", "Target", "TrialView", "audit_scores", "audit_spec", "claimed_cell", "cp_lower", "cp_upper",
    "first_feature", "logistic_fit", "no_dp_claim", "one_rating", "one_user", "user_replaced", "view_numbers",
]
