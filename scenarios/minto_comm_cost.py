"""Minto et al. Sec. 5.3: per-user bytes per epoch, ours (exact, from the ledger) beside the paper's.

Usage::

    python scenarios/minto_comm_cost.py                # 1,000 and 9,781 items, as in the paper
    python scenarios/minto_comm_cost.py --items 500 --users 30

Runs ``minto_comm_cost.toml`` once per item count and prints one line each. Every number is a sum of
encoded message lengths from the run's ledger divided by what it is per: download is what users
received (only ``ldp.model``) per user per epoch; upload is the mean ``ldp.reports`` message; the
proxy -> server bytes are the epoch's ``ldp.report_batch`` and ``ldp.relayed`` messages. The paper's
figures: V "weighs about 20 KB" at 1,000 items and "about 0.2 MB" at 9,781 (F = 5; 4 bytes per entry),
and a user "uploads about 4k bytes" per epoch (a 4-byte index and a 1-bit sign per report). Ours sends
V as float64, so the download is twice the paper's; the one-bit signs are packed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import fedrecsim
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

SCENARIO = Path(__file__).resolve().parent / "minto_comm_cost.toml"
PAPER_DOWNLOAD = {1000: "~20 KB", 9781: "~0.2 MB"}


def measure(items: int, users: int | None = None) -> dict[str, float]:
    """Bytes per user per epoch (down, up) and per epoch (proxy -> server) of one run at ``items`` items."""
    tables = read_tables(SCENARIO)
    overrides = [f"data.items={items}"]
    if users is not None:
        # One pool of all users per epoch, as in the file: a pool short of min_users is never released.
        overrides += [f"data.users={users}", f"data.ratings={users * 20}", f"protocol.min_users={users}"]
    scenario = parse_scenario(apply_overrides(tables, overrides))
    result = fedrecsim.run(scenario)
    ledger, epochs = result.result["ledger"], result.result["rounds_completed"]
    kinds, user_role = ledger["kinds"], ledger["roles"]["user"]
    batches = kinds["ldp.report_batch"]
    reports = sum(row["reports"] for row in result.rounds)
    return {
        "items": items,
        "d": scenario.protocol.d,
        "k": scenario.protocol.k,
        "users": user_role["parties"],
        "epochs": epochs,
        "download": user_role["recv_bytes"] / (user_role["parties"] * epochs),
        "upload": kinds["ldp.reports"]["bytes"] / kinds["ldp.reports"]["msgs"],
        "proxy_to_server": (batches["bytes"] + kinds["ldp.relayed"]["bytes"]) / epochs,
        "batches": batches["msgs"] / epochs,
        "bytes_per_report": batches["bytes"] / reports,
    }


def describe(cost: dict[str, float]) -> str:
    paper_down = PAPER_DOWNLOAD.get(int(cost["items"]), f"~{4 * cost['items'] * cost['d'] / 1000:.0f} KB")
    return (
        f"minto comm-cost items={cost['items']} F={cost['d']} k={cost['k']} users={cost['users']}: "
        f"download_per_user_epoch={cost['download']:,.0f} B (paper {paper_down}) "
        f"upload_per_user_epoch={cost['upload']:,.0f} B (paper ~4k = {4 * cost['k']:,} B) "
        f"proxy_to_server_per_epoch={cost['proxy_to_server']:,.0f} B in {cost['batches']:g} batches "
        f"({cost['bytes_per_report']:.3f} B/report)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[1000, 9781])
    parser.add_argument("--users", type=int, default=None, help="users (default: the scenario's)")
    args = parser.parse_args(argv)
    for items in args.items:
        print(describe(measure(items, args.users)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
