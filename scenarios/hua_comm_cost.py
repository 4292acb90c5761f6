"""Hua et al.'s communication figures for S3 beside ours: ``python scenarios/hua_comm_cost.py [--quick]``.

Runs ``hua_comm_cost.toml`` twice -- masks psi sent explicitly (the paper) and as a 16-byte PRG key per
user and iteration (``mask_transport = "seeded"``) -- as one study (`fedrecsim.study`) into ``--out``
(default ``results/hua_comm_cost``; a re-run resumes), and prints, per iteration, the bytes the served
users with at most 20 rated items (the paper's condition) downloaded and uploaded, largest and mean, and
what the third party sent, as exact encoded message sizes from the ledger (the run's ``paper_figures``),
beside the paper's claims (Sec. 5); the heaviest served user of any size beside them (from its serving to
the aggregate, where the paper's figures count the whole round); and the ring the
values travel in (its width, its fractional bits and the range the run needs,
`fedrecsim.protocols.dpmf.headroom`). With ``--seeds N`` a largest figure is the largest over the N runs
of a transport and a mean the mean over them. The item counts are the data's (`data_sizes`: the most
training ratings of a user, and the items any user rated), which every user is served with when, as in
the file, all users are online and ``max_users`` serves them all. ``--quick`` runs a tenth of the size
(the claims are about 1000 users; the quick figures only show that the script works).
"""

from __future__ import annotations

import sys
from pathlib import Path

import fedrecsim
from fedrecsim.study import ScriptParser, Study, data_sizes, run_script

SCENARIO = Path(__file__).resolve().parent / "hua_comm_cost.toml"
QUICK = ["data.users=100", "data.items=1000", "data.ratings=2000", "protocol.max_users=100", "run.rounds=1"]
TRANSPORTS = ("explicit", "seeded")


def measure(overrides: list[str], out: Path, seeds: int = 1, workers: int | None = None, dask: str | None = None) -> dict[str, dict[str, float]]:
    """Per transport: the paper's user figures on the paper's population -- the served users with at most
    20 rated items, per iteration (mean and largest) -- the heaviest served user beside them, the third
    party's bytes per iteration (mean and worst), and the sizes; largest over the seeds, means averaged."""
    study = Study(SCENARIO, overrides=overrides, grid={"protocol.mask_transport": list(TRANSPORTS)}, seeds=seeds)
    done = study.run(out, workers=workers, dask=dask, progress=sys.stderr.isatty()).complete()
    found: dict[str, list[dict[str, float]]] = {}
    for row in done.runs:
        document = done.result(row)
        ring = document["privacy"]["ring"]
        down, up, third = (figure for figure in document["paper_figures"] if figure["unit"] == "B")
        sizes = data_sizes(fedrecsim.load_scenario(SCENARIO, [*overrides, f"run.seed={row['seed']}"]))
        found.setdefault(row["protocol.mask_transport"], []).append({
            "down_mean": down["measured"],
            "down": down["measured_max"],
            "down_heaviest": down["heaviest"],
            "up_mean": up["measured"],
            "up": up["measured_max"],
            "up_heaviest": up["heaviest"],
            "paper_users": down["population_size"],
            "third_party_mean": third["measured"],
            "third_party": third["measured_max"],
            "served": max(metrics["selected"] for metrics in document["metrics"]["rounds"]),
            "max_items": sizes.max_train_per_user,
            "items": sizes.rated_items,
            "ring_bits": ring["bits"],
            "frac_bits": ring["frac_bits"],
            "ring_needed_abs": ring["needed_abs"],
        })
    return {transport: _combine(runs) for transport, runs in found.items()}


def _combine(runs: list[dict[str, float]]) -> dict[str, float]:
    """One transport's figures over its seeds: a mean is averaged, anything else is its largest value."""
    return {
        name: (sum(run[name] for run in runs) / len(runs) if name.endswith("_mean") else max(run[name] for run in runs))
        for name in runs[0]
    }


def table(figures: dict[str, dict[str, float]]) -> str:
    explicit, seeded = figures["explicit"], figures["seeded"]
    rows = [
        ("quantity per iteration", "paper", "ours, explicit psi", "ours, seeded psi"),
        (
            f"user download ({explicit['paper_users']:,.0f} users with <= 20 items): largest",
            "<= 12 KB", _size(explicit["down"]), _size(seeded["down"]),
        ),
        ("  mean", "", _size(explicit["down_mean"]), _size(seeded["down_mean"])),
        ("user upload (same users): largest", "<= 5 KB", _size(explicit["up"]), _size(seeded["up"])),
        ("  mean", "", _size(explicit["up_mean"]), _size(seeded["up_mean"])),
        (
            f"third party sends ({explicit['served']:.0f} users, {explicit['items']:,} items): worst iteration",
            "< 3 MB (1000 users, <= 10,000 items)",
            _size(explicit["third_party"]),
            _size(seeded["third_party"]),
        ),
        (
            f"heaviest served user of any size (<= {explicit['max_items']:.0f} items), serving to aggregate: download / upload",
            "(not the paper's condition)",
            f"{_size(explicit['down_heaviest'])} / {_size(explicit['up_heaviest'])}",
            f"{_size(seeded['down_heaviest'])} / {_size(seeded['up_heaviest'])}",
        ),
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    saved = 1 - seeded["down"] / explicit["down"] if explicit["down"] else 0.0
    per_item = explicit["third_party"] / explicit["items"] if explicit["items"] else 0.0
    lines.append(
        f"(ring Z_2^{explicit['ring_bits']:.0f} with {explicit['frac_bits']:.0f} fractional bits (frac_bits = \"auto\": the most "
        f"that hold the aggregates): range +-2^{explicit['ring_bits'] - 1 - explicit['frac_bits']:.0f}, "
        f"the aggregates need +-{explicit['ring_needed_abs']:.3g} at a tail probability of 1e-12 per aggregate; B = bytes, KiB = 1024 B; seeded masks save {saved:.0%} of the download; "
        f"the third party sends {per_item:,.0f} B per aggregated item)"
    )
    return "\n".join(lines)


def _size(nbytes: float) -> str:
    return f"{nbytes:,.0f} B ({nbytes / 1024:,.1f} KiB)"


def main(argv: list[str] | None = None) -> int:
    parser = ScriptParser(__doc__.splitlines()[0], out="results/hua_comm_cost", quick="a tenth of the size, to check the script runs",
                          seeds=1, quick_seeds=1,
                          seeds_help="runs per transport, at seeds run.seed, run.seed + 1, ...; a largest figure is the largest over them, a mean their mean")
    parser.add_size("sizes", full=[], quick=QUICK)
    args = parser.parse_args(argv)
    print(table(measure([*args.sizes, *args.set], args.out, args.seeds, args.workers, args.dask)))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
