"""Polato Fig. 1 on synthetic data: FedVAE's NDCG@100 after every epoch for gamma in {0, 1, 3, 5}, delta = 0.9.

Usage::

    python scenarios/fedvae_decay.py                        # 1,200 users x 700 items, 10 epochs (minutes)
    python scenarios/fedvae_decay.py --ml1m --epochs 100    # the paper's ml-1m shape and length (hours)
    python scenarios/fedvae_decay.py --quick                # seconds: what the test suite runs
    python scenarios/fedvae_decay.py --set 'protocol.secure_filter="none"'   # any scenario override
    python scenarios/fedvae_decay.py --seeds 3          # each curve the mean over seeds 17, 18, 19

Runs ``fedvae_ml1m_shape.toml`` (R = 250 at the ml-1m shape; R = 100 at the default size) once per gamma,
with SecureFilter set to Multi-Krum keeping n - f of the n gradients (`FILTER`: the protocol's and the
file's default, named here so that the table's first line says what filtered; single Krum, keeping one
gradient, makes the larger gammas unstable, as the fedvae protocol's docstring measures). Every
run has the same seed, so the same data, held-out users, ω_0 and users' generators: only the schedule
gamma_t = gamma delta^t (t the epoch) differs. gamma = 0 is plain FedVAE. The first run also trains
centralized Mult-VAE from the same ω_0 for as many epochs (the paper's grey curve). The runs are one study
(`fedrecsim.study`, gamma zipped with the baseline switch) into ``--out`` (default
``results/fedvae_decay``; a re-run resumes); with ``--seeds N`` every curve is the mean over N seeds.

Prints the table of NDCG@100 per epoch, one column per gamma and one for Mult-VAE, then, per gamma, the
first epoch whose NDCG@100 reaches 95 % of Mult-VAE's after the last epoch (how fast each schedule gets
there). Nothing is tuned: the numbers are what the runs measure.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from statistics import fmean
from typing import Any

import fedrecsim
from fedrecsim.study import ScriptParser, Study, data_sizes, run_script

SCENARIO = Path(__file__).resolve().parent / "fedvae_ml1m_shape.toml"
#: The study's SecureFilter: Multi-Krum keeping n - f (``krum_m = 0``); a ``--set`` overrides it.
FILTER = ('protocol.secure_filter="krum"', "protocol.krum_m=0")
GAMMAS = (0.0, 1.0, 3.0, 5.0)
DELTA = 0.9
REACH = 0.95
SIZES = {
    "default": ["data.users=1200", "data.items=700", "data.ratings=60000", "protocol.users_per_round=100"],
    "quick": [
        "data.users=60", "data.items=80", "data.ratings=1500", "protocol.users_per_round=20",
        "protocol.hidden=32", "protocol.latent=8", "data.test_fraction=0.2",
    ],
    "ml1m": [],
}


def epoch_rounds(overrides: list[str]) -> tuple[int, int, int]:
    """The rounds of an epoch for the scenario with ``overrides``, with its training and held-out users."""
    scenario = fedrecsim.load_scenario(SCENARIO, overrides)
    sizes = data_sizes(scenario)
    return math.ceil(sizes.train_only_users / scenario.protocol.users_per_round), sizes.train_only_users, sizes.test_users


def curves(epochs: int, size: str, gammas: tuple[float, ...], extra: list[str], seeds: int = 1, out: Path = Path("results/fedvae_decay"),
           workers: int | None = None, dask: str | None = None) -> dict[str, Any]:
    """NDCG@100 after each epoch for each gamma, and Mult-VAE's (means over the seeds), with what the runs were."""
    base = [*SIZES[size], *FILTER, *extra]
    per_epoch, training, held_out = epoch_rounds(base)
    overrides = [*base, f"run.rounds={epochs * per_epoch}", f"protocol.delta={DELTA}", "protocol.eval_every=0"]
    axis = {"protocol.gamma": [float(gamma) for gamma in gammas], "protocol.baseline": [position == 0 for position in range(len(gammas))]}
    done = Study(SCENARIO, overrides=overrides, zipped=axis, seeds=seeds).run(out, workers=workers, dask=dask, progress=sys.stderr.isatty()).complete()
    epoch_rows: dict[float, list[list[dict[str, float]]]] = {}
    for row in done.runs:
        rounds = done.result(row)["metrics"]["rounds"]
        epoch_rows.setdefault(row["protocol.gamma"], []).append([metrics for metrics in rounds if metrics["round"] % per_epoch == 0])
    found: dict[str, Any] = {
        "rounds_per_epoch": per_epoch, "training": training, "held_out": held_out, "seeds": seeds,
        "scenario": fedrecsim.load_scenario(SCENARIO, overrides),
        "fedvae": {gamma: _mean_curve(epoch_rows[float(gamma)], "ndcg@100") for gamma in gammas},
        "multvae": _mean_curve(epoch_rows[float(gammas[0])], "ndcg@100_multvae"),
    }
    return found


def _mean_curve(runs: list[list[dict[str, float]]], name: str) -> list[float]:
    """Per epoch, the mean of ``name`` over the runs (the seeds)."""
    return [fmean([run[epoch][name] for run in runs]) for epoch in range(len(runs[0]))]


def secure_filter(protocol: Any) -> str:
    """SecureFilter as the table's first line names it (``protocol``: a fedvae scenario's protocol table)."""
    if protocol.secure_filter == "none":
        return "none (plain averaging)"
    kept = {0: "n - f", 1: "1 (Krum)"}.get(protocol.krum_m, str(protocol.krum_m))
    return f"Multi-Krum keeping {kept} with f = floor({protocol.krum_f:g} n)"


def describe(found: dict[str, Any]) -> list[str]:
    scenario = found["scenario"]
    protocol, data = scenario.protocol, scenario.data
    gammas = list(found["fedvae"])
    lines = [
        f"FedVAE NDCG@100 per epoch: {found['training']} training + {found['held_out']} held-out users x {data.items} items, "
        f"R = {protocol.users_per_round} ({found['rounds_per_epoch']} rounds an epoch), delta = {DELTA}, "
        f"SecureFilter = {secure_filter(protocol)}, "
        + (f"seed {scenario.run.seed}" if found["seeds"] == 1 else f"mean of seeds {scenario.run.seed}..{scenario.run.seed + found['seeds'] - 1}"),
        "epoch " + "".join(f"  gamma={gamma:<4g}" for gamma in gammas) + "  Mult-VAE",
    ]
    multvae = found["multvae"]
    for epoch in range(len(multvae)):
        cells = "".join(f"  {found['fedvae'][gamma][epoch]:10.4f}" for gamma in gammas)
        lines.append(f"{epoch + 1:5d} {cells}  {multvae[epoch]:8.4f}")
    target = REACH * multvae[-1]
    reached = []
    for gamma in gammas:
        epochs = [epoch + 1 for epoch, value in enumerate(found["fedvae"][gamma]) if value >= target]
        reached.append(f"gamma={gamma:g}: {f'epoch {epochs[0]}' if epochs else f'not within {len(multvae)}'}")
    lines.append(
        f"first epoch at {REACH:.0%} of Mult-VAE's last NDCG@100 ({multvae[-1]:.4f} -> {target:.4f}): " + ", ".join(reached)
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(__doc__.splitlines()[0], out="results/fedvae_decay", quick="a tiny data set and network (seconds)",
                          seeds=1, quick_seeds=1,
                          seeds_help="runs per gamma, at seeds run.seed, run.seed + 1, ...; every curve is their mean")
    parser.add_size("size", full="default", quick="quick")
    parser.add_sized_argument("--epochs", full=10, quick=2, type=int, minimum=1, help="epochs per run")
    parser.add_argument("--ml1m", action="store_true", help="the scenario file's full ml-1m shape")
    parser.add_argument("--gammas", type=float, nargs="+", default=list(GAMMAS),
                        help=f"the gammas, one run each (default {' '.join(f'{gamma:g}' for gamma in GAMMAS)})")
    args = parser.parse_args(argv)
    if args.quick and args.ml1m:
        parser.error("--quick and --ml1m are two sizes: choose one")
    chosen = "ml1m" if args.ml1m else args.size
    found = curves(args.epochs, chosen, tuple(args.gammas), args.set, args.seeds, args.out, args.workers, args.dask)
    for line in describe(found):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
