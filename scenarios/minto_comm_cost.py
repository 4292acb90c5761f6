"""Minto et al. Sec. 5.3: per-user bytes per epoch, ours (exact, from the ledger) beside the paper's.

Usage::

    python scenarios/minto_comm_cost.py                # 1,000 and 9,781 items, as in the paper
    python scenarios/minto_comm_cost.py --items 500 --users 30
    python scenarios/minto_comm_cost.py --quick        # 300 items, 30 users (seconds; the test suite runs this)

Runs ``minto_comm_cost.toml`` once per item count (a study over ``data.items``, `fedrecsim.study`, into
``--out``, default ``results/minto_comm_cost``; a re-run resumes) and prints one line each. Every number
is a sum of encoded message lengths from the run's ledger divided by what it is per: download is what
users received (only ``ldp.model``) per user per epoch; upload is the mean ``ldp.reports`` message; the
proxy -> server bytes are the epoch's ``ldp.report_batch`` and ``ldp.relayed`` messages. With ``--seeds
N`` each figure is the mean over the N runs (the sizes hardly depend on the seed: only the variable-length
integers of the wire do). The paper's figures: V "weighs about 20 KB" at 1,000 items and "about 0.2 MB"
at 9,781 (F = 5; 4 bytes per entry), and a user "uploads about 4k bytes" per epoch (a 4-byte index and a
1-bit sign per report). Ours sends V as float64, so the download is twice the paper's; the one-bit signs
are packed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import fmean
from typing import Any

from fedrecsim.study import ScriptParser, Study, StudyResult, run_script

SCENARIO = Path(__file__).resolve().parent / "minto_comm_cost.toml"
PAPER_DOWNLOAD = {1000: "~20 KB", 9781: "~0.2 MB"}
PAPER_ITEMS = (1000, 9781)
#: --quick: one small item count and population.
QUICK_ITEMS, QUICK_USERS = (300,), 30


def sizes(users: int | None) -> list[str]:
    """The overrides for ``users`` users (None: the file's)."""
    if users is None:
        return []
    # One pool of all users per epoch, as in the file: a pool short of min_users is never released.
    return [f"data.users={users}", f"data.ratings={users * 20}", f"protocol.min_users={users}"]


def run_study(items: tuple[int, ...], users: int | None, seeds: int, overrides: list[str], out: Path,
              workers: int | None = None, dask: str | None = None) -> StudyResult:
    """Run (or resume) one run per item count and seed into ``out``."""
    study = Study(SCENARIO, overrides=[*sizes(users), *overrides], grid={"data.items": list(items)}, seeds=seeds)
    return study.run(out, workers=workers, dask=dask, progress=sys.stderr.isatty()).complete()


def measure(document: dict[str, Any]) -> dict[str, float]:
    """Bytes per user per epoch (down, up) and per epoch (proxy -> server) of one run's result.json."""
    ledger, epochs = document["ledger"], document["rounds_completed"]
    kinds, user_role = ledger["kinds"], ledger["roles"]["user"]
    batches = kinds["ldp.report_batch"]
    reports = sum(row["reports"] for row in document["metrics"]["rounds"])
    protocol = document["scenario"]["protocol"]
    return {
        "items": document["scenario"]["data"]["items"],
        "d": protocol["d"],
        "k": protocol["k"],
        "users": user_role["parties"],
        "epochs": epochs,
        "download": user_role["recv_bytes"] / (user_role["parties"] * epochs),
        "upload": kinds["ldp.reports"]["bytes"] / kinds["ldp.reports"]["msgs"],
        "proxy_to_server": (batches["bytes"] + kinds["ldp.relayed"]["bytes"]) / epochs,
        "batches": batches["msgs"] / epochs,
        "bytes_per_report": batches["bytes"] / reports,
    }


def costs(done: StudyResult) -> list[dict[str, float]]:
    """Per item count (in the study's order): `measure`'s figures, each the mean over the seeds' runs."""
    by_items: dict[int, list[dict[str, float]]] = {}
    for row in done.runs:
        by_items.setdefault(row["data.items"], []).append(measure(done.result(row)))
    return [{name: fmean([run[name] for run in runs]) for name in runs[0]} for runs in by_items.values()]


def describe(cost: dict[str, float]) -> str:
    paper_down = PAPER_DOWNLOAD.get(int(cost["items"]), f"~{4 * cost['items'] * cost['d'] / 1000:.0f} KB")
    return (
        f"minto comm-cost items={cost['items']:g} F={cost['d']:g} k={cost['k']:g} users={cost['users']:g}: "
        f"download_per_user_epoch={cost['download']:,.0f} B (paper {paper_down}) "
        f"upload_per_user_epoch={cost['upload']:,.0f} B (paper ~4k = {4 * cost['k']:,.0f} B) "
        f"proxy_to_server_per_epoch={cost['proxy_to_server']:,.0f} B in {cost['batches']:g} "
        f"batch{'' if cost['batches'] == 1 else 'es'} "
        f"({cost['bytes_per_report']:.3f} B/report)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(__doc__.splitlines()[0], out="results/minto_comm_cost",
                          quick=f"{QUICK_ITEMS[0]} items and {QUICK_USERS} users (seconds)", seeds=1, quick_seeds=1,
                          seeds_help="runs per item count, at seeds run.seed, run.seed + 1, ...; every figure is their mean")
    parser.add_sized_argument("--items", full=PAPER_ITEMS, quick=QUICK_ITEMS, type=int, nargs="+", help="item counts")
    parser.add_sized_argument("--users", full=None, quick=QUICK_USERS, type=int, minimum=1, help="users")
    args = parser.parse_args(argv)
    for cost in costs(run_study(tuple(args.items), args.users, args.seeds, args.set, args.out, args.workers, args.dask)):
        print(describe(cost), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
