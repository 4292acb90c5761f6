"""Joining and leaving probabilities in S3 (Hua et al. Figs. 9-10): mean error increase per (p_join, p_leave).

``python scenarios/hua_churn_study.py [--quick] [--seeds N] [--set KEY=VALUE ...] [--out DIR] [--workers N]``
runs the study ``hua_churn_study.toml`` (p_join in {0.005, 0.01, 0.015, 0.02} at p_leave = 0.01, and
p_leave likewise at p_join = 0.01, over several seeds, default 3) with `fedrecsim.sweep` into ``--out``
(default ``results/hua_churn_study``; re-running resumes it), then prints from its ``summary.csv`` the mean
over seeds and the 95% confidence half-width of ``err_increase`` (against the unprotected baseline, the
paper's measure) and the mean of ``noise_err_increase`` (against the same iterations without noise).
``--quick`` runs a small data set for a few rounds with two seeds (seconds; for the tests).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fedrecsim.sweep import ci_half_width, load_study, read_csv, run_sweep, study_script

STUDY = Path(__file__).resolve().parent / "hua_churn_study.toml"
FIXED = 0.01
QUICK = [
    "data.users=80", "data.items=60", "data.ratings=1600", "protocol.d=8", "protocol.max_users=20",
    "protocol.eval_every=1000", "run.rounds=25", "network.latency={model='constant', seconds=0.0}",
]


def study(seeds: int, overrides: list[str], quick: bool, out: Path, workers: int | None = None) -> list[dict[str, str]]:
    """Run (or resume) the sweep into ``out``; its summary rows, one per (p_join, p_leave)."""
    result = run_sweep(
        load_study(STUDY, seeds=seeds, overrides=[*(QUICK if quick else []), *overrides]),
        out, workers=workers, progress=sys.stderr.isatty(),
    )
    return read_csv(result.path / "summary.csv")


def render(summary: list[dict[str, str]], seeds: int) -> str:
    """The p_join rows (p_leave = 0.01), then the p_leave rows (p_join = 0.01)."""
    rows = [("p_join", line) for line in summary if float(line["availability.p_leave"]) == FIXED]
    rows += [("p_leave", line) for line in summary if float(line["availability.p_join"]) == FIXED]
    rows.sort(key=lambda pair: (pair[0] == "p_leave", float(pair[1][f"availability.{pair[0]}"])))
    header = ["varied", "p_join", "p_leave", f"err_increase (mean of {seeds})", "95% CI +-", "vs noiseless"]
    table = [header] + [
        [varied, f"{float(line['availability.p_join']):g}", f"{float(line['availability.p_leave']):g}",
         f"{float(line['err_increase.final.mean']):.4f}", ci_half_width(line, "err_increase.final", 4),
         f"{float(line['noise_err_increase.final.mean']):.4f}"]
        for varied, line in rows
    ]
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return study_script(
        argv, description=__doc__.splitlines()[0], default_out=Path("results/hua_churn_study"),
        quick_help="a small data set, few rounds, two seeds (seconds)",
        report=lambda seeds, overrides, quick, out, workers: render(study(seeds, overrides, quick, out, workers), seeds),
    )


if __name__ == "__main__":
    sys.exit(main())
