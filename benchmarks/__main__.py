"""``python -m benchmarks [WORKLOAD ...] [--quick] [--repeats N]``: run workloads, their result lines, then
one ``machine`` line: the CPUs and the 1-minute load average before and after, so that a reader can tell a
quiet machine's figures from a loaded one's (a wall-clock ratio on a loaded machine is not a quiet one's)."""

from __future__ import annotations

import argparse
import os
import sys

from . import load, workloads
from .common import Options


def main(argv: list[str] | None = None) -> int:
    known = workloads()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run fedrecsim's standard workloads, each side by side with its peer.",
    )
    parser.add_argument(
        "workloads",
        nargs="*",
        metavar="WORKLOAD",
        help=f"workloads to run (default: all of {', '.join(known)})",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds), as the smoke tests use")
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed repetitions per side, best reported (default: per workload)"
    )
    args = parser.parse_args(argv)
    names = [name.lower() for name in args.workloads] or list(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if args.repeats is not None and args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    options = Options(quick=args.quick, repeats=args.repeats)
    before = os.getloadavg()[0]
    for name in names:
        for line in load(name)(options):
            print(line, flush=True)
    after = os.getloadavg()[0]
    print(f"machine cpus={os.cpu_count()} load_1m_before={before:.1f} load_1m_after={after:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
