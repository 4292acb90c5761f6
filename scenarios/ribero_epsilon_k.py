"""Ribero et al. Figs. 4-6: mean percentile rank and test RMSE of the private model over epsilon x k.

``python scenarios/ribero_epsilon_k.py [--quick] [--seeds N] [--set KEY=VALUE ...] [--out DIR] [--workers N | --dask ADDRESS]``
runs the study ``ribero_epsilon_k.toml`` (epsilon in {0.005, 0.05, 0.5, 1, 10, 100, 1000, 10000} -- the paper's
synthetic grid {0.005, 0.05, 0.5} and larger budgets -- x k in {10, 20, 50} on ``ribero_synthetic.toml``, three
seeds by default) with `fedrecsim.study` into ``--out``
(default ``results/ribero_epsilon_k``; re-running resumes it), then prints from its ``summary.csv`` one
table per k: the private model's mean rank (mean over seeds and 95% half-width) and RMSE per epsilon, and
the non-private baselines of the same runs (they depend on k and the seed, not on epsilon), averaged over
the study's runs. ``--quick`` runs a tiny grid with two seeds (seconds; for the tests).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fedrecsim.study import ScriptParser, Study, interval_text, run_script

STUDY = Path(__file__).resolve().parent / "ribero_epsilon_k.toml"
QUICK = ["data.users=120", "data.items=60", "data.ratings=2400", "protocol.nmf_iterations=60"]
QUICK_GRID = {"protocol.epsilon": [0.1, 10000.0], "protocol.k": [2, 4]}
BASELINES = ("kmeans", "exemplars", "full", "local", "random")


def study(seeds: int, overrides: list[str], grid: dict[str, list[float]], out: Path, workers: int | None = None,
          dask: str | None = None) -> list[dict[str, Any]]:
    """Run (or resume) the sweep into ``out``, ``grid`` replacing the study file's axes it names (``{}``: the
    file's grid); its summary rows, one per (epsilon, k)."""
    done = Study(STUDY, overrides=overrides, grid=grid, seeds=seeds).run(
        out, workers=workers, dask=dask, progress=sys.stderr.isatty()
    ).complete()
    return done.summary


def render(summary: list[dict[str, Any]], seeds: int) -> str:
    """Per k: a row per epsilon, then the baselines' mean rank and RMSE averaged over that k's runs."""
    blocks = []
    for k in sorted({line["protocol.k"] for line in summary}):
        lines = sorted((line for line in summary if line["protocol.k"] == k), key=lambda line: line["protocol.epsilon"])
        table = [["epsilon", f"mean_rank (mean of {seeds})", "95% CI", "test_rmse"]]
        table += [[f"{line['protocol.epsilon']:g}", f"{line['mean_rank.final.mean']:.3f}",
                   interval_text(line, "mean_rank.final"), f"{line['test_rmse.final.mean']:.3f}"] for line in lines]
        for name in BASELINES:
            rank = sum(line[f"mean_rank_{name}.final.mean"] for line in lines) / len(lines)
            rmse = sum(line[f"test_rmse_{name}.final.mean"] for line in lines) / len(lines)
            table.append([name, f"{rank:.3f}", "", f"{rmse:.3f}"])
        widths = [max(len(row[column]) for row in table) for column in range(len(table[0]))]
        rows = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in table]
        rows.insert(1, "  ".join("-" * width for width in widths))
        rows.insert(2 + len(lines), "  ".join("-" * width for width in widths))
        blocks.append(f"k = {k}\n" + "\n".join(rows))
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(__doc__.splitlines()[0], out="results/ribero_epsilon_k", quick="a tiny grid with two seeds (seconds)",
                          seeds_help="runs per (epsilon, k), at seeds run.seed, run.seed + 1, ...; mean_rank is their mean with its 95%% interval")
    parser.add_size("sizes", full=[], quick=QUICK)
    parser.add_size("grid", full={}, quick=QUICK_GRID)
    args = parser.parse_args(argv)
    print(render(study(args.seeds, [*args.sizes, *args.set], args.grid, args.out, args.workers, args.dask), args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
