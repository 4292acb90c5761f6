"""Auditing secure aggregation's claim from the server's view: nothing about one input beyond the sum.

Usage::

    python scenarios/audit_secagg.py             # Bonawitz et al. and SecAgg+ at 150 trials per world (minutes)
    python scenarios/audit_secagg.py --quick     # both at 20 trials per world, 5 users (the test suite runs this)
    python scenarios/audit_secagg.py --trials 500 --seeds 3 --workers 2

The claim (Bonawitz et al. 2017; Bell et al. 2020 for SecAgg+) is a simulation claim: the
honest-but-curious server's view is simulatable from the sum, so any event of the view that does not
compute the sum has the same probability whichever input a user holds -- epsilon = 0 for what the view
says beyond the sum (`secagg.audit`). Each audit (`fedrecsim.audit`, docs/audit.md) runs
``secagg_small.toml`` with the real cryptography and ``protocol.inputs = "ratings"`` (each user sums its
training row), and replaces the target's row by its neighbour's in half the runs. The server scores a
run by ``masked_match`` (ring words of the target's masked input equal to one candidate input or the
other) and by the generic logistic regression on every number it received.

"No violation found" here means the trials did not tell the two inputs apart through the masked
messages: a lower bound of 0 is consistent with the claim, not a proof of it. (What zero masks look
like: tests/protocols/secagg/test_secagg_audit.py zeroes the PRG and the same audit reports a violation.)
With ``--seeds N`` each protocol is audited N times at different data seeds (another data set, so another
target and other pairs of inputs; the table shows the means). The audits go to ``--out`` (default
``results/audit_secagg``), one folder each (``<graph>-seed<i>``); running the script again resumes them.
With matplotlib the figure ``claimed_vs_audited.png`` is drawn there.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fedrecsim.audit import AuditRow, AuditScript, Column, GridResult, GridSize, ScriptRun
from fedrecsim.study import run_script

SCENARIO = Path(__file__).resolve().parent / "secagg_small.toml"
SEED = 5
GRAPHS = {"Bonawitz et al. 2017": "complete", "SecAgg+": "sparse"}
DISTINGUISHERS = ("masked_match", "logistic")
#: The data's size (users sum rows of ``items`` values) and the trials per world.
FULL = GridSize(users=10, items=50, ratings=200, trials=150)
QUICK = GridSize(users=5, items=20, ratings=40, trials=20)
COLUMNS = (
    Column("protocol", 22, lambda row: row.row.key, left=True), Column("claimed", 8, lambda row: row.claimed, "g"),
    Column("masked_match", 14, lambda row: row.entry("masked_match")), Column("logistic", 10, lambda row: row.entry("logistic")),
    Column("trials/s", 10, lambda row: row.trials_per_s, ".1f"),
)


def overrides(size: GridSize, graph: str, trials: int) -> tuple[str, ...]:
    return (
        "run.rounds=1", *size.data(),
        "availability.dropout=0.0", "protocol.mode='real'", f"protocol.graph='{graph}'", "protocol.inputs='ratings'",
        "network.latency={model='constant', seconds=0.01}", "audit.party='server:0'", f"audit.trials={trials}",
    )


def paint(axes: Any, result: GridResult) -> None:
    names = [row.row.key for row in result.rows]
    for offset, distinguisher in enumerate(DISTINGUISHERS):
        axes.bar([i + 0.4 * offset for i in range(len(names))], [row.entry(distinguisher) for row in result.rows], width=0.4,
                 label=distinguisher)
    axes.axhline(0.0, color="k", linestyle="--", linewidth=1, label="claimed: 0 beyond the sum")
    axes.set_xticks([i + 0.2 for i in range(len(names))], names)
    axes.set_ylim(bottom=-0.05, top=max(1.0, *(row.most for row in result.rows)))
    axes.set_ylabel("audited epsilon lower bound")
    axes.set_title("Secure aggregation: the server's view of one input")
    axes.legend(loc="upper right", fontsize=8)


def rows(size: GridSize, trials: int) -> list[AuditRow]:
    return [AuditRow(name, name, graph, overrides(size, graph, trials)) for name, graph in GRAPHS.items()]


def heading(run: ScriptRun) -> str:
    return (f"Secure aggregation, server's view, one user's input replaced: {run.size.users} users summing rows of "
            f"{run.size.items} values, real cryptography, {run.counts}, bounds at "
            f"{run.result.rows[0].document['best']['confidence']:.0%} confidence over both distinguishers")


SCRIPT = AuditScript(
    SCENARIO, "Audit secure aggregation's claim from the server's view", out="results/audit_secagg",
    quick="both graphs at 20 trials per world, 5 users (seconds)", sizes=(FULL, QUICK), trials=(FULL.trials, QUICK.trials),
    rows=rows, heading=heading, columns=COLUMNS, figure="claimed_vs_audited.png", paint=paint, data_seed=SEED,
    note="The claim is epsilon = 0 for what the server's view says beyond the sum: a violation means the masked messages tell "
         "the two inputs apart.",
)
main = SCRIPT.main


if __name__ == "__main__":
    sys.exit(run_script(main))
