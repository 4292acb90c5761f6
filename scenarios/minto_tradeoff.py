"""Minto et al. Fig. 2: HR@10 over a grid of per-report budgets eps and reports per user k.

Usage::

    python scenarios/minto_tradeoff.py            # the paper's small set: 1,000 users x 1,000 items, 20 epochs
    python scenarios/minto_tradeoff.py --users 10000
    python scenarios/minto_tradeoff.py --quick    # a tiny grid in seconds (the test suite runs this)
    python scenarios/minto_tradeoff.py --seeds 3 --set run.seed=1   # each cell the mean over seeds 1, 2, 3

The grid is a study (`fedrecsim.study`) of ``minto_ldp.toml`` over ``protocol.epsilon`` x ``protocol.k``
at the chosen size, every cell on the same data, seed and initial V, so the cells differ only in the
privacy knobs. HR@10 is measured once, after the last epoch (with ``--seeds N``, the mean over N seeds: seed 7, 8, ...
unless ``--set run.seed=...`` says otherwise). The sweep folder (``--out``, default
``results/minto_tradeoff``; a re-run resumes) holds every run and its ``sweep.csv`` and ``summary.csv``;
the table is printed from ``summary.csv`` with the two baselines of the paper's Fig. 5 -- MF-NP (the
same training without LDP) and random.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fedrecsim.study import ScriptParser, Study, run_script

SCENARIO = Path(__file__).resolve().parent / "minto_ldp.toml"
SEED = 7


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


def run_grid(
    grid: Grid, seeds: int, overrides: list[str], out: Path, workers: int | None = None, dask: str | None = None
) -> list[dict[str, Any]]:
    """Run (or resume) the study of the grid into ``out``; its summary rows, one per (eps, k)."""
    sizes = [
        f"run.seed={SEED}",
        f"run.rounds={grid.epochs}",
        f"data.users={grid.users}",
        f"data.items={grid.items}",
        f"data.ratings={grid.users * grid.interactions_per_user}",
        f"protocol.min_users={grid.users}",
        f"protocol.eval_every={grid.epochs}",
    ]
    axes = {"protocol.epsilon": [float(epsilon) for epsilon in grid.epsilons], "protocol.k": list(grid.ks)}
    study = Study(SCENARIO, overrides=[*sizes, *overrides], grid=axes, seeds=seeds)
    return study.run(out, workers=workers, dask=dask, progress=sys.stderr.isatty()).complete().summary


def format_table(grid: Grid, cells: list[dict[str, Any]]) -> str:
    """Rows eps, columns k, HR@10 in each cell (the mean over its seeds); the baselines in the title line."""
    by_cell = {(cell["protocol.epsilon"], cell["protocol.k"]): cell["hr@10.final.mean"] for cell in cells}
    seeds = cells[0]["runs"]
    title = (
        f"HR@10, {grid.users} users x {grid.items} items, {grid.epochs} epochs, {seeds} seed{'s' if seeds > 1 else ''} a cell: "
        f"MF-NP {cells[0]['hr@10_mf_np.final.mean']:.3f}, random {cells[0]['hr@10_random.final.mean']:.3f}"
    )
    header = "eps \\ k " + "".join(f"{k:>8}" for k in grid.ks)
    rows = [f"{epsilon:<8g}" + "".join(f"{by_cell[epsilon, k]:>8.3f}" for k in grid.ks) for epsilon in grid.epsilons]
    return "\n".join([title, header, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(__doc__.splitlines()[0], out="results/minto_tradeoff", quick="a tiny grid that runs in seconds",
                          seeds=1, quick_seeds=1,
                          seeds_help="runs per (eps, k) cell, at seeds run.seed, run.seed + 1, ...; HR@10 is their mean")
    parser.add_size("grid", full=FULL, quick=QUICK)
    parser.add_sized_argument("--users", full=FULL.users, quick=QUICK.users, type=int, minimum=1, help="users")
    args = parser.parse_args(argv)
    grid = replace(args.grid, users=args.users)
    print(format_table(grid, run_grid(grid, args.seeds, args.set, args.out, args.workers, args.dask)))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
