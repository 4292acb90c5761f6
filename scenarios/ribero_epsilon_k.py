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

import sys
from pathlib import Path

from fedrecsim.sweep import ci_half_width, load_study, read_csv, run_sweep, study_script

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


def render(summary: list[dict[str, str]], seeds: int) -> str:
    """Per k: a row per epsilon, then the baselines' mean rank and RMSE averaged over that k's runs."""
    blocks = []
    for k in sorted({int(line["protocol.k"]) for line in summary}):
        lines = sorted((line for line in summary if int(line["protocol.k"]) == k), key=lambda line: float(line["protocol.epsilon"]))
        table = [["epsilon", f"mean_rank (mean of {seeds})", "95% CI +-", "test_rmse"]]
        table += [[f"{float(line['protocol.epsilon']):g}", f"{float(line['mean_rank.final.mean']):.3f}",
                   ci_half_width(line, "mean_rank.final", 3), f"{float(line['test_rmse.final.mean']):.3f}"] for line in lines]
        for name in BASELINES:
            rank = sum(float(line[f"mean_rank_{name}.final.mean"]) for line in lines) / len(lines)
            rmse = sum(float(line[f"test_rmse_{name}.final.mean"]) for line in lines) / len(lines)
            table.append([name, f"{rank:.3f}", "", f"{rmse:.3f}"])
        widths = [max(len(row[column]) for row in table) for column in range(len(table[0]))]
        rows = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in table]
        rows.insert(1, "  ".join("-" * width for width in widths))
        rows.insert(2 + len(lines), "  ".join("-" * width for width in widths))
        blocks.append(f"k = {k}\n" + "\n".join(rows))
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    return study_script(
        argv, description=__doc__.splitlines()[0], default_out=Path("results/ribero_epsilon_k"),
        quick_help="a tiny grid with two seeds (seconds)",
        report=lambda seeds, overrides, quick, out, workers: render(study(seeds, overrides, quick, out, workers), seeds),
    )


if __name__ == "__main__":
    sys.exit(main())
