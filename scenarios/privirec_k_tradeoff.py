"""PriviRec-k's trade-off (Nicolas et al. Fig. 3): NDCG@20 and client bytes over the rank k, beside PriviRec.

Usage::

    python scenarios/privirec_k_tradeoff.py            # 500 users x 500 items, k = 25 ... 250
    python scenarios/privirec_k_tradeoff.py --quick    # a tiny grid in seconds (the test suite runs this)

The cells are one study (`fedrecsim.study`, a zipped axis over variant, k and ideal_k) into ``--out``
(default ``results/privirec_k_tradeoff``; a re-run resumes); with ``--seeds N`` every number is the mean
over seeds 3, 4, ... (``--set run.seed=S`` moves the first). Each cell is a run of ``privirec_small.toml`` at the chosen size with ``protocol.variant = "privirec_k"``
and ``protocol.k`` = the cell's k, L = 2 power iterations; the users' F_IDL keeps the leading
``ideal_k`` columns (the paper's 256 of Gowalla's 40,981 items, here scaled to the item count) while P~ ~
S_k Diag(t) S_k^T uses all k, as in the paper's Fig. 5. The reference line is PriviRec (the exact P~ by
secure aggregation) with k = ideal_k. Every run has the same data, seed and Gaussian start; secure
aggregation runs in ideal mode beyond ``real_max_items`` (the bytes are the real protocol's). The table
prints NDCG@20, Recall@20 and the mean bytes a user sent and received over the whole run; the paper's
shape is NDCG rising with k towards (and past) PriviRec's while the client bytes grow linearly in k,
staying far below PriviRec's m^2 per user.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrecsim.study import ScriptParser, Study, StudyResult, run_script

SCENARIO = Path(__file__).resolve().parent / "privirec_small.toml"
SEED = 3


@dataclass(frozen=True)
class Grid:
    users: int
    items: int
    per_user: int
    ideal_k: int
    ks: tuple[int, ...]


FULL = Grid(users=500, items=500, per_user=30, ideal_k=25, ks=(25, 50, 100, 150, 200, 250))
QUICK = Grid(users=40, items=60, per_user=12, ideal_k=4, ks=(4, 12, 24))


def study(grid: Grid, seeds: int, overrides: list[str], out: Path, workers: int | None = None, dask: str | None = None) -> StudyResult:
    """Run (or resume) PriviRec at ``ideal_k`` and PriviRec-k at every k of the grid, same data and seeds."""
    sizes = [
        f"run.seed={SEED}", "run.rounds=2", f"data.users={grid.users}", f"data.items={grid.items}",
        f"data.ratings={grid.users * grid.per_user}", "protocol.baseline=false",
    ]
    cells = {
        "protocol.variant": ["privirec", *("privirec_k" for _ in grid.ks)],
        "protocol.k": [grid.ideal_k, *grid.ks],
        "protocol.ideal_k": [grid.ideal_k, *(min(grid.ideal_k, k) for k in grid.ks)],
    }
    return Study(SCENARIO, overrides=[*sizes, *overrides], zipped=cells, seeds=seeds).run(
        out, workers=workers, dask=dask, progress=sys.stderr.isatty()
    ).complete()


def format_table(grid: Grid, done: StudyResult) -> str:
    """The reference row (PriviRec), then a row per k, each the means over the cell's seeds."""
    summary, runs = done.summary, done.runs
    seeds = sorted({row["seed"] for row in runs})
    mode = done.result(runs[0])["privacy"]["secure_aggregation"]["mode"]
    title = (
        f"PriviRec-k over k: {grid.users} users x {grid.items} items, L = 2, F_IDL from {grid.ideal_k} columns, "
        f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}, secure aggregation {mode} mode"
    )
    header = f"{'method':<14}{'k':>6}{'NDCG@20':>10}{'Recall@20':>11}{'client sent B':>15}{'client recv B':>15}"

    def row(line: dict[str, Any]) -> str:
        name = "PriviRec" if line["protocol.variant"] == "privirec" else "PriviRec-k"
        return (f"{name:<14}{line['protocol.k']:>6}{line['ndcg@20.final.mean']:>10.4f}{line['recall@20.final.mean']:>11.4f}"
                f"{line['user_sent_bytes.final.mean']:>15,.0f}{line['user_recv_bytes.final.mean']:>15,.0f}")

    return "\n".join([title, header, *(row(line) for line in summary)])


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(__doc__.splitlines()[0], out="results/privirec_k_tradeoff", quick="a tiny grid that runs in seconds",
                          seeds=1, quick_seeds=1,
                          seeds_help="runs per k, at seeds run.seed, run.seed + 1, ...; every number is their mean")
    parser.add_size("grid", full=FULL, quick=QUICK)
    args = parser.parse_args(argv)
    print(format_table(args.grid, study(args.grid, args.seeds, args.set, args.out, args.workers, args.dask)))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
