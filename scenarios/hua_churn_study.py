"""Joining and leaving probabilities in S3 (Hua et al. Figs. 9-10): mean error increase per (p_join, p_leave).

``python scenarios/hua_churn_study.py [--quick] [--seeds N] [--set KEY=VALUE ...] [--out DIR] [--workers N | --dask ADDRESS]``
runs the study ``hua_churn_study.toml`` (p_join in {0.005, 0.01, 0.015, 0.02} at p_leave = 0.01, and
p_leave likewise at p_join = 0.01, over several seeds, default 3) with `fedrecsim.study` into ``--out``
(default ``results/hua_churn_study``; re-running resumes it), then prints from its ``summary.csv`` the mean
over seeds and the 95% confidence half-width of ``err_increase`` (against the unprotected baseline, the
paper's measure) and the mean of ``noise_err_increase`` (against the same iterations without noise).
``--quick`` runs a small data set for a few rounds with two seeds (seconds; for the tests).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fedrecsim.study import ScriptParser, Study, interval_text, run_script

STUDY = Path(__file__).resolve().parent / "hua_churn_study.toml"
FIXED = 0.01
QUICK = [
    "data.users=80", "data.items=60", "data.ratings=1600", "protocol.d=8", "protocol.max_users=20",
    "protocol.eval_every=1000", "run.rounds=25", "network.latency={model='constant', seconds=0.0}",
]


def study(seeds: int, overrides: list[str], out: Path, workers: int | None = None, dask: str | None = None) -> list[dict[str, Any]]:
    """Run (or resume) the sweep into ``out``; its summary rows, one per (p_join, p_leave)."""
    done = Study(STUDY, overrides=overrides, seeds=seeds).run(
        out, workers=workers, dask=dask, progress=sys.stderr.isatty()
    ).complete()
    return done.summary


def render(summary: list[dict[str, Any]], seeds: int) -> str:
    """The p_join rows (p_leave = 0.01), then the p_leave rows (p_join = 0.01)."""
    rows = [("p_join", line) for line in summary if line["availability.p_leave"] == FIXED]
    rows += [("p_leave", line) for line in summary if line["availability.p_join"] == FIXED]
    rows.sort(key=lambda pair: (pair[0] == "p_leave", pair[1][f"availability.{pair[0]}"]))
    header = ["varied", "p_join", "p_leave", f"err_increase (mean of {seeds})", "95% CI", "vs noiseless"]
    table = [header] + [
        [varied, f"{line['availability.p_join']:g}", f"{line['availability.p_leave']:g}",
         f"{line['err_increase.final.mean']:.4f}", interval_text(line, "err_increase.final", 4), f"{line['noise_err_increase.final.mean']:.4f}"]
        for varied, line in rows
    ]
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(__doc__.splitlines()[0], out="results/hua_churn_study", quick="a small data set, few rounds, two seeds (seconds)",
                          seeds_help="runs per (p_join, p_leave), at seeds run.seed, run.seed + 1, ...; err_increase is their mean with its 95%% interval")
    parser.add_size("sizes", full=[], quick=QUICK)
    args = parser.parse_args(argv)
    print(render(study(args.seeds, [*args.sizes, *args.set], args.out, args.workers, args.dask), args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
