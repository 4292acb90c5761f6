"""Ribero et al. Figs. 4-6: mean percentile rank and test RMSE of the private model over epsilon x k.

``python scenarios/ribero_epsilon_k.py [--quick] [--seeds N] [--set KEY=VALUE ...] [--out DIR] [--workers N]``
runs the study ``ribero_epsilon_k.toml`` (epsilon in {0.01, 0.1, 0.5, 1, 10, 100, 1000, 10000} x k in {10,
20, 50} on ``ribero_synthetic.toml``, three seeds by default) with `fedrecsim.sweep` into ``--out``
(default ``results/ribero_epsilon_k``; re-running resumes it), then prints from its ``summary.csv`` one
table per k: the private model's mean rank (mean over seeds and 95% half-width) and RMSE per epsilon, and
the non-private baselines of the same runs (they depend on k and the seed, not on epsilon), averaged over
the study's runs. ``--quick`` runs a tiny grid with two seeds (seconds; for the tests).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedrecsim.sweep import load_study, read_csv, run_sweep

STUDY = Path(__file__).resolve().parent / "ribero_epsilon_k.toml"
QUICK = ["data.users=120", "data.items=60", "data.ratings=2400", "protocol.nmf_iterations=60"]
QUICK_GRID = ["protocol.epsilon=0.1,10000", "protocol.k=2,4"]
BASELINES = ("kmeans", "exemplars", "full", "local", "random")


def study(seeds: int, overrides: list[str], quick: bool, out: Path, workers: int | None = None) -> list[dict[str, str]]:
    """Run (or resume) the sweep into ``out``; its summary rows, one per (epsilon, k)."""
    result = run_sweep(
        load_study(STUDY, grid=QUICK_GRID if quick else (), seeds=seeds, overrides=[*(QUICK if quick else []), *overrides]),
        out, workers=workers, progress=sys.stderr.isatty(),
    )
    return read_csv(result.path / "summary.csv")


def _half_width(line: dict[str, str], metric: str) -> str:
    """Half the 95% interval's width; "-" with a single seed (no interval)."""
    if not line[f"{metric}.ci95_high"]:
        return "-"
    return f"{(float(line[f'{metric}.ci95_high']) - float(line[f'{metric}.ci95_low'])) / 2:.3f}"


def render(summary: list[dict[str, str]], seeds: int) -> str:
    """Per k: a row per epsilon, then the baselines' mean rank and RMSE averaged over that k's runs."""
    blocks = []
    for k in sorted({int(line["protocol.k"]) for line in summary}):
        lines = sorted((line for line in summary if int(line["protocol.k"]) == k), key=lambda line: float(line["protocol.epsilon"]))
        table = [["epsilon", f"mean_rank (mean of {seeds})", "95% CI +-", "test_rmse"]]
        table += [[f"{float(line['protocol.epsilon']):g}", f"{float(line['mean_rank.mean']):.3f}",
                   _half_width(line, "mean_rank"), f"{float(line['test_rmse.mean']):.3f}"] for line in lines]
        for name in BASELINES:
            rank = sum(float(line[f"mean_rank_{name}.mean"]) for line in lines) / len(lines)
            rmse = sum(float(line[f"test_rmse_{name}.mean"]) for line in lines) / len(lines)
            table.append([name, f"{rank:.3f}", "", f"{rmse:.3f}"])
        widths = [max(len(row[column]) for row in table) for column in range(len(table[0]))]
        rows = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in table]
        rows.insert(1, "  ".join("-" * width for width in widths))
        rows.insert(2 + len(lines), "  ".join("-" * width for width in widths))
        blocks.append(f"k = {k}\n" + "\n".join(rows))
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny grid with two seeds (seconds)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 3; 2 with --quick)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key in every run")
    parser.add_argument("--out", type=Path, default=Path("results/ribero_epsilon_k"), help="the sweep folder")
    parser.add_argument("--workers", type=int, default=None, help="local worker processes (default: the cores)")
    args = parser.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 3)
    if seeds < 1:
        parser.error("--seeds must be >= 1")
    print(render(study(seeds, args.set, args.quick, args.out, args.workers), seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
