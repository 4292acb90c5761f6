"""PriviRec's communication (Nicolas et al. Table 1): measured client and server bytes of PriviRec, PriviRec-k
and the FCF baseline over the number of users n and of items |I|, with the fitted exponents beside the
complexities Table 1 states.

Usage::

    python scenarios/privirec_comm_scaling.py            # n in 50..400 at |I| = 400, |I| in 200..1600 at n = 100
    python scenarios/privirec_comm_scaling.py --quick    # a tiny grid in seconds (the test suite runs this)

Each method is one study (`fedrecsim.study`, a zipped axis over the sizes) into ``--out/<method>``
(default ``results/privirec_comm_scaling``; a re-run resumes); with ``--seeds N`` every byte count is the
mean over seeds 1, 2, ...

Every cell is one run on synthetic implicit data (20 interactions per user) with every user online and
zero latency; secure aggregation is SecAgg+ in ideal mode (the real protocol's bytes, message by message,
without the cryptography). PriviRec and PriviRec-k use L = 2 power iterations of rank k = 16 (PriviRec-k's
k2 and PriviRec's k1 alike); FCF is implicit federated MF with d = 16 (Table 1's k3) for e = 2 epochs.
Client bytes are the mean over users of what a user sent and received over the whole run, server bytes
the server's sent and received.

The exponents are least-squares slopes of log(bytes) on log(n) at fixed |I| and on log(|I|) at fixed n.
Table 1's terms predict, for the client: PriviRec |I|^2 and L log n (slopes 2 in |I|, ~0 in n),
PriviRec-k L k2 |I| (1 in |I|, ~0 in n), F. MF e k3 |I| (1 in |I|, 0 in n -- the (|I| + n) of Table 1 is
a federated GCN's, whose users also receive user embeddings); the server's are n times the client's
(slope 1 in n). Small sizes bend the fits towards the lower-order terms: PriviRec's m (m + 1) / 2 sum sits
beside L k |I| and the broadcasts, and secure aggregation's per-user keys and shares grow with log n.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedrecsim.study import ScriptParser, Study, run_script

K, ITERATIONS, D, EPOCHS, PER_USER = 16, 2, 16, 2, 20

#: Table 1's complexities (client, server) and the slopes in (n, |I|) their leading terms predict.
TABLE_1 = {
    "privirec": (("L log(n) + |I|^2", "L n log(n) + n |I|^2"), {"client": (0.0, 2.0), "server": (1.0, 2.0)}),
    "privirec_k": (("L log(n) + L k2 |I|", "L n log(n) + L k2 n |I|"), {"client": (0.0, 1.0), "server": (1.0, 1.0)}),
    "fcf": (("e log(n) + e k3 (|I| + n)", "e n log(n) + e k3 n (|I| + n)"), {"client": (0.0, 1.0), "server": (1.0, 1.0)}),
}


@dataclass(frozen=True)
class Grid:
    users: tuple[int, ...]
    items_at: int
    items: tuple[int, ...]
    users_at: int


FULL = Grid(users=(50, 100, 200, 400), items_at=400, items=(200, 400, 800, 1600), users_at=100)
# FCF's hit rate ranks each held-out item among 99 untouched items: at least ~150 items everywhere.
QUICK = Grid(users=(20, 40), items_at=200, items=(200, 260), users_at=20)


def scenario(method: str) -> dict[str, Any]:
    """The method's base tables (the sizes are the study's axis, see `sizes`)."""
    data = {"source": "synthetic", "feedback": "implicit", "split": "per_user", "test_fraction": 0.2}
    base: dict[str, Any] = {"run": {"name": f"scaling-{method}", "seed": 1}, "data": data,
                            "network": {"latency": {"model": "constant", "seconds": 0.0}}, "availability": {"model": "always"}}
    if method == "fcf":
        base["run"].update(protocol="fcf", rounds=EPOCHS)
        base["protocol"] = {"feedback": "implicit", "d": D, "eval_every": EPOCHS}
        base["data"]["split"] = "leave_one_out"
    else:
        base["run"].update(protocol="privirec", rounds=ITERATIONS)
        base["protocol"] = {"variant": method, "secagg": "ideal", "graph": "sparse", "baseline": False}
    return base


def sizes(method: str, cells: list[tuple[int, int]]) -> dict[str, list[int]]:
    """The zipped axis of (n, |I|) cells: users, items, ratings (and PriviRec's rank k, at most |I|)."""
    axis = {
        "data.users": [users for users, _ in cells],
        "data.items": [items for _, items in cells],
        "data.ratings": [min(users * PER_USER, users * items // 2) for users, items in cells],
    }
    if method != "fcf":
        axis["protocol.k"] = [min(K, items) for _, items in cells]
    return axis


def measure(study: Study, out: Path, workers: int | None = None, dask: str | None = None) -> dict[tuple[int, int], tuple[float, float]]:
    """Per (n, |I|): (client bytes, server bytes), means over the seeds' runs of one method's study."""
    found = {}
    for line in study.run(out, workers=workers, dask=dask, progress=sys.stderr.isatty()).complete().summary:
        users = line["data.users"]
        client = (line["user.sent_bytes.mean"] + line["user.recv_bytes.mean"]) / users
        server = line["server.sent_bytes.mean"] + line["server.recv_bytes.mean"]
        found[users, line["data.items"]] = (float(client), float(server))
    return found


def slope(xs: tuple[int, ...], ys: list[float]) -> float:
    """The least-squares slope of log(ys) on log(xs)."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def study(grid: Grid, seeds: int, overrides: list[str], out: Path, workers: int | None = None,
          dask: str | None = None) -> dict[str, dict[str, object]]:
    results: dict[str, dict[str, object]] = {}
    over_n_cells = [(n, grid.items_at) for n in grid.users]
    over_items_cells = [(grid.users_at, m) for m in grid.items]
    # The two lines cross at (users_at, items_at): that cell is measured once (a study refuses a point twice).
    cells = list(dict.fromkeys(over_n_cells + over_items_cells))
    studies = {method: Study(scenario(method), overrides=overrides, zipped=sizes(method, cells), seeds=seeds) for method in TABLE_1}
    for method, planned in studies.items():
        planned.check(out / method)  # every folder before the first run: none is refused after the others ran
    for method, planned in studies.items():
        found = measure(planned, out / method, workers, dask)
        over_n = [found[cell] for cell in over_n_cells]
        over_items = [found[cell] for cell in over_items_cells]
        results[method] = {
            "over_n": over_n, "over_items": over_items,
            "client": (slope(grid.users, [c for c, _ in over_n]), slope(grid.items, [c for c, _ in over_items])),
            "server": (slope(grid.users, [s for _, s in over_n]), slope(grid.items, [s for _, s in over_items])),
        }
    return results


def format_tables(grid: Grid, results: dict[str, dict[str, object]]) -> str:
    lines = [f"bytes over n (|I| = {grid.items_at}) and over |I| (n = {grid.users_at}); k = {K}, L = {ITERATIONS}, "
             f"FCF d = {D}, e = {EPOCHS}"]
    for axis, values, label in (("over_n", grid.users, "n"), ("over_items", grid.items, "|I|")):
        lines.append(f"{label:>6}" + "".join(f"{m + ' client':>22}{m + ' server':>22}" for m in TABLE_1))
        for position, value in enumerate(values):
            cells = ""
            for method in TABLE_1:
                client, server = results[method][axis][position]  # type: ignore[index]
                cells += f"{client:>22,.0f}{server:>22,.0f}"
            lines.append(f"{value:>6}" + cells)
    lines.append("")
    lines.append(f"{'method':<12}{'side':<8}{'Table 1':<32}{'slope n':>9}{'(pred.)':>9}{'slope |I|':>11}{'(pred.)':>9}")
    for method, ((client_term, server_term), predicted) in TABLE_1.items():
        for side, term in (("client", client_term), ("server", server_term)):
            fitted = results[method][side]
            lines.append(
                f"{method:<12}{side:<8}{term:<32}{fitted[0]:>9.2f}{predicted[side][0]:>9.1f}"  # type: ignore[index]
                f"{fitted[1]:>11.2f}{predicted[side][1]:>9.1f}"  # type: ignore[index]
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(__doc__.splitlines()[0], out="results/privirec_comm_scaling", quick="a tiny grid that runs in seconds",
                          seeds=1, quick_seeds=1,
                          seeds_help="runs per method and size, at seeds run.seed, run.seed + 1, ...; every byte count is their mean",
                          out_help="the folder of one sweep folder per method: privirec, privirec_k, fcf")
    parser.add_size("grid", full=FULL, quick=QUICK)
    args = parser.parse_args(argv)
    results = study(args.grid, args.seeds, args.set, args.out, args.workers, args.dask)
    print(format_tables(args.grid, results))
    if not all(math.isfinite(value) for method in results.values() for side in ("client", "server") for value in method[side]):  # type: ignore[union-attr]
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
