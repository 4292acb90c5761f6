"""Ribero et al. Figs. 4-6: test RMSE and mean percentile rank over epsilon x k on the synthetic counts.

Usage::

    python scenarios/ribero_epsilon_k.py            # epsilon in {0.01, 0.1, 0.5, 1} x k in {10, 20, 50}
    python scenarios/ribero_epsilon_k.py --quick    # a tiny grid in seconds (the test suite runs this)

Every cell is one run of ``ribero_synthetic.toml`` with the cell's ``protocol.epsilon`` and
``protocol.k`` on the same data and seed; the non-private baselines (MF + k-means, Full, Local, Random)
are printed beside each cell (they depend on k, not on epsilon). The table is also written as CSV
(``--out``).
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

import fedrecsim
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

SCENARIO = Path(__file__).resolve().parent / "ribero_synthetic.toml"
COLUMNS = ("epsilon", "k", "test_rmse", "mean_rank", "map@10", "test_rmse_kmeans", "mean_rank_kmeans",
           "mean_rank_full", "mean_rank_local", "mean_rank_random")


@dataclass(frozen=True)
class Grid:
    users: int
    items: int
    entries_per_user: int
    epsilons: tuple[float, ...]
    ks: tuple[int, ...]


FULL = Grid(users=1000, items=500, entries_per_user=100, epsilons=(0.01, 0.1, 0.5, 1.0), ks=(10, 20, 50))
QUICK = Grid(users=120, items=60, entries_per_user=20, epsilons=(0.1, 1.0), ks=(2, 4))


def run_cell(grid: Grid, epsilon: float, k: int, seed: int) -> dict[str, float]:
    overrides = [
        f"run.seed={seed}", f"data.users={grid.users}", f"data.items={grid.items}",
        f"data.ratings={grid.users * grid.entries_per_user}", f"protocol.epsilon={epsilon}", f"protocol.k={k}",
        "protocol.nmf_iterations=60" if grid is QUICK else "protocol.nmf_iterations=200",
    ]
    result = fedrecsim.run(parse_scenario(apply_overrides(read_tables(SCENARIO), overrides)))
    final = result.result["metrics"]["final"]
    return {"epsilon": epsilon, "k": k, **{name: final[name] for name in COLUMNS[2:]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny grid in seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="also write the table as CSV here")
    args = parser.parse_args(argv)
    grid = QUICK if args.quick else FULL
    rows = [run_cell(grid, epsilon, k, args.seed) for k in grid.ks for epsilon in grid.epsilons]
    print("  ".join(f"{name:>16}" for name in COLUMNS))
    for row in rows:
        print("  ".join(f"{row[name]:>16.4g}" for name in COLUMNS))
    if args.out is not None:
        with open(args.out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
