"""Auditing Ribero et al.'s eps per silo from the server's view: claimed against audited.

Usage::

    python scenarios/audit_ribero.py               # eps = 1, 100, 10,000 at 200 trials per world
    python scenarios/audit_ribero.py --quick       # eps = 1, 10,000 at 20 trials per world (the suite)
    python scenarios/audit_ribero.py --trials 1000 --seeds 3 --workers 2

Each audit (`fedrecsim.audit`, docs/audit.md) runs ``ribero_synthetic.toml`` at the size where the server's test has
the most power: 20 users x 30 items in 10 silos of two users, one prototype per silo (every record in
its one cluster) and no truncation (support s = 30 items); the target is the whole row of the user with
the most entries, added to or removed from its silo (``one_user``), and the claim is each silo's eps
(`prototypes.audit`). The server's distinguisher ``prototype_projection`` scores a run by the largest
projection of the target's silo's prototype onto the target's row; ``logistic`` learns from every number received.

With ``--seeds N`` each eps is audited N times at different data seeds (mean, least and largest bound).
The audits go to ``--out`` (default ``results/audit_ribero``), one folder each
(``server-eps<eps>-seed<i>``); running the script again resumes them. With matplotlib the figure ``claimed_vs_audited.png`` is drawn there.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fedrecsim.audit import AuditRow, AuditScript, Column, GridResult, ScriptRun
from fedrecsim.study import run_script

SCENARIO = Path(__file__).resolve().parent / "ribero_synthetic.toml"
SEED = 7
SIZE = ("data.users=20", "data.items=30", "data.ratings=400", "data.rank=2", "data.silos=10", "protocol.k=1",
        "protocol.support=30", "protocol.rank=2", "protocol.baselines=false", "protocol.nmf_iterations=20",
        "audit.party='server:0'")
FULL = (1.0, 100.0, 10_000.0)
QUICK = (1.0, 10_000.0)
COLUMNS = (
    Column("view", 16, lambda row: "server", left=True), Column("eps", 6, lambda row: row.claimed, "g"),
    Column("audited", 9, lambda row: row.mean), Column("least", 8, lambda row: row.least), Column("most", 8, lambda row: row.most),
    Column("best", 22, lambda row: row.best), Column("trials/s", 10, lambda row: row.trials_per_s, ".1f"),
)


def paint(axes: Any, result: GridResult) -> None:
    axes.scatter([row.claimed for row in result.rows for _ in row.bounds], [bound for row in result.rows for bound in row.bounds],
                 color="C0")
    claimed = [row.claimed for row in result.rows]
    axes.plot(claimed, claimed, "k--", linewidth=1, label="claimed eps (audited = claimed)")
    axes.set_xscale("log")
    axes.set_xlabel("claimed eps per silo")
    axes.set_ylabel("audited lower bound (best distinguisher)")
    axes.set_title("Ribero et al.: the server's view of the prototypes")
    axes.legend(loc="upper left", fontsize=8)


def rows(epsilons: tuple[float, ...], trials: int) -> list[AuditRow]:
    return [AuditRow(eps, f"the server at eps {eps:g}", f"server-eps{eps:g}",
                     (*SIZE, f"protocol.epsilon={eps}", f"audit.trials={trials}")) for eps in epsilons]


def heading(run: ScriptRun) -> str:
    return f"Ribero et al., the row of {run.target_users}, {run.counts}; audited: the best distinguisher's lower bound"


SCRIPT = AuditScript(
    SCENARIO, "Audit Ribero et al.'s eps per silo from the server's view", out="results/audit_ribero",
    quick="two audits at 20 trials per world (seconds)", sizes=(FULL, QUICK), trials=(200, 20), rows=rows, heading=heading,
    columns=COLUMNS, figure="claimed_vs_audited.png", paint=paint, data_seed=SEED,
    note="The server's tests here are heuristic: a bound far below eps says how little of the budget they extract, not that "
         "the budget is spent.",
)
main = SCRIPT.main


if __name__ == "__main__":
    sys.exit(run_script(main))
