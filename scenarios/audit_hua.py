"""Auditing Hua et al.'s eps for the published V: claimed against audited, and the recommender's known leak.

Usage::

    python scenarios/audit_hua.py                  # S1 at eps = 1, 2, 4, S2's recommender and an observer, 400 trials per world
    python scenarios/audit_hua.py --quick          # eps = 1, 4, the recommender and an observer at 20 trials per world (the suite)
    python scenarios/audit_hua.py --trials 1000 --seeds 3 --workers 2

Each audit (`fedrecsim.audit`, docs/audit.md) runs ``hua_s1.toml`` at a small size (20 users x 30 items,
d = 2, 5 iterations); the target is one rating of the data's top value added to or removed from the user
with the most ratings (``one_rating``), and the claim is eps for the whole run (`dpmf.audit`).

* **S1, the published V** (audited from any party's view, since V is public): ``theorem1_llr`` is the
  likelihood ratio of the target item's published profile given U -- the condition Theorem 1 proves its
  guarantee under -- and ``published_projection`` the observer's difference attack without U.
* **S2, the recommender** (``server:0``): ``rated_items`` -- the target user's item requests name the
  target item. The paper claims eps against the recommender; ``privacy.known_leaks`` says it does not
  hold, and the audit shows it: its bound is what the trials allow, above any small eps.
* **S2, an outside observer** (``user:0``, a user other than the target; only its view of the published
  V is scored: ``published_projection`` and ``item_norm``): the claim is expected to hold for it.

With ``--seeds N`` each row is audited N times at different data seeds (mean, least and largest bound).
The audits go to ``--out`` (default ``results/audit_hua``), one folder each
(``<view>-eps<eps>-seed<i>``); running the script again resumes them. With matplotlib the figure ``claimed_vs_audited.png`` is drawn there.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fedrecsim.audit import AuditRow, AuditScript, Column, GridResult, ScriptRun
from fedrecsim.study import run_script

SCENARIO = Path(__file__).resolve().parent / "hua_s1.toml"
SEED = 7
SIZE = ("run.rounds=5", "data.users=20", "data.items=30", "data.ratings=150", "protocol.d=2", "protocol.replay=false",
        "protocol.baseline_rounds=1")
#: Who looks, with which distinguishers.
V_VIEW = ("audit.party='user:0'", "audit.distinguishers=['theorem1_llr', 'published_projection']")
RECOMMENDER = ("protocol.scenario='S2'", "run.rounds=2", "audit.party='server:0'", "audit.distinguishers=['rated_items']")
OBSERVER = ("protocol.scenario='S2'", "run.rounds=2", "audit.party='user:0'",
            "audit.distinguishers=['published_projection', 'item_norm']")
#: The rows: (view, eps, its settings).
FULL = (("S1 V", 1.0, V_VIEW), ("S1 V", 2.0, V_VIEW), ("S1 V", 4.0, V_VIEW), ("S2 recommender", 1.0, RECOMMENDER),
        ("S2 observer", 1.0, OBSERVER))
QUICK = (("S1 V", 1.0, V_VIEW), ("S1 V", 4.0, V_VIEW), ("S2 recommender", 1.0, RECOMMENDER), ("S2 observer", 1.0, OBSERVER))
COLOURS = {"S1 V": "C0", "S2 recommender": "C3", "S2 observer": "C2"}
COLUMNS = (
    Column("view", 16, lambda row: row.row.key[0], left=True), Column("eps", 6, lambda row: row.claimed, "g"),
    Column("audited", 9, lambda row: row.mean), Column("least", 8, lambda row: row.least), Column("most", 8, lambda row: row.most),
    Column("best", 22, lambda row: row.best), Column("trials/s", 10, lambda row: row.trials_per_s, ".1f"),
)


def paint(axes: Any, result: GridResult) -> None:
    for view, colour in COLOURS.items():
        rows = [row for row in result.rows if row.row.key[0] == view]
        axes.scatter([row.claimed for row in rows for _ in row.bounds], [bound for row in rows for bound in row.bounds],
                     color=colour, label=view if rows else None)
    claimed = sorted({row.claimed for row in result.rows})
    axes.plot(claimed, claimed, "k--", linewidth=1, label="claimed eps (audited = claimed)")
    axes.set_xlabel("claimed eps per rating")
    axes.set_ylabel("audited lower bound (best distinguisher)")
    axes.set_title("Hua et al.: published V (S1) and the S2 recommender")
    axes.legend(loc="upper left", fontsize=8)


def rows(audits: tuple[tuple[str, float, tuple[str, ...]], ...], trials: int) -> list[AuditRow]:
    return [
        AuditRow((view, eps), f"{view} at eps {eps:g}", f"{view.replace(' ', '_')}-eps{eps:g}",
                 (*SIZE, f"protocol.epsilon={eps}", f"audit.trials={trials}", *settings))
        for view, eps, settings in audits
    ]


def heading(run: ScriptRun) -> str:
    return f"Hua et al., one rating of {run.target_users}, {run.counts}; audited: the best distinguisher's lower bound"


SCRIPT = AuditScript(
    SCENARIO, "Audit Hua et al.'s eps for the published V and against the recommender", out="results/audit_hua",
    quick="four audits at 20 trials per world (seconds)", sizes=(FULL, QUICK), trials=(400, 20), rows=rows, heading=heading,
    columns=COLUMNS, figure="claimed_vs_audited.png", paint=paint, data_seed=SEED,
    note="The S2 recommender is expected above its claim (privacy.known_leaks: it learns the rated items); the published V "
         "and the outside observer are expected within it.",
)
main = SCRIPT.main


if __name__ == "__main__":
    sys.exit(run_script(main))
