"""fedrecsim: simulate privacy-preserving federated recommendation protocols over a simulated network.

``fedrecsim run FILE [--set key.path=value ...] [--seed N] [--out DIR [--overwrite]] [--transcript]
[--quiet | --progress] [--transport sim|tcp [--processes GROUPS]] [--checkpoint-every N]`` runs a scenario
and prints its summary (``--transport tcp``: over loopback TCP with the parties in several processes,
`fedrecsim.launcher`; ``--checkpoint-every N --out DIR``: a checkpoint every N rounds beside DIR, from
which ``fedrecsim run --resume DIR`` continues an interrupted run, `fedrecsim.checkpoint`); ``fedrecsim protocols`` lists the
protocols; ``fedrecsim keys [PROTOCOL]`` lists every scenario key with its type, default and meaning;
``fedrecsim metrics [PROTOCOL]`` every metric a protocol reports with its meaning, unit and support.
``fedrecsim sweep FILE [--grid key.path=v1,v2 ...] [--zip ...] [--seeds N] [--workers N | --dask ADDRESS
[--dask-timeout S]] [--checkpoint-every N] --out DIR`` runs a study (a grid x seeds) into a sweep folder and
resumes one (`fedrecsim.sweep`; each distinct error of its failed runs is printed on stderr with its count);
``fedrecsim report DIR [--out REPORT] [--metrics A,B]`` draws a run or sweep folder's plots and report.md
(`fedrecsim.report`).
``fedrecsim data list | info NAME | fetch NAME --accept-licence [--dir DIR]`` lists, describes and downloads
the public data sets (`fedrecsim.data.registry`).
``fedrecsim audit FILE --party ROLE:INDEX --trials N [--set ...] [--workers N | --dask ADDRESS] --out DIR``
audits a protocol's privacy claim from a party's view: an empirical lower bound on epsilon, resumable
(`fedrecsim.audit`, docs/audit.md).

Without ``--out`` a run goes to ``results/<run.name>``, or ``results/<run.name>-2``, ``-3``, ... when that
exists: runs never collide. ``--out`` names a folder that must not exist; ``--overwrite`` lets it replace a
folder holding a fedrecsim result, never anything else. The location is checked before the run starts.

Exit codes: 0 on success; 2 on a bad scenario, data set, output location or usage, or a run that cannot
fit in the memory available (one line naming the key, the file and line, or the path -- never a
traceback; ``--memory-limit GIB|off`` on ``run`` and ``inspect`` overrides the memory check,
`fedrecsim.memory`); 1 when the simulation itself reports an error; 130 after Ctrl-C (SIGINT) and 143
after SIGTERM, which stop the run, print how far it got and leave no result folder behind (only the
checkpoint folder of a run that saves checkpoints); 141, quietly, when standard output is a closed pipe.
A sweep stops its workers at once on Ctrl-C or SIGTERM, keeps its complete runs and exits 130 / 143 too;
it ends 1 when a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from fedrecsim_entry import pipe_safe

from . import __version__
from .allocator import keep_freed_memory
from .checkpoint import CHECKPOINT_FILE, work_folder
from .errors import (
    CheckpointError, ConfigError, DatasetError, Interrupted, MemoryLimitError, OutputError, SimulationError,
)
from .memory import LIMIT_ENV, allocation_failed
from .output import prepare_output
from .progress import ProgressBar
from .protocols import available_protocols, protocol_spec
from .runner import resume, run
from .scenario import apply_overrides, parse_scenario, read_tables
from .summary import summary_text

_EXIT_USAGE = 2
_EXIT_SIGINT = 128 + signal.SIGINT
_EXIT_SIGTERM = 128 + signal.SIGTERM
#: The errors a user fixes in the input or the environment: one line, exit 2.
_USAGE_ERRORS = (CheckpointError, ConfigError, DatasetError, MemoryLimitError, OutputError)


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line like every other error (the subcommands' parsers are
    of this class too): ``fedrecsim: error: argument --seed: invalid int value: 'x' (see fedrecsim run --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(_EXIT_USAGE, f"fedrecsim: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fedrecsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fedrecsim {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run_cmd = commands.add_parser("run", help="run a scenario file")
    run_cmd.add_argument("scenario", type=Path, nargs="?", help="the scenario TOML file (none with --resume)")
    run_cmd.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a scenario key (value parsed as a TOML literal; a relative path is taken from "
        "the current folder); repeatable",
    )
    run_cmd.add_argument("--seed", type=int, help="shorthand for --set run.seed=N")
    run_cmd.add_argument(
        "--out", type=Path,
        help="result folder, which must not exist (default: results/<run.name>, numbered -2, -3, ... if taken)",
    )
    run_cmd.add_argument(
        "--overwrite", action="store_true",
        help="let --out replace an existing fedrecsim result folder (never anything else)",
    )
    run_cmd.add_argument("--transcript", action="store_true", help="also write transcript.csv")
    _add_memory_limit(run_cmd)
    run_cmd.add_argument(
        "--transport", choices=("sim", "tcp"), default="sim",
        help="sim: the simulated network in virtual time (default); tcp: real loopback TCP on the real clock, "
        "the parties split across OS processes (fcf, dpmf S2; zero-latency, fault-free scenarios)",
    )
    run_cmd.add_argument(
        "--processes", metavar="GROUP,GROUP,...",
        help="with --transport tcp: one process per group, each a role or roles joined by + (users may repeat: "
        "the users are split between those processes), e.g. server,third_party,users or server,users,users "
        "(default: one process per role)",
    )
    run_cmd.add_argument(
        "--checkpoint-every", type=int, default=0, metavar="N",
        help="with --out DIR: save the run's state every N rounds in .DIR.checkpoints beside it (removed when the "
        "run completes), so that --resume DIR can continue it if it is interrupted (every built-in protocol)",
    )
    run_cmd.add_argument(
        "--resume", type=Path, metavar="DIR",
        help="continue the interrupted run whose result folder was to be DIR from its last checkpoint (no scenario "
        "file: the checkpoint holds the scenario and settings)",
    )
    shown = run_cmd.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true", help="no progress bar")
    shown.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is no terminal")

    sweep_cmd = commands.add_parser("sweep", help="run a grid of scenario overrides x seeds into a sweep folder")
    sweep_cmd.add_argument("scenario", type=Path, help="a scenario or study file (a [sweep] table holds the grid)")
    sweep_cmd.add_argument(
        "--grid", action="append", default=[], metavar="KEY.PATH=V1,V2",
        help="sweep a key over these values (a TOML array without brackets); repeatable (each key once), the runs are "
        "the product; run.seed=... lists the seeds",
    )
    sweep_cmd.add_argument(
        "--zip", dest="zipped", action="append", default=[], metavar="KEY.PATH=V1,V2",
        help="sweep keys together, element-wise (every --zip list has the same length); one axis of the product",
    )
    sweep_cmd.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a key in every run; repeatable",
    )
    sweep_cmd.add_argument(
        "--seeds", type=int,
        help="seeds per grid point: run.seed, run.seed+1, ... (default: the file's, else 1); or list the seeds with "
        "--grid run.seed=1,5,9 (not both)",
    )
    engine = sweep_cmd.add_mutually_exclusive_group()
    engine.add_argument("--workers", type=int, help="local worker processes (default: the cores)")
    engine.add_argument(
        "--dask", metavar="ADDRESS",
        help="run on an existing Dask scheduler, e.g. tcp://host:8786 (a protocol of your own is shipped to its workers)",
    )
    sweep_cmd.add_argument(
        "--dask-timeout", type=float, default=10.0, metavar="SECONDS",
        help="how long to wait for the Dask scheduler to answer (default 10)",
    )
    sweep_cmd.add_argument(
        "--out", type=Path, required=True,
        help="the sweep folder: new, or one of the same study to resume or extend (complete runs are skipped; another study is refused)",
    )
    sweep_cmd.add_argument(
        "--checkpoint-every", type=int, default=0, metavar="N",
        help="each run saves a checkpoint every N rounds in the sweep folder; resuming the sweep resumes a run it "
        "left under way from its last one (local workers only)",
    )
    shown_sweep = sweep_cmd.add_mutually_exclusive_group()
    shown_sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    shown_sweep.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is no terminal")

    report_cmd = commands.add_parser("report", help="plots and report.md of a run folder or a sweep folder")
    report_cmd.add_argument("folder", type=Path, help="a run's result folder or a sweep folder")
    report_cmd.add_argument("--out", type=Path, help="the report folder (default: FOLDER-report beside it)")
    report_cmd.add_argument(
        "--metrics",
        metavar="A,B",
        help="what the tables and figures show: metrics (hr@10: each of its statistics), statistics "
        "(hr@10.final, participants.round_mean), privacy.NAME or ROLE.sent_bytes (default: a run's per-round "
        "metrics, a sweep's quantities that vary); a name the folder lacks is refused with the names it has",
    )

    commands.add_parser("protocols", help="list the protocols a scenario can name in run.protocol")
    keys_cmd = commands.add_parser("keys", help="list every scenario key: type, default and meaning")
    keys_cmd.add_argument("protocol", nargs="?", help="only this protocol's [protocol] keys (default: all)")
    metrics_cmd = commands.add_parser("metrics", help="list every metric a protocol reports: meaning, unit and support")
    metrics_cmd.add_argument("protocol", nargs="?", help="only this protocol's metrics (default: every protocol)")
    _add_data_command(commands)
    _add_inspect_command(commands)
    _add_audit_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: the process's arguments); returns the exit code (module docstring).

    A closed standard output (``fedrecsim protocols | head -1``) raises `BrokenPipeError` out of here: the
    console entry point (``fedrecsim_entry.main``) ends it quietly with 141, and ends a Ctrl-C that came
    before this module was even imported with 130; ``python -m fedrecsim.cli`` ends it the same way
    (``fedrecsim_entry.pipe_safe``).
    """
    args = _parser().parse_args(argv)
    try:
        if getattr(args, "memory_limit", None) is not None:
            os.environ[LIMIT_ENV] = args.memory_limit  # the runs of this process and of its children
        if args.command == "protocols":
            return _list_protocols()
        if args.command == "keys":
            from .reference import keys_text  # only this command needs every protocol's schema

            print(keys_text(args.protocol))
            return 0
        if args.command == "metrics":
            from .metric_reference import metrics_text

            print(metrics_text(args.protocol))
            return 0
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "data":
            return _data(args)
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "audit":
            return _audit(args)
        if args.command == "report":
            from .report import parse_metrics, write_report

            chosen = parse_metrics(args.metrics) if args.metrics is not None else None
            print(f"report: {write_report(args.folder, args.out, chosen) / 'report.md'}")
            return 0
        return _run(args)
    except _USAGE_ERRORS as exc:
        print(f"fedrecsim: error: {exc}", file=sys.stderr)
        return _EXIT_USAGE
    except MemoryError as exc:  # an allocation the estimate did not foresee (numpy's names the array)
        print(f"fedrecsim: error: {allocation_failed(exc)}", file=sys.stderr)
        return _EXIT_USAGE
    except KeyboardInterrupt:
        print("fedrecsim: interrupted", file=sys.stderr)
        return _EXIT_SIGINT


def _list_protocols() -> int:
    """Each protocol with its one-line description; one that fails to load says why in its place."""
    names = available_protocols()
    width = max(map(len, names), default=0)
    for name in names:
        try:
            description = protocol_spec(name).description
        except ConfigError as exc:
            description = f"(cannot be loaded: {exc.problem})"
        print(f"{name:<{width}}  {description}")
    return 0


def _check_run_arguments(args: argparse.Namespace) -> None:
    """Refuse combinations of ``run``'s options that cannot go together, before anything is read or made."""
    if args.resume is not None:
        given = [name for name, value in (
            ("a scenario file", args.scenario), ("--set", args.overrides), ("--seed", args.seed), ("--out", args.out),
            ("--transcript", args.transcript), ("--checkpoint-every", args.checkpoint_every),
            ("--transport tcp", args.transport == "tcp"),
        ) if value]
        if given:
            raise ConfigError("--resume", f"continues the checkpoint's own scenario and settings; drop {', '.join(given)}")
        return
    if args.scenario is None:
        raise ConfigError("run", "name a scenario file, or --resume DIR to continue an interrupted run")
    if args.transport == "tcp" and args.transcript:
        raise ConfigError("--transcript", "not available with --transport tcp: each process sees only its own deliveries")
    if args.processes is not None and args.transport != "tcp":
        raise ConfigError("--processes", "places parties in processes only with --transport tcp")
    if args.checkpoint_every and args.out is None:
        raise ConfigError("--checkpoint-every", "needs --out DIR: the checkpoints are kept beside the result folder")
    if args.checkpoint_every and args.transport == "tcp":
        raise ConfigError("--checkpoint-every", "not available with --transport tcp: checkpoints save a simulated run")
    if args.checkpoint_every < 0:
        raise ConfigError("--checkpoint-every", f"must be a number of rounds >= 1, got {args.checkpoint_every}")


def _run(args: argparse.Namespace) -> int:
    _check_run_arguments(args)
    scenario = None
    if args.resume is None:
        overrides = list(args.overrides)
        if args.seed is not None:
            overrides.append(f"run.seed={args.seed}")
        scenario = parse_scenario(apply_overrides(read_tables(args.scenario), overrides))
        if args.out is not None:
            target = prepare_output(args.out, overwrite=args.overwrite)
        else:
            target = prepare_output(Path("results") / scenario.run.name, numbered=True)
    bar = ProgressBar(sys.stderr) if args.progress or (not args.quiet and sys.stderr.isatty()) else None
    keep_freed_memory()  # this process exists to run the simulation (`fedrecsim.allocator`)
    with _sigterm_as_interrupt() as terminated:
        try:
            if args.resume is not None:
                run_result = resume(args.resume, overwrite=args.overwrite, progress=bar)
            elif args.transport == "tcp":
                from .launcher import run_tcp

                run_result = run_tcp(scenario, processes=args.processes, out=target, progress=bar)
            else:
                run_result = run(
                    scenario, out=target, transcript=args.transcript, progress=bar, checkpoint_every=args.checkpoint_every
                )
        except Interrupted as exc:
            if bar is not None:
                bar.break_line()
            print(f"fedrecsim: {exc}{_how_to_resume(args)}", file=sys.stderr)
            return _EXIT_SIGTERM if terminated else _EXIT_SIGINT
        except SimulationError as exc:
            if bar is not None:
                bar.break_line()
            if isinstance(exc, _USAGE_ERRORS):
                raise
            print(f"fedrecsim: simulation error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    print(summary_text(run_result))
    return 0


def _how_to_resume(args: argparse.Namespace) -> str:
    """The command that continues an interrupted run from the checkpoint it kept ("" when it kept none: no
    ``--checkpoint-every``, or stopped before its first checkpoint). A checkpoint beside the result folder
    is this run's: a new run refuses to start where one is (`Checkpoints.create`)."""
    out = args.resume if args.resume is not None else args.out
    if out is None or not (work_folder(Path(os.path.abspath(out))) / CHECKPOINT_FILE).is_file():
        return ""
    return f"; its last checkpoint is kept: fedrecsim run --resume {out} continues the run"


def _sweep(args: argparse.Namespace) -> int:
    from .report import count_text
    from .sweep import distinct_errors, load_study, run_sweep

    study = load_study(args.scenario, grid=args.grid, zipped=args.zipped, seeds=args.seeds, overrides=args.overrides)
    shown = args.progress or (not args.quiet and sys.stderr.isatty())
    if args.dask_timeout <= 0:
        raise ConfigError("--dask-timeout", f"must be a number of seconds > 0, got {args.dask_timeout}")
    with _sigterm_as_interrupt() as terminated:
        try:
            result = run_sweep(
                study, args.out, workers=args.workers, dask=args.dask, progress=shown,
                checkpoint_every=args.checkpoint_every, dask_timeout_s=args.dask_timeout,
            )
        except KeyboardInterrupt:
            print(
                f"fedrecsim: interrupted; the runs under way were stopped, the complete ones are kept in {args.out}: "
                "the same command resumes the sweep", file=sys.stderr,
            )
            return _EXIT_SIGTERM if terminated else _EXIT_SIGINT
    print(
        f"sweep: {count_text(len(result.rows), 'run')} ({result.skipped} already complete, {result.ran} ran, "
        f"{result.failed} failed) "
        f"-> {result.path / 'sweep.csv'}, {result.path / 'summary.csv'}"
    )
    errors = distinct_errors(result.rows)
    if errors:
        failed = count_text(sum(count for _, count in errors), "run")
        print(f"sweep: {failed} failed (the error column of sweep.csv):", file=sys.stderr)
        for error, count in errors:
            print(f"  {count} x {error}", file=sys.stderr)
    return 1 if result.failed else 0


def _add_inspect_command(commands: argparse._SubParsersAction) -> None:
    """``fedrecsim inspect FILE [--set ...] [--calibrate N]``: a scenario validated and estimated, not run
    (`fedrecsim.inspect`)."""
    inspect_cmd = commands.add_parser(
        "inspect", help="validate a scenario and estimate its parties, traffic per round and role, and run time"
    )
    inspect_cmd.add_argument("scenario", type=Path, help="the scenario TOML file")
    inspect_cmd.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a scenario key (value parsed as a TOML literal); repeatable",
    )
    inspect_cmd.add_argument(
        "--calibrate", type=int, default=3, metavar="ROUNDS",
        help="rounds of the timing run at full size (default 3; 0 = none: no time estimate)",
    )
    _add_memory_limit(inspect_cmd)


def _add_audit_command(commands: argparse._SubParsersAction) -> None:
    """``fedrecsim audit FILE --party ROLE:INDEX --trials N ...``: an empirical lower bound on the protocol's
    epsilon from a party's view (`fedrecsim.audit`)."""
    audit_cmd = commands.add_parser(
        "audit", help="audit a protocol's privacy claim: a lower bound on epsilon from a party's view, with and without a target"
    )
    audit_cmd.add_argument("scenario", type=Path, help="the scenario TOML file (an [audit] table holds the audit's settings)")
    audit_cmd.add_argument("--party", metavar="ROLE:INDEX", help="the party whose view is audited (audit.party), e.g. proxy:0")
    audit_cmd.add_argument("--trials", type=int, metavar="N", help="runs per world, with and without the target (audit.trials)")
    audit_cmd.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a scenario key or an audit.* setting (docs/audit.md); repeatable",
    )
    engine = audit_cmd.add_mutually_exclusive_group()
    engine.add_argument("--workers", type=int, help="local worker processes (default: the cores; 1: in this process)")
    engine.add_argument("--dask", metavar="ADDRESS", help="run the trials on an existing Dask scheduler, e.g. tcp://host:8786")
    audit_cmd.add_argument("--out", type=Path, required=True, help="the audit folder: new, or this audit's to resume")
    shown = audit_cmd.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true", help="no progress line")
    shown.add_argument("--progress", action="store_true", help="print progress even when stderr is no terminal")


def _audit(args: argparse.Namespace) -> int:
    from .audit import Audit

    overrides = list(args.overrides)
    if args.party is not None:
        overrides.append(f"audit.party={json.dumps(args.party)}")
    if args.trials is not None:
        if args.trials < 2:
            raise ConfigError("--trials", f"expected a whole number >= 2 (half of them train, half are held out), got {args.trials}")
        overrides.append(f"audit.trials={args.trials}")
    audit = Audit(args.scenario, overrides)
    shown = args.progress or (not args.quiet and sys.stderr.isatty())
    with _sigterm_as_interrupt() as terminated:
        try:
            result = audit.run(args.out, workers=args.workers, dask=args.dask, progress=shown)
        except KeyboardInterrupt:
            print(f"fedrecsim: interrupted; the finished trials are kept in {args.out}: the same command resumes the audit", file=sys.stderr)
            return _EXIT_SIGTERM if terminated else _EXIT_SIGINT
        except SimulationError as exc:
            if isinstance(exc, _USAGE_ERRORS):
                raise
            print(f"fedrecsim: simulation error: {exc}", file=sys.stderr)
            return 1
    print(result.text())
    return 0


def _add_memory_limit(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--memory-limit", metavar="GIB|off",
        help="the memory the run may use, in GiB, instead of the memory available (MemAvailable, the cgroup's or "
        f"ulimit -v's limit), or off: no check (`fedrecsim.memory`; also the environment variable {LIMIT_ENV})",
    )


def _inspect(args: argparse.Namespace) -> int:
    from .inspect import inspect_scenario, inspection_text

    if args.calibrate < 0:
        raise ConfigError("--calibrate", f"expected a number of rounds >= 0 (0: no timing run), got {args.calibrate}")
    scenario = parse_scenario(apply_overrides(read_tables(args.scenario), args.overrides))
    print(inspection_text(inspect_scenario(scenario, calibration_rounds=args.calibrate)))
    return 0


def _add_data_command(commands: argparse._SubParsersAction) -> None:
    """``fedrecsim data list | info NAME | fetch NAME``: the registry of public data sets (`fedrecsim.data.registry`)."""
    data_cmd = commands.add_parser("data", help="list, describe and fetch the public data sets the loaders read")
    actions = data_cmd.add_subparsers(dest="data_command", required=True)
    actions.add_parser("list", help="the registered data sets and whether each was fetched")
    info_cmd = actions.add_parser("info", help="a data set's address, checksum, size, licence and local copy")
    info_cmd.add_argument("name", help="a registered data set (fedrecsim data list)")
    fetch_cmd = actions.add_parser(
        "fetch", help="download, verify and unpack a data set into the data home ($FEDRECSIM_DATA or the cache folder)"
    )
    fetch_cmd.add_argument("name", help="a registered data set (fedrecsim data list)")
    fetch_cmd.add_argument("--accept-licence", action="store_true", help="accept the data set's licence (shown first)")
    fetch_cmd.add_argument("--dir", type=Path, help="fetch into this folder instead of the data home")
    fetch_cmd.add_argument("--url", help="download from this address (a mirror, a file:// copy) instead of the official one")
    check = fetch_cmd.add_mutually_exclusive_group()
    check.add_argument("--sha256", metavar="HEX", help="expect this SHA-256 instead of the registry's")
    check.add_argument("--no-verify", action="store_true", help="install without checking the SHA-256 (it is printed)")
    fetch_cmd.add_argument("--quiet", action="store_true", help="no progress bar")


def _data(args: argparse.Namespace) -> int:
    from .data.fetch import DownloadProgress, fetch, licence_text
    from .data.registry import DATA_HOME_ENV, data_home, dataset_text, registry_text

    if args.data_command == "list":
        print(registry_text())
        return 0
    if args.data_command == "info":
        print(dataset_text(args.name))
        return 0
    print(licence_text(args.name))
    bar = DownloadProgress(sys.stderr) if not args.quiet and sys.stderr.isatty() else None
    try:
        fetched = fetch(
            args.name, accept_licence=args.accept_licence, home=args.dir, url=args.url,
            sha256=args.sha256, verify=not args.no_verify, progress=bar,
        )
    finally:
        if bar is not None:
            bar.close()
    if not fetched.downloaded:
        print(f"{fetched.name}: already fetched, in {fetched.path}")
    else:
        checked = "verified" if fetched.verified else "NOT verified (--no-verify)"
        print(f"sha256 {fetched.sha256} ({fetched.size:,} bytes), {checked}\n{fetched.name}: fetched into {fetched.path}")
    if args.dir is None or args.dir.resolve() == data_home().resolve():
        print(f'a scenario reads it with data.source = "{fetched.name}" and no data.path')
    else:
        print(f'a scenario reads it with data.path = "{fetched.path}" (or set {DATA_HOME_ENV}={args.dir})')
    return 0


@contextmanager
def _sigterm_as_interrupt() -> Iterator[list[bool]]:
    """While the block runs, SIGINT and SIGTERM stop the run; the yielded list turns true if SIGTERM came.

    SIGINT gets Python's default handler even where the shell started us ignoring it (a background job),
    and the SIGTERM handler re-raises its signal as SIGINT, so trio delivers both where it is safe.
    """
    terminated: list[bool] = []

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.append(True)
        signal.raise_signal(signal.SIGINT)

    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous_term = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield terminated
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)


if __name__ == "__main__":
    sys.exit(pipe_safe(main))
