"""Joining and leaving probabilities in S3 (Hua et al. Figs. 9-10): mean error increase per (p_join, p_leave).

``python scenarios/hua_churn_study.py [--quick] [--seeds N] [--set KEY=VALUE ...]`` runs
``hua_s3_churn.toml`` with p_join in {0.005, 0.01, 0.015, 0.02} at p_leave = 0.01, and p_leave likewise
at p_join = 0.01, over several seeds (default 3), and prints the mean and the spread over seeds of
``err_increase`` (against the unprotected baseline, the paper's measure) and of ``noise_err_increase``
(against the same iterations without noise). A third of the users start online in every configuration.
``--quick`` runs a small data set for a few rounds with two seeds (seconds; for the tests).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import fedrecsim

SCENARIO = Path(__file__).resolve().parent / "hua_s3_churn.toml"
PROBABILITIES = (0.005, 0.01, 0.015, 0.02)
FIXED = 0.01
QUICK = [
    "data.users=80", "data.items=60", "data.ratings=1600", "protocol.d=8", "protocol.max_users=20",
    "protocol.eval_every=1000", "run.rounds=25", "network.latency={model='constant', seconds=0.0}",
]


def configurations() -> list[tuple[str, float, float]]:
    """(varied, p_join, p_leave): p_join swept at p_leave = 0.01, then p_leave swept at p_join = 0.01."""
    return [("p_join", p, FIXED) for p in PROBABILITIES] + [("p_leave", FIXED, p) for p in PROBABILITIES]


def study(seeds: int, overrides: list[str], quick: bool) -> list[dict[str, float | str]]:
    rows: list[dict[str, float | str]] = []
    for varied, p_join, p_leave in configurations():
        increases, noise = [], []
        for seed in range(seeds):
            scenario = fedrecsim.load_scenario(SCENARIO, [
                *(QUICK if quick else []), *overrides,
                f"availability.p_join={p_join}", f"availability.p_leave={p_leave}", f"run.seed={seed + 1}",
            ])
            metrics = fedrecsim.run(scenario).metrics
            increases.append(metrics["err_increase"])
            noise.append(metrics["noise_err_increase"])
        rows.append({
            "varied": varied, "p_join": p_join, "p_leave": p_leave,
            "err_increase": float(np.mean(increases)), "err_increase_sd": float(np.std(increases)),
            "noise_err_increase": float(np.mean(noise)),
        })
    return rows


def render(rows: list[dict[str, float | str]], seeds: int) -> str:
    header = ["varied", "p_join", "p_leave", f"err_increase (mean of {seeds})", "sd", "vs noiseless"]
    table = [header] + [
        [str(row["varied"]), f"{row['p_join']:g}", f"{row['p_leave']:g}", f"{row['err_increase']:.4f}",
         f"{row['err_increase_sd']:.4f}", f"{row['noise_err_increase']:.4f}"]
        for row in rows
    ]
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small data set, few rounds, two seeds (seconds)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per configuration (default 3; 2 with --quick)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key in every run")
    args = parser.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 3)
    if seeds < 1:
        parser.error("--seeds must be >= 1")
    print(render(study(seeds, args.set, args.quick), seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
