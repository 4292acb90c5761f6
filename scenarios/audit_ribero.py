"""Auditing Ribero et al.'s eps per silo from the server's view: claimed against audited.

Usage::

    python scenarios/audit_ribero.py               # eps = 1, 100, 10,000 at 200 trials per world
    python scenarios/audit_ribero.py --quick       # eps = 1, 10,000 at 20 trials per world (the suite)
    python scenarios/audit_ribero.py --trials 1000 --seeds 3 --workers 2

Each audit (`fedrecsim.audit`, docs/audit.md) runs ``ribero_synthetic.toml`` at the size where the server's test has
the most power: 20 users x 30 items in 10 silos of two users, one prototype per silo (every record in
its one cluster) and no truncation (support s = 30 items); the target is the whole row of the user with
the most entries, added to or removed from its silo (``one_user``), and the claim is each silo's eps
(`prototypes.audit`). The server's distinguisher ``prototype_projection`` scores a run by the largest
projection of the target's silo's prototype onto the target's row; ``logistic`` learns from every number received.

With ``--seeds N`` each eps is audited N times at different data seeds (mean, least and largest bound).
The audits go to ``--out`` (default ``results/audit_ribero``), one folder each; running the script again
resumes them. With matplotlib the figure ``claimed_vs_audited.png`` is drawn there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from fedrecsim.audit import Audit, AuditResult
from fedrecsim.study import ScriptParser, run_script

SCENARIO = Path(__file__).resolve().parent / "ribero_synthetic.toml"
SEED = 7
FIGURE = "claimed_vs_audited.png"
SIZE = ["data.users=20", "data.items=30", "data.ratings=400", "data.rank=2", "data.silos=10", "protocol.k=1",
        "protocol.support=30", "protocol.rank=2", "protocol.baselines=false", "protocol.nmf_iterations=20",
        "audit.party='server:0'"]


@dataclass(frozen=True)
class Row:
    """One audited claim: who looks, at what eps, with which distinguishers."""

    label: str
    epsilon: float
    settings: tuple[str, ...]


FULL = (Row("server", 1.0, ()), Row("server", 100.0, ()), Row("server", 10_000.0, ()))
QUICK = (Row("server", 1.0, ()), Row("server", 10_000.0, ()))


def draw(out: Path, table: dict[tuple[str, float], list[AuditResult]]) -> str:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return "figure skipped: matplotlib is not installed"
    figure = Figure(figsize=(5, 4))
    axes = figure.subplots()
    for (label, eps), results in table.items():
        axes.scatter([eps] * len(results), [r.epsilon_lower for r in results], color="C0")
    claimed = sorted({eps for _, eps in table})
    axes.plot(claimed, claimed, "k--", linewidth=1, label="claimed eps (audited = claimed)")
    axes.set_xscale("log")
    axes.set_xlabel("claimed eps per silo")
    axes.set_ylabel("audited lower bound (best distinguisher)")
    axes.set_title("Ribero et al.: the server's view of the prototypes")
    axes.legend(loc="upper left", fontsize=8)
    figure.savefig(out / FIGURE, dpi=100)
    return f"figure: {out / FIGURE}"


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(
        "Audit Ribero et al.'s eps per silo from the server's view", out="results/audit_ribero",
        quick="two audits at 20 trials per world (seconds)", seeds=1, quick_seeds=1,
    )
    parser.add_argument("--trials", type=int, default=None, help="trials per world (default 200; 20 with --quick)")
    args = parser.parse_args(argv)
    rows = QUICK if args.quick else FULL
    trials = args.trials or (20 if args.quick else 200)
    audits = {
        (row, seed): Audit(SCENARIO, [*SIZE, f"run.seed={SEED + 1_000_000 * seed}", f"protocol.epsilon={row.epsilon}",
                                      f"audit.trials={trials}", *row.settings, *args.set])
        for row in rows for seed in range(args.seeds)
    }  # every audit is checked before any runs
    if (args.out / FIGURE).exists() and not any(args.out.glob("*-eps*-seed*/audit-plan.json")):
        parser.error(f"{args.out / FIGURE} exists and is not this script's; choose another --out")
    table: dict[tuple[str, float], list[AuditResult]] = {}
    for (row, seed), audit in audits.items():
        folder = args.out / f"{row.label.replace(' ', '_')}-eps{row.epsilon:g}-seed{seed}"
        table.setdefault((row.label, row.epsilon), []).append(audit.run(folder, workers=args.workers, dask=args.dask))
    print(f"Ribero et al., the row of user {next(iter(audits.values())).target.user}, {trials} trials per world, "
          f"{args.seeds} audit(s) per row; audited: the best distinguisher's lower bound")
    print(f"{'view':<16}{'eps':>6}{'audited':>9}{'least':>8}{'most':>8}{'best':>22}{'trials/s':>10}")
    for (label, eps), results in table.items():
        bounds = [r.epsilon_lower for r in results]
        best = results[0].document["best"]["distinguisher"]
        speed = sum(r.document["trials_run"] for r in results) / max(sum(r.document["wall_s"] for r in results), 1e-9)
        print(f"{label:<16}{eps:>6g}{sum(bounds) / len(bounds):>9.3f}{min(bounds):>8.3f}{max(bounds):>8.3f}{best:>22}{speed:>10.1f}")
    print(draw(args.out, table))
    above = [f"{label} at eps {eps:g}" for (label, eps), results in table.items() if any(r.epsilon_lower > eps for r in results)]
    print("Audited above the claim (the claim does not hold for that view, at the audits' confidence): "
          + (", ".join(above) if above else "none") + ".")
    print("Where the bound is at most the claim, no violation was found: a lower bound is not a proof that the "
          "claim holds: the server's tests here are heuristic, and a bound far below eps says how little of the budget "
          "they extract, not that the budget is spent.")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
