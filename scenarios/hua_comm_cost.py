"""Hua et al.'s communication figures for S3 beside ours: ``python scenarios/hua_comm_cost.py [--quick]``.

Runs ``hua_comm_cost.toml`` twice -- masks psi sent explicitly (the paper) and as a 16-byte PRG key per
user and iteration (``mask_transport = "seeded"``) -- and prints, per iteration, the most bytes any served
user downloaded and uploaded and what the third party sent, as exact encoded message sizes from the
ledger, beside the paper's claims (Sec. 5), and the ring the values travel in (its width, its fractional
bits and the range the run needs, `fedrecsim.protocols.dpmf.headroom`). ``--quick`` runs a tenth of the size (the claims are about
1000 users; the quick figures only show that the script works).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import fedrecsim

SCENARIO = Path(__file__).resolve().parent / "hua_comm_cost.toml"
QUICK = ["data.users=100", "data.items=1000", "data.ratings=2000", "protocol.max_users=100", "run.rounds=1"]
TRANSPORTS = ("explicit", "seeded")


def measure(overrides: list[str]) -> dict[str, dict[str, float]]:
    """Per transport: the worst iteration's user download / upload and third-party bytes, and the sizes."""
    figures: dict[str, dict[str, float]] = {}
    for transport in TRANSPORTS:
        scenario = fedrecsim.load_scenario(SCENARIO, [*overrides, f'protocol.mask_transport="{transport}"'])
        result = fedrecsim.run(scenario)
        rated = result.outcome.state["rated_items_seen"]
        figures[transport] = {
            "down": max(row["user_down_max_b"] for row in result.rounds),
            "up": max(row["user_up_max_b"] for row in result.rounds),
            "third_party": max(row["tp_sent_b"] for row in result.rounds),
            "served": max(row["selected"] for row in result.rounds),
            "max_items": max((items.size for items in rated.values()), default=0),
            "items": int(np.unique(np.concatenate(list(rated.values()))).size) if rated else 0,
            "ring_bits": result.result["privacy"]["ring"]["bits"],
            "frac_bits": result.result["privacy"]["ring"]["frac_bits"],
            "ring_needed_abs": result.result["privacy"]["ring"]["needed_abs"],
        }
    return figures


def table(figures: dict[str, dict[str, float]]) -> str:
    explicit, seeded = figures["explicit"], figures["seeded"]
    rows = [
        ("quantity per iteration", "paper", "ours, explicit psi", "ours, seeded psi"),
        (f"user download (<= {explicit['max_items']:.0f} items)", "<= 12 KB", _size(explicit["down"]), _size(seeded["down"])),
        ("user upload", "<= 5 KB", _size(explicit["up"]), _size(seeded["up"])),
        (
            f"third party sends ({explicit['served']:.0f} users, {explicit['items']:,} items)",
            "< 3 MB (1000 users, <= 10,000 items)",
            _size(explicit["third_party"]),
            _size(seeded["third_party"]),
        ),
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    saved = 1 - seeded["down"] / explicit["down"] if explicit["down"] else 0.0
    per_item = explicit["third_party"] / explicit["items"] if explicit["items"] else 0.0
    lines.append(
        f"(ring Z_2^{explicit['ring_bits']:.0f} with {explicit['frac_bits']:.0f} fractional bits: range +-2^{explicit['ring_bits'] - 1 - explicit['frac_bits']:.0f}, "
        f"the aggregates need +-{explicit['ring_needed_abs']:.3g} at a tail probability of 1e-12 per aggregate; B = bytes, KiB = 1024 B; seeded masks save {saved:.0%} of the download; "
        f"the third party sends {per_item:,.0f} B per aggregated item)"
    )
    return "\n".join(lines)


def _size(nbytes: float) -> str:
    return f"{nbytes:,.0f} B ({nbytes / 1024:,.1f} KiB)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the size, to check the script runs")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key")
    args = parser.parse_args(argv)
    print(table(measure((QUICK if args.quick else []) + args.set)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
