"""Auditing Minto et al.'s per-report budget eps0: claimed against audited, from the proxy's view.

Usage::

    python scenarios/audit_minto.py                # eps0 = 0.5, 1, 2 at 1,000 trials per world (minutes on 2 cores)
    python scenarios/audit_minto.py --quick        # eps0 = 0.5, 2 at 20 trials per world (the test suite runs this)
    python scenarios/audit_minto.py --trials 4000 --seeds 3 --workers 2

Each audit (`fedrecsim.audit`, docs/audit.md) runs ``minto_ldp.toml`` at a small size with k = 1 report per
user and one epoch, so the claim is eps0 itself: each report is eps0-LDP for any two rows of one user
(Theorem 3). The target user's row is replaced by its neighbour's in half the runs; the proxy, which
relays V and receives the target's report with its address, scores each run by the report's
log-likelihood ratio under the two rows (``report_llr``). ``init_scale = 0.005`` makes V's entries small,
so most gradient entries reach Algorithm 1's clip bound of 1 -- where the two rows' entries are +1 and -1
a report is exactly as revealing as eps0 allows, which is what an audit needs to get close to eps0.

With ``--seeds N`` each eps0 is audited N times at different data seeds (the mean, least and largest
bound are printed). The audits go to ``--out`` (default ``results/audit_minto``), one folder each
(``eps<eps0>-seed<seed>``); running the script again resumes them. With matplotlib the figure
``claimed_vs_audited.png`` is drawn there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from fedrecsim.audit import Audit, AuditResult
from fedrecsim.study import ScriptParser, run_script

SCENARIO = Path(__file__).resolve().parent / "minto_ldp.toml"
SEED = 7
FIGURE = "claimed_vs_audited.png"


@dataclass(frozen=True)
class Size:
    """The scenario's size, the budgets audited and the trials per world."""

    users: int
    items: int
    ratings: int
    epsilons: tuple[float, ...]
    trials: int


FULL = Size(users=20, items=40, ratings=120, epsilons=(0.5, 1.0, 2.0), trials=1000)
QUICK = Size(users=6, items=20, ratings=36, epsilons=(0.5, 2.0), trials=20)


def overrides(size: Size, epsilon: float, seed: int, trials: int) -> list[str]:
    return [
        f"run.seed={seed}", "run.rounds=1", f"data.users={size.users}", f"data.items={size.items}",
        f"data.ratings={size.ratings}", f"protocol.min_users={size.users}", "protocol.k=1", "protocol.d=2",
        f"protocol.epsilon={epsilon}", "protocol.init_scale=0.005", "network.latency={model='constant', seconds=0.01}",
        "audit.party='proxy:0'", f"audit.trials={trials}", "audit.distinguishers=['report_llr', 'logistic']",
    ]


def summary(epsilon: float, results: list[AuditResult]) -> str:
    bounds = [result.epsilon_lower for result in results]
    speed = sum(r.document["trials_run"] for r in results) / max(sum(r.document["wall_s"] for r in results), 1e-9)
    return (
        f"{epsilon:<8g}{sum(bounds) / len(bounds):>10.3f}{min(bounds):>8.3f}{max(bounds):>8.3f}"
        f"{sum(bounds) / len(bounds) / epsilon:>9.2f}{speed:>11.1f}"
    )


def draw(out: Path, table: dict[float, list[AuditResult]]) -> str:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return "figure skipped: matplotlib is not installed"
    figure = Figure(figsize=(5, 4))
    axes = figure.subplots()
    claimed = sorted(table)
    for eps in claimed:
        axes.scatter([eps] * len(table[eps]), [r.epsilon_lower for r in table[eps]], color="C0")
    axes.plot(claimed, claimed, "k--", linewidth=1, label="claimed eps0 (audited = claimed)")
    axes.set_xlabel("claimed eps0 per report")
    axes.set_ylabel("audited lower bound (best distinguisher)")
    axes.set_title("Minto et al.: proxy's view, k = 1, one epoch")
    axes.legend(loc="upper left", fontsize=8)
    figure.savefig(out / FIGURE, dpi=100)
    return f"figure: {out / FIGURE}"


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(
        "Audit Minto et al.'s per-report eps0 from the proxy's view", out="results/audit_minto",
        quick="two budgets at 20 trials per world (seconds)", seeds=1, quick_seeds=1,
    )
    parser.add_argument("--trials", type=int, default=None, help="trials per world (default 1,000; 20 with --quick)")
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    trials = args.trials or size.trials
    audits = {
        (eps, seed): Audit(SCENARIO, [*overrides(size, eps, SEED + 1_000_000 * index, trials), *args.set])
        for eps in size.epsilons for index, seed in enumerate(range(args.seeds))
    }  # every audit is checked before any runs
    if (args.out / FIGURE).exists() and not any(args.out.glob("eps*-seed*/audit-plan.json")):
        parser.error(f"{args.out / FIGURE} exists and is not this script's; choose another --out")
    table: dict[float, list[AuditResult]] = {}
    for (eps, seed), audit in audits.items():
        result = audit.run(args.out / f"eps{eps:g}-seed{seed}", workers=args.workers, dask=args.dask)
        table.setdefault(eps, []).append(result)
    print(f"Minto et al., proxy's view of one report (k = 1, one epoch), {trials} trials per world, "
          f"{size.users} users x {size.items} items, {args.seeds} audit(s) per eps0:")
    document = next(iter(table.values()))[0].document
    print(f"audited: the best distinguisher's lower bound, at {document['best']['confidence']:.0%} confidence over "
          f"all of them (each alone: {document['confidence']:.0%})")
    print(f"{'eps0':<8}{'audited':>10}{'least':>8}{'most':>8}{'ratio':>9}{'trials/s':>11}")
    for eps in sorted(table):
        print(summary(eps, table[eps]))
    print(draw(args.out, table))
    violated = [eps for eps, results in table.items() if any(r.epsilon_lower > eps for r in results)]
    if violated:
        print(f"The audited lower bound exceeds the claimed eps0 at {', '.join(map(str, violated))}: there, the "
              "claim does not hold for the proxy's view (at the audits' confidence).")
    else:
        print("Every audited lower bound is at most the claimed eps0: no violation found. The ratio is how much of "
              "eps0 the proxy's best test demonstrably extracts from one report; a lower bound is not a proof that "
              "the claim holds.")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
