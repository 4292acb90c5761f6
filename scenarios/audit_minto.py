"""Auditing Minto et al.'s per-report budget eps0: claimed against audited, from the proxy's view.

Usage::

    python scenarios/audit_minto.py                # eps0 = 0.5, 1, 2 at 1,000 trials per world (minutes on 2 cores)
    python scenarios/audit_minto.py --quick        # eps0 = 0.5, 2 at 20 trials per world (the test suite runs this)
    python scenarios/audit_minto.py --trials 4000 --seeds 3 --workers 2

Each audit (`fedrecsim.audit`, docs/audit.md) runs ``minto_ldp.toml`` at a small size with k = 1 report per
user and one epoch, so the claim is eps0 itself: each report is eps0-LDP for any two rows of one user
(Theorem 3). The target user's row is replaced by its neighbour's in half the runs; the proxy, which
relays V and receives the target's report with its address, scores each run by the report's
log-likelihood ratio under the two rows (``report_llr``). ``init_scale = 0.005`` makes V's entries small,
so most gradient entries reach Algorithm 1's clip bound of 1 -- where the two rows' entries are +1 and -1
a report is exactly as revealing as eps0 allows, which is what an audit needs to get close to eps0.

With ``--seeds N`` each eps0 is audited N times at different data seeds (the mean, least and largest
bound are printed). The audits go to ``--out`` (default ``results/audit_minto``), one folder each
(``eps<eps0>-seed<i>``, the i-th data seed); running the script again resumes them. With matplotlib the figure
``claimed_vs_audited.png`` is drawn there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrecsim.audit import AuditRow, AuditScript, Column, GridResult, GridSize, ScriptRun
from fedrecsim.study import run_script

SCENARIO = Path(__file__).resolve().parent / "minto_ldp.toml"
SEED = 7


@dataclass(frozen=True)
class Size(GridSize):
    """The data's size and the trials per world (`GridSize`), and the budgets audited."""

    epsilons: tuple[float, ...]


FULL = Size(users=20, items=40, ratings=120, epsilons=(0.5, 1.0, 2.0), trials=1000)
QUICK = Size(users=6, items=20, ratings=36, epsilons=(0.5, 2.0), trials=20)
COLUMNS = (
    Column("eps0", 8, lambda row: row.row.key, "g", left=True), Column("audited", 10, lambda row: row.mean),
    Column("least", 8, lambda row: row.least), Column("most", 8, lambda row: row.most),
    Column("ratio", 9, lambda row: row.mean / row.row.key, ".2f"), Column("trials/s", 11, lambda row: row.trials_per_s, ".1f"),
)


def overrides(size: Size, epsilon: float, trials: int) -> tuple[str, ...]:
    return (
        "run.rounds=1", *size.data(), f"protocol.min_users={size.users}", "protocol.k=1", "protocol.d=2",
        f"protocol.epsilon={epsilon}", "protocol.init_scale=0.005", "network.latency={model='constant', seconds=0.01}",
        "audit.party='proxy:0'", f"audit.trials={trials}", "audit.distinguishers=['report_llr', 'logistic']",
    )


def paint(axes: Any, result: GridResult) -> None:
    for row in result.rows:
        axes.scatter([row.row.key] * len(row.bounds), row.bounds, color="C0")
    claimed = [row.row.key for row in result.rows]
    axes.plot(claimed, claimed, "k--", linewidth=1, label="claimed eps0 (audited = claimed)")
    axes.set_xlabel("claimed eps0 per report")
    axes.set_ylabel("audited lower bound (best distinguisher)")
    axes.set_title("Minto et al.: proxy's view, k = 1, one epoch")
    axes.legend(loc="upper left", fontsize=8)


def rows(size: Size, trials: int) -> list[AuditRow]:
    return [AuditRow(eps, f"eps0 {eps:g}", f"eps{eps:g}", overrides(size, eps, trials)) for eps in size.epsilons]


def heading(run: ScriptRun) -> str:
    document = run.result.rows[0].document
    return (f"Minto et al., proxy's view of one report (k = 1, one epoch), {run.size.users} users x {run.size.items} items, "
            f"{run.counts}:\n"
            f"audited: the best distinguisher's lower bound, at {document['best']['confidence']:.0%} confidence over "
            f"all of them (each alone: {document['confidence']:.0%})")


SCRIPT = AuditScript(
    SCENARIO, "Audit Minto et al.'s per-report eps0 from the proxy's view", out="results/audit_minto",
    quick="two budgets at 20 trials per world (seconds)", sizes=(FULL, QUICK), trials=(FULL.trials, QUICK.trials), rows=rows,
    heading=heading, columns=COLUMNS, figure="claimed_vs_audited.png", paint=paint, data_seed=SEED,
    note="The ratio is how much of eps0 the proxy's best test demonstrably extracts from one report.",
)
main = SCRIPT.main


if __name__ == "__main__":
    sys.exit(run_script(main))
