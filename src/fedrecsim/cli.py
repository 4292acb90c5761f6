"""The ``fedrecsim`` command.

``fedrecsim run FILE [--set key.path=value ...] [--out DIR] [--seed N] [--transcript]`` runs a scenario,
shows a progress bar on stderr once a run has taken more than a second, and prints a summary table.
Exit codes: 0 on success, 2 on a bad scenario or data set (the message, never a traceback), 1 when the
simulation itself reports an error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .errors import ConfigError, DatasetError, SimulationError
from .runner import RunResult, run
from .scenario import apply_overrides, parse_scenario, read_tables

_PROGRESS_AFTER_S = 1.0
_BAR_WIDTH = 30


class ProgressBar:
    """A one-line progress bar on a stream, drawn only once the run has taken over a second."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.perf_counter()
        self.drawn = False

    def __call__(self, completed: int, total: int) -> None:
        elapsed = time.perf_counter() - self.started
        if elapsed < _PROGRESS_AFTER_S and not self.drawn:
            return
        filled = int(_BAR_WIDTH * completed / max(total, 1))
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        self.stream.write(f"\r[{bar}] {completed}/{total} rounds  {elapsed:6.1f}s")
        self.drawn = True
        if completed >= total:
            self.stream.write("\n")
        self.stream.flush()


def summary_table(run_result: RunResult) -> str:
    """The end-of-run summary: final metrics, bytes per role, and per-user-per-round traffic."""
    result = run_result.result
    lines = [
        f"run {result['scenario']['run']['name']!r}: protocol {result['protocol']}, seed {result['seed']}, "
        f"{result['rounds_completed']} rounds, {result['virtual_time_s']:.1f} s virtual in "
        f"{result['wall_time_s']:.2f} s wall",
        f"transcript sha256 {result['transcript_sha256']}",
        "",
        "final metrics",
    ]
    for name, value in result["metrics"]["final"].items():
        lines.append(f"  {name:<22} {value:>14.6g}")
    lines += ["", f"  {'role':<12} {'parties':>8} {'sent bytes':>14} {'recv bytes':>14} {'msgs':>10} {'dropped':>8}"]
    for role, counters in result["ledger"]["roles"].items():
        lines.append(
            f"  {role:<12} {counters['parties']:>8} {counters['sent_bytes']:>14,} {counters['recv_bytes']:>14,} "
            f"{counters['sent_msgs']:>10,} {counters['dropped_msgs']:>8,}"
        )
    rounds = max(result["rounds_completed"], 1)
    users = [counters for party, counters in result["ledger"]["parties"].items() if party.startswith("user:")]
    if users:
        up = [counters["sent_bytes"] / rounds for counters in users]
        down = [counters["recv_bytes"] / rounds for counters in users]
        lines += [
            "",
            "per user per round (bytes)   mean          max",
            f"  upload               {sum(up) / len(up):>12,.1f} {max(up):>12,.1f}",
            f"  download             {sum(down) / len(down):>12,.1f} {max(down):>12,.1f}",
        ]
    violated = [inv for inv in result["invariants"] if inv["violations"]]
    for invariant in violated:
        lines.append(f"INVARIANT VIOLATED: {invariant['name']}: {invariant['violations']} of {invariant['checked']}")
    if run_result.path is not None:
        lines += ["", f"results in {run_result.path}"]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedrecsim", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_cmd = commands.add_parser("run", help="run a scenario file")
    run_cmd.add_argument("scenario", type=Path, help="the scenario TOML file")
    run_cmd.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a scenario key (value parsed as a TOML literal); repeatable",
    )
    run_cmd.add_argument("--out", type=Path, help="result folder (default: results/<run.name>)")
    run_cmd.add_argument("--seed", type=int, help="shorthand for --set run.seed=N")
    run_cmd.add_argument("--transcript", action="store_true", help="also write transcript.csv")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"run.seed={args.seed}")
    try:
        scenario = parse_scenario(apply_overrides(read_tables(args.scenario), overrides))
        out = args.out if args.out is not None else Path("results") / scenario.run.name
        run_result = run(scenario, out=out, transcript=args.transcript, progress=ProgressBar(sys.stderr))
    except (ConfigError, DatasetError) as exc:
        print(f"fedrecsim: error: {exc}", file=sys.stderr)
        return 2
    except SimulationError as exc:
        print(f"fedrecsim: simulation error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(summary_table(run_result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
