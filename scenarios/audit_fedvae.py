"""Auditing what FedVAE's server learns of one interaction (Polato): no DP claim, and the leak it measures.

Usage::

    python scenarios/audit_fedvae.py             # T = 1, 2, 4 rounds at 200 trials per world (minutes on 2 cores)
    python scenarios/audit_fedvae.py --quick     # T = 1, 2 at 20 trials per world (the test suite runs this)
    python scenarios/audit_fedvae.py --trials 500 --seeds 3 --workers 2

FedVAE claims no differential privacy: interactions stay on the device, and the server receives each
sampled user's Mult-VAE gradient. Each audit (`fedrecsim.audit`, docs/audit.md) runs
``fedvae_ml1m_shape.toml`` at a small size with every training user sampled every round, and adds one
interaction to the target user's row in half the runs. The server scores a run by ``gradient_support``:
the rounds in which the target's gradient has a non-zero first-layer row at the added item. Input
dropout p = 0.5 hides a held item in a round with probability p, and an item the user does not hold is
never in the support, so over T rounds the test "score >= 1" has FPR 0 and TPR 1 - p^T.

With no claim there is no violation to find ("no DP claim"): the audited value is the leak these trials
can demonstrate. A test with no false positive is capped by the trials, not by the protocol: the script
prints the cap (the bound a perfect test reaches with as many held-out trials) beside each bound.

With ``--seeds N`` each T is audited N times at different data seeds (another data set, target user and
added interaction each; the table shows the mean). The audits go to ``--out`` (default
``results/audit_fedvae``), one folder each (``rounds<T>-seed<i>``); running the script again resumes
them. With matplotlib the figure ``audited_leak.png`` is drawn there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrecsim.audit import AuditRow, AuditScript, Column, GridResult, GridSize, ScriptRun, claimed_cell
from fedrecsim.study import run_script

SCENARIO = Path(__file__).resolve().parent / "fedvae_ml1m_shape.toml"
SEED = 11
DROPOUT = 0.5


@dataclass(frozen=True)
class Size(GridSize):
    """The data's size and the trials per world (`GridSize`), the model's hidden width and the round counts audited."""

    hidden: int
    rounds: tuple[int, ...]


FULL = Size(users=40, items=80, ratings=800, hidden=32, rounds=(1, 2, 4), trials=200)
QUICK = Size(users=12, items=30, ratings=120, hidden=8, rounds=(1, 2), trials=20)
COLUMNS = (
    Column("T", 4, lambda row: str(row.row.key), left=True), Column("claimed", 9, claimed_cell),
    Column("audited", 9, lambda row: row.mean), Column("cap", 7, lambda row: row.cap),
    Column("TPR", 7, lambda row: row.entry("gradient_support", "tpr")),
    Column("FPR", 7, lambda row: row.entry("gradient_support", "fpr")),
    Column("1-p^T", 7, lambda row: 1 - DROPOUT ** row.row.key), Column("trials/s", 10, lambda row: row.trials_per_s, ".1f"),
)


def overrides(size: Size, rounds: int, trials: int) -> tuple[str, ...]:
    return (
        f"run.rounds={rounds}", *size.data(), "data.test_fraction=0.1", f"protocol.users_per_round={size.users}",
        f"protocol.hidden={size.hidden}", "protocol.latent=8", f"protocol.dropout={DROPOUT}", "protocol.secure_filter='none'",
        "protocol.baseline=false", "protocol.cutoffs=[10]", "network.latency={model='constant', seconds=0.01}",
        "audit.party='server:0'", f"audit.trials={trials}", "audit.distinguishers=['gradient_support']",
    )


def paint(axes: Any, result: GridResult) -> None:
    rounds = [row.row.key for row in result.rows]
    axes.plot(rounds, [row.mean for row in result.rows], "o-", label="audited lower bound (gradient_support)")
    axes.plot(rounds, [row.cap for row in result.rows], "k--", linewidth=1, label="cap of a perfect test at these trials")
    axes.set_xlabel("rounds T (the target sampled in each)")
    axes.set_ylabel("epsilon")
    axes.set_title("FedVAE, server's view of one interaction: no DP claim")
    axes.legend(loc="lower right", fontsize=8)


def rows(size: Size, trials: int) -> list[AuditRow]:
    return [AuditRow(rounds, f"T = {rounds}", f"rounds{rounds}", overrides(size, rounds, trials)) for rounds in size.rounds]


def heading(run: ScriptRun) -> str:
    confidence = run.result.rows[0].document["confidence"]
    return (f"FedVAE (Polato), server's view, one interaction added or removed: {run.size.users} users x {run.size.items} items, "
            f"dropout {DROPOUT}, {run.counts}, bounds at {confidence:.0%} confidence")


def note(result: GridResult) -> str:
    if any(row.mean > 0 for row in result.rows):
        return ("The server's view of the gradients demonstrably reveals one interaction: where the held-out false-positive "
                "rate is 0 the audited value is capped by the number of trials (the cap column), not by the protocol -- "
                "more trials give a larger lower bound.")
    return ("These trials demonstrate no leak (every bound is 0); with no claim to check that says nothing about "
            "privacy: run more trials (--trials).")


SCRIPT = AuditScript(
    SCENARIO, "Audit what FedVAE's server learns of one interaction", out="results/audit_fedvae",
    quick="two round counts at 20 trials per world (seconds)", sizes=(FULL, QUICK), trials=(FULL.trials, QUICK.trials),
    rows=rows, heading=heading, columns=COLUMNS, figure="audited_leak.png", paint=paint, note=note, data_seed=SEED,
)
main = SCRIPT.main


if __name__ == "__main__":
    sys.exit(run_script(main))
