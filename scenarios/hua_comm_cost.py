"""Hua et al.'s communication figures for S3 beside ours: ``python scenarios/hua_comm_cost.py [--quick]``.

Runs ``hua_comm_cost.toml`` twice -- masks psi sent explicitly (the paper) and as a 16-byte PRG key per
user and iteration (``mask_transport = "seeded"``) -- and prints, per iteration, the bytes the served
users with at most 20 rated items (the paper's condition) downloaded and uploaded, largest and mean,
and what the third party sent, as exact encoded message sizes from the ledger, beside the paper's
claims (Sec. 5); the heaviest served user of any size beside them; and the ring the values travel in (its width, its fractional
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
    """Per transport: the paper's user figures on the paper's population -- the served users with at most
    20 rated items, per iteration (mean and largest) -- the heaviest served user beside them, the third
    party's bytes per iteration (mean and worst), and the sizes."""
    figures: dict[str, dict[str, float]] = {}
    for transport in TRANSPORTS:
        scenario = fedrecsim.load_scenario(SCENARIO, [*overrides, f'protocol.mask_transport="{transport}"'])
        result = fedrecsim.run(scenario)
        rated = result.outcome.state["rated_items_seen"]
        down, up, third = result.result["paper_figures"]
        figures[transport] = {
            "down_mean": down["measured"],
            "down": down["measured_max"],
            "down_heaviest": down["heaviest"],
            "up_mean": up["measured"],
            "up": up["measured_max"],
            "up_heaviest": up["heaviest"],
            "paper_users": down["population_size"],
            "third_party_mean": third["measured"],
            "third_party": third["measured_max"],
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
        (
            f"user download ({explicit['paper_users']:,.0f} users with <= 20 items): largest",
            "<= 12 KB", _size(explicit["down"]), _size(seeded["down"]),
        ),
        ("  mean", "", _size(explicit["down_mean"]), _size(seeded["down_mean"])),
        ("user upload (same users): largest", "<= 5 KB", _size(explicit["up"]), _size(seeded["up"])),
        ("  mean", "", _size(explicit["up_mean"]), _size(seeded["up_mean"])),
        (
            f"third party sends ({explicit['served']:.0f} users, {explicit['items']:,} items): worst iteration",
            "< 3 MB (1000 users, <= 10,000 items)",
            _size(explicit["third_party"]),
            _size(seeded["third_party"]),
        ),
        (
            f"heaviest served user of any size (<= {explicit['max_items']:.0f} items): download / upload",
            "(not the paper's condition)",
            f"{_size(explicit['down_heaviest'])} / {_size(explicit['up_heaviest'])}",
            f"{_size(seeded['down_heaviest'])} / {_size(seeded['up_heaviest'])}",
        ),
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    saved = 1 - seeded["down"] / explicit["down"] if explicit["down"] else 0.0
    per_item = explicit["third_party"] / explicit["items"] if explicit["items"] else 0.0
    lines.append(
        f"(ring Z_2^{explicit['ring_bits']:.0f} with {explicit['frac_bits']:.0f} fractional bits (frac_bits = \"auto\": the most "
        f"that hold the aggregates): range +-2^{explicit['ring_bits'] - 1 - explicit['frac_bits']:.0f}, "
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
