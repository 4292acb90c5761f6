"""Minto et al. Fig. 2: HR@10 over a grid of per-report budgets eps and reports per user k.

Usage::

    python scenarios/minto_tradeoff.py            # the paper's small set: 1,000 users x 1,000 items, 20 epochs
    python scenarios/minto_tradeoff.py --users 10000
    python scenarios/minto_tradeoff.py --quick    # a tiny grid in seconds (the test suite runs this)

Every cell is one run of ``minto_ldp.toml`` with the grid's ``protocol.epsilon`` and ``protocol.k`` and
the chosen size, on the same data, seed and initial V, so the cells differ only in the privacy knobs.
HR@10 is measured once, after the last epoch. The table is printed with the two baselines of the
paper's Fig. 5 -- MF-NP (the same training without LDP) and random -- and written as CSV (``--out``).
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

import fedrecsim
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

SCENARIO = Path(__file__).resolve().parent / "minto_ldp.toml"


@dataclass(frozen=True)
class Grid:
    """The size of the study and the (eps, k) grid it sweeps."""

    users: int
    items: int
    interactions_per_user: int
    epochs: int
    epsilons: tuple[float, ...]
    ks: tuple[int, ...]


FULL = Grid(users=1000, items=1000, interactions_per_user=50, epochs=20,
            epsilons=(0.5, 1.0, 2.5, 5.0, 10.0), ks=(1, 50, 100, 250))
QUICK = Grid(users=150, items=200, interactions_per_user=20, epochs=4, epsilons=(0.5, 10.0), ks=(1, 100))


def run_cell(grid: Grid, epsilon: float, k: int, seed: int) -> dict[str, float]:
    """One run of the scenario at ``(epsilon, k)``: its final metrics and the privacy it spent."""
    overrides = [
        f"run.seed={seed}",
        f"run.rounds={grid.epochs}",
        f"data.users={grid.users}",
        f"data.items={grid.items}",
        f"data.ratings={grid.users * grid.interactions_per_user}",
        f"protocol.epsilon={epsilon}",
        f"protocol.k={k}",
        f"protocol.min_users={grid.users}",
        f"protocol.eval_every={grid.epochs}",
    ]
    result = fedrecsim.run(parse_scenario(apply_overrides(read_tables(SCENARIO), overrides)))
    metrics = result.metrics
    return {
        "epsilon": epsilon,
        "k": k,
        "hr@10": metrics["hr@10"],
        "hr@10_mf_np": metrics["hr@10_mf_np"],
        "hr@10_random": metrics["hr@10_random"],
        "epsilon_per_user_total": result.result["privacy"]["epsilon_per_user_total"],
    }


def format_table(grid: Grid, cells: list[dict[str, float]], seed: int) -> str:
    """Rows eps, columns k, HR@10 in each cell; the baselines in the title line."""
    by_cell = {(cell["epsilon"], cell["k"]): cell["hr@10"] for cell in cells}
    title = (
        f"HR@10, {grid.users} users x {grid.items} items, {grid.epochs} epochs, seed {seed}: "
        f"MF-NP {cells[0]['hr@10_mf_np']:.3f}, random {cells[0]['hr@10_random']:.3f}"
    )
    header = "eps \\ k " + "".join(f"{k:>8}" for k in grid.ks)
    rows = [f"{epsilon:<8g}" + "".join(f"{by_cell[epsilon, k]:>8.3f}" for k in grid.ks) for epsilon in grid.epsilons]
    return "\n".join([title, header, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny grid that runs in seconds")
    parser.add_argument("--users", type=int, default=None, help="users (default: 1,000; quick: 150)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("results/minto_tradeoff.csv"), help="CSV of every cell")
    args = parser.parse_args(argv)
    grid = QUICK if args.quick else FULL
    if args.users is not None:
        if args.users < 1:
            parser.error(f"--users must be >= 1, got {args.users}")
        grid = Grid(args.users, grid.items, grid.interactions_per_user, grid.epochs, grid.epsilons, grid.ks)
    cells = []
    for epsilon in grid.epsilons:
        for k in grid.ks:
            cells.append(run_cell(grid, epsilon, k, args.seed))
            print(f"eps={epsilon:g} k={k}: hr@10={cells[-1]['hr@10']:.3f}", file=sys.stderr, flush=True)
    print(format_table(grid, cells, args.seed))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(cells[0]))
        writer.writeheader()
        writer.writerows(cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
