"""Accuracy against privacy (Hua et al. Figs. 7-8): mean error increase for eps in 0.05 .. 800, S1, S2, S3.

``python scenarios/hua_epsilon_sweep.py [--quick] [--seeds N] [--set KEY=VALUE ...] [--out DIR] [--workers N | --dask ADDRESS]``
sweeps ``protocol.epsilon`` over ``hua_s1.toml``, ``hua_s2.toml`` and ``hua_s3_churn.toml`` with `fedrecsim.study`
(one sweep folder each, ``DIR/S1``, ``DIR/S2``, ``DIR/S3``; default ``results/hua_epsilon_sweep``; a
re-run resumes), every eps at the same seeds (so every eps sees the same data, initial profiles and noise
draws up to scale; seeds 1, 2, ...), and prints from the sweeps' ``summary.csv``, per scenario and eps, the mean over
seeds of ``err_increase`` -- the increase of the mean absolute training error against the
unprotected baseline (see `fedrecsim.protocols.dpmf.protocol`) --, of ``noise_err_increase``, against
the same run without noise, and of ``paper_err_increase``, against the paper's baseline (unprotected MF
after 100 iterations on the same data, `fedrecsim.protocols.dpmf.claims`), which the paper's claim is about. ``--quick`` runs a small data set for a few rounds (seconds; for the tests).
The paper runs S1 and S2 for 100 iterations and S3 for 10,000; the scenario files run S3 for 1000 (add
``--set run.rounds=10000`` for the paper's length).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from fedrecsim.study import ScriptParser, Study, run_script

HERE = Path(__file__).resolve().parent
EPSILONS = (0.05, 0.1, 0.15, 0.8, 8.0, 80.0, 800.0)
SCENARIOS = {"S1": HERE / "hua_s1.toml", "S2": HERE / "hua_s2.toml", "S3": HERE / "hua_s3_churn.toml"}
QUICK_DATA = [
    "data.users=60", "data.items=80", "data.ratings=1500", "protocol.d=8", "protocol.eval_every=1000",
    "network.latency={model='constant', seconds=0.0}",
]
#: Per scenario, its size: as its file says, or with ``--quick`` the small data set and a few rounds.
FULL: dict[str, list[str]] = {name: [] for name in SCENARIOS}
QUICK = {name: [*QUICK_DATA, f"run.rounds={rounds}"] for name, rounds in {"S1": 10, "S2": 10, "S3": 30}.items()}


def sweep(
    epsilons: tuple[float, ...], seeds: int, overrides: list[str], sizes: Mapping[str, list[str]], out: Path,
    workers: int | None = None, dask: str | None = None,
) -> dict[str, dict[float, tuple[float, float, float]]]:
    """Per scenario and eps: the means over seeds of (err_increase, noise_err_increase, paper_err_increase),
    from summary.csv; ``sizes`` is per scenario (`FULL` or `QUICK`), ``overrides`` (``--set``) come after it.

    S1 has no noiseless twin (its noise is in the published V only): there the second number is
    err_increase itself.
    """
    table: dict[str, dict[float, tuple[float, float, float]]] = {}
    studies = {
        name: Study(path, overrides=["run.seed=1", *sizes[name], *overrides], grid={"protocol.epsilon": [float(e) for e in epsilons]},
                    seeds=seeds)
        for name, path in SCENARIOS.items()
    }
    for name, study in studies.items():
        study.check(out / name)  # every folder before the first run: none is refused after the others ran
    for name, study in studies.items():
        done = study.run(out / name, workers=workers, dask=dask, progress=sys.stderr.isatty()).complete()
        table[name] = {}
        for line in done.summary:
            increase = line["err_increase.final.mean"]
            noise = line.get("noise_err_increase.final.mean")
            paper = line["paper_err_increase.final.mean"]
            table[name][line["protocol.epsilon"]] = (increase, increase if noise is None else noise, paper)
    return table


def render(table: dict[str, dict[float, tuple[float, float, float]]], seeds: int) -> str:
    """The table `sweep` measured, under a line saying that each figure is a mean over ``seeds`` seeds."""
    names = list(table)
    epsilons = list(next(iter(table.values())))
    header = [
        "eps", *(f"{name} err_increase" for name in names), *(f"{name} vs noiseless" for name in names if name != "S1"),
        *(f"{name} vs paper baseline" for name in names),
    ]
    rows = [header]
    for epsilon in epsilons:
        row = [f"{epsilon:g}"]
        row += [f"{table[name][epsilon][0]:.4f}" for name in names]
        row += [f"{table[name][epsilon][1]:.4f}" for name in names if name != "S1"]
        row += [f"{table[name][epsilon][2]:.4f}" for name in names]
        rows.append(row)
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    over = f"the mean over {seeds} seeds (the same seeds at every eps)" if seeds > 1 else "one seed's value (--seeds N: the mean over N)"
    return "\n".join([f"each figure: {over}", *lines])


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(__doc__.splitlines()[0], out="results/hua_epsilon_sweep", quick="a small data set and few rounds (seconds)",
                          seeds=1, quick_seeds=1,
                          seeds_help="runs per scenario and eps, at seeds run.seed, run.seed + 1, ...; every figure is their mean",
                          out_help="the folder of the three sweep folders S1, S2, S3")
    parser.add_size("sizes", full=FULL, quick=QUICK)
    args = parser.parse_args(argv)
    print(render(sweep(EPSILONS, args.seeds, args.set, args.sizes, args.out, args.workers, args.dask), args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
