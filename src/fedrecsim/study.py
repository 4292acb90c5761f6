"""Scripting a study from Python: build it, run it, read its tables.

A study is a base scenario, overrides, grid axes, zipped axes and a number of seeds -- the same thing as
``fedrecsim sweep`` runs, and it writes the same sweep folder (``sweep.json``, ``runs/<hash>/``,
``sweep.csv``, ``summary.csv``; see ``docs/studies.md``), so a study scripted here can be reported with
``fedrecsim report`` and a sweep run from the command line can be read here. ::

    from fedrecsim.study import Study

    study = Study("scenarios/fcf_static.toml", overrides=["run.rounds=3", "data.users=40"],
                  grid={"protocol.d": [4, 8]}, seeds=2)
    done = study.run("results/fcf-d", workers=2)        # re-running resumes: complete runs are skipped
    for line in done.summary:                           # one dict per grid point
        print(line["protocol.d"], line["test_rmse.final.mean"], line["test_rmse.final.n"])
    # pandas.DataFrame(done.runs) -- one row per run, as sweep.csv holds it

Tables are plain lists of dicts (`StudyResult.runs`, `StudyResult.summary`) that ``pandas.DataFrame``
takes as they are, or column dicts (`columns`); pandas is never needed. What a study script needs beside
them is here too: `ScriptParser`, the command line every script in ``scenarios/`` shares (``--quick``,
``--seeds``, ``--set``, ``--out``, ``--workers``, ``--dask``) and where a script declares what it runs at
full size and what with ``--quick``, `run_script` (errors as one line and an exit status),
`StudyResult.complete` (refuses failed runs), `StudyResult.result` (a run's whole ``result.json``:
per-round metrics, the ledger, the privacy report), `half_width` and `interval_text` (of a summary interval) and
`data_sizes` (what a scenario's data split holds, before anything runs). A single scenario
with overrides is ``fedrecsim.load_scenario(path, overrides)`` and ``fedrecsim.run``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedrecsim_entry import pipe_safe

from .data import prepare_data
from .errors import CheckpointError, ConfigError, DatasetError, OutputError, SimulationError
from .scenario import Scenario, apply_overrides, load_scenario, parse_override
from .sweep import Study as _Plan
from .sweep import check_sweep_folder, distinct_errors, load_study, make_axes, plan, read_csv, run_sweep, sweep_folder_problem
from .sweep import MARKER, RUNS

#: Columns of sweep.csv that are text whatever they hold (a run's hash may be all digits).
TEXT_COLUMNS = frozenset({"run", "status", "error", "transcript"})


@dataclass(frozen=True)
class Study:
    """A study: a base scenario, overrides, grid axes, zipped axes and seeds per point. ::

        study = Study("scenarios/minto_ldp.toml", overrides=["run.rounds=4"],
                      grid={"protocol.epsilon": [0.5, 10.0], "protocol.k": [1, 100]}, seeds=2)
        study.runs                              # 2 x 2 points x 2 seeds = 8
        done = study.run("results/tradeoff")    # a StudyResult

    Args:
        base: a scenario file, a study file (a scenario TOML with a ``[sweep]`` table, whose ``set``,
            ``grid``, ``zip`` and ``seeds`` it brings), or raw scenario tables as a dict (copied, never
            changed).
        overrides: ``"key.path=value"`` strings (values are TOML literals, as ``--set`` takes them),
            applied to the base after a study file's own ``sweep.set``.
        grid: one axis per key, ``{"protocol.epsilon": [0.1, 1.0]}``; values are Python values.
        zipped: keys swept together, element by element, as one axis; the lists are equally long.
        seeds: runs per grid point, at seeds ``run.seed``, ``run.seed + 1``, ... (default: the study
            file's ``sweep.seeds``, else 1). A grid over ``run.seed`` lists the seeds instead (then
            ``seeds`` is 1).

    The runs are the Cartesian product of the axes (a study file's axes, then ``grid``'s, then the
    ``zipped`` one) times the seeds; a point that occurs twice runs once. A key of ``grid`` or ``zipped``
    that a study file already sweeps replaces the file's whole axis holding it. A key both set in
    ``overrides`` and swept is refused (one of the two would be silently lost), as ``--set`` with
    ``--grid`` is.

    Raises:
        ConfigError: naming the key (``grid["k"]``, ``zipped``, ``sweep.*``, a scenario key) that is
            wrong -- when the study is made, before anything runs.
    """

    base: str | Path | Mapping[str, Any]
    overrides: Sequence[str] = ()
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    zipped: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    seeds: int | None = None
    _plan: _Plan = field(init=False, repr=False, compare=False)
    _runs: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.overrides, str):
            raise ConfigError("overrides", 'expected a list of "key.path=value" strings, got one string')
        grid = _value_lists(self.grid, "grid")
        zipped = _value_lists(self.zipped, "zipped")
        if len({len(values) for values in zipped.values()}) > 1:
            shown = ", ".join(f"{key} has {len(values)}" for key, values in zipped.items())
            raise ConfigError("zipped", f"the lists must have the same length: {shown}")
        twice = sorted(set(grid) & set(zipped))
        if twice:
            raise ConfigError(f'grid["{twice[0]}"]', "is in both grid and zipped")
        if self.seeds is not None and (not isinstance(self.seeds, int) or isinstance(self.seeds, bool) or self.seeds < 1):
            raise ConfigError("seeds", f"expected a whole number >= 1, got {self.seeds!r}")
        for text in self.overrides:
            key = ".".join(parse_override(text)[0])
            if key in grid or key in zipped:
                raise ConfigError(f"overrides {key}", "is also swept by grid or zipped; set it or sweep it, not both")
        if isinstance(self.base, Mapping):
            if "sweep" in self.base:
                raise ConfigError("sweep", "a study from tables takes its grid, zip and seeds as arguments, not a [sweep] table")
            tables = apply_overrides(copy.deepcopy(dict(self.base)), self.overrides)
            axes, seeds = (), self.seeds or 1
        else:
            found = load_study(self.base, seeds=self.seeds, overrides=self.overrides)
            swept = set(grid) | set(zipped)
            tables, seeds = found.base, found.seeds
            axes = tuple(axis for axis in found.axes if not swept & set(axis.keys))
        resolved = _Plan(tables, axes + make_axes(grid, zipped, "flags"), seeds)
        planned = plan(resolved)  # every run's scenario validated now, naming the key a bad value sits under
        object.__setattr__(self, "_plan", resolved)
        object.__setattr__(self, "_runs", len(planned))

    @property
    def parameters(self) -> tuple[str, ...]:
        """The swept keys that tell points apart, in column order (the columns of ``sweep.csv`` after
        ``run``); a grid over ``run.seed`` is not among them (it is the ``seed`` column)."""
        return self._plan.point_parameters

    def points(self) -> list[dict[str, Any]]:
        """The grid's points in order, each once, as ``{key: value}``."""
        return [dict(zip(self.parameters, point)) for point in self._plan.points()]

    @property
    def runs(self) -> int:
        """How many runs the study has: points x seeds."""
        return self._runs

    def check(self, out: str | Path) -> None:
        """Refuse ``out`` now, as `run` would before running anything (an existing folder that is not a
        sweep folder, or one of another study: see ``docs/studies.md``), without creating or touching it.
        A script that runs several studies checks every folder first, so that none is refused after
        the others ran.

        Raises:
            OutputError: naming the folder and what is wrong with it.
        """
        check_sweep_folder(self._plan, out)

    def run(
        self,
        out: str | Path,
        *,
        workers: int | None = None,
        dask: str | None = None,
        progress: bool | None = None,
        checkpoint_every: int = 0,
    ) -> StudyResult:
        """Run every run not yet complete in ``out`` (the sweep folder) and write its tables.

        Args:
            out: the sweep folder; created if missing, resumed or extended if it holds this study's sweep
                (the same base scenario and swept keys: complete runs are skipped, failed ones retried),
                refused if it is anything else -- another study's sweep folder included (`check`).
            workers: local processes (default: the cores). Ignored with ``dask``.
            dask: the address of an existing Dask scheduler (``tcp://host:8786``) to run on instead.
            progress: True draws a progress bar on stderr.
            checkpoint_every: each run saves a checkpoint every this many rounds (local engine only).

        Returns:
            The folder's tables; ``ran`` and ``skipped`` count this call's runs. A failed run is a row
            with ``status = "failed"`` and its ``error``, not an exception.

        Raises:
            ConfigError: a bad option (``workers`` < 1, checkpoints on Dask). OutputError: ``out`` is not
            a sweep folder or cannot be written.
        """
        done = run_sweep(self._plan, out, workers=workers, dask=dask, progress=progress, checkpoint_every=checkpoint_every)
        return StudyResult(done.path, done.parameters, ran=done.ran, skipped=done.skipped)


@dataclass(frozen=True)
class StudyResult:
    """A sweep folder's tables: one row per run (`runs`) and one per grid point (`summary`). ::

        done = read_study("results/tradeoff")
        best = max(done.summary, key=lambda line: line["hr@10.final.mean"])
        rounds = done.result(done.runs[0])["metrics"]["rounds"]   # a run's per-round metrics

    Rows are read from ``sweep.csv`` and ``summary.csv`` each time they are asked for, and equal what the
    files hold, cell for cell, with a type per column: a column whose every non-empty cell is a whole
    number holds ints, one whose every non-empty cell is a number holds floats, any other column (and
    ``run``, ``status``, ``error``, ``transcript``) holds text; an empty cell is None. A grid value that
    is neither a number nor a string (a table, a boolean) is its compact JSON text.

    Attributes:
        path: the sweep folder.
        parameters: the swept keys (the first columns after ``run``).
        ran: runs this call ran (failed ones included); None when read with `read_study`.
        skipped: runs this call found complete; None when read with `read_study`.
    """

    path: Path
    parameters: tuple[str, ...]
    ran: int | None = None
    skipped: int | None = None

    @property
    def runs(self) -> list[dict[str, Any]]:
        """``sweep.csv``: per run its ``run`` hash, grid values, ``seed``, ``status``, the measured
        columns (``M.final``, ``M.round_mean``, ``privacy.*``, ``<role>.sent_bytes`` / ``recv_bytes``),
        ``rounds_completed``, ``transcript``, ``wall_time_s`` and, if it failed, ``error``."""
        return typed(read_csv(self.path / "sweep.csv"))

    @property
    def summary(self) -> list[dict[str, Any]]:
        """``summary.csv``: per grid point its values, ``runs`` and ``failed``, and for every measured
        column C ``C.mean``, ``C.ci95_low``, ``C.ci95_high`` (Student-t 95%, clipped to C's range) and
        ``C.n`` (the runs it is over)."""
        return typed(read_csv(self.path / "summary.csv"))

    @property
    def failed(self) -> int:
        """The runs of the study that have no complete result."""
        return sum(row["status"] != "complete" for row in self.runs)

    def complete(self) -> StudyResult:
        """This result, when every run is complete -- for a script whose tables need every run.

        Raises:
            SimulationError: some runs failed; the message counts them and names each distinct error
            (first line, how many runs gave it). Running the study again retries them.
        """
        runs = self.runs
        errors = distinct_errors(runs)
        if errors:
            shown = "; ".join(f"{error} ({count} run{'s' if count > 1 else ''})" for error, count in errors)
            failed = sum(count for _, count in errors)
            raise SimulationError(f"{failed} of {len(runs)} runs in {self.path} failed: {shown}")
        return self

    def folder(self, row: Mapping[str, Any]) -> Path:
        """The result folder of a run (a row of `runs`)."""
        return self.path / RUNS / str(row["run"])

    def result(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The whole ``result.json`` of a complete run (a row of `runs`): ``metrics["rounds"]`` (every
        round's metrics), ``ledger`` (per party, role and message kind), ``privacy``, ``scenario``.

        Raises:
            OutputError: the run failed or its folder is gone (names the folder).
        """
        path = self.folder(row) / "result.json"
        if row.get("status") != "complete":
            raise OutputError(self.folder(row), f"the run {row.get('status', 'is unknown')}: {row.get('error') or 'no result'}")
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise OutputError(path, "is missing; run the study again to re-run it") from None


def read_study(path: str | Path) -> StudyResult:
    """The tables of an existing sweep folder (written by `Study.run` or ``fedrecsim sweep``):
    ``read_study("results/churn").summary``.

    Raises:
        OutputError: ``path`` is not a sweep folder or its tables are missing.
    """
    path = Path(path)
    problem = sweep_folder_problem(path)
    if problem is not None:
        raise OutputError(path, problem)
    if not (path / "sweep.csv").is_file():
        raise OutputError(path / "sweep.csv", "is missing: the sweep never finished writing its tables; run it again")
    marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
    return StudyResult(path, tuple(marker["parameters"]))


def typed(rows: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """CSV rows (text cells) with a type per column, as `StudyResult` describes."""
    names: list[str] = []
    for row in rows:
        names.extend(name for name in row if name not in names)
    kinds = {name: _column_kind(name, [row.get(name) or "" for row in rows]) for name in names}
    return [{name: _convert(row.get(name) or "", kinds[name]) for name in names} for row in rows]


def _column_kind(name: str, cells: list[str]) -> type:
    filled = [cell for cell in cells if cell != ""]
    if name in TEXT_COLUMNS or not filled:
        return str
    for kind in (int, float):
        try:
            for cell in filled:
                kind(cell)
        except ValueError:
            continue
        return kind
    return str


def _convert(cell: str, kind: type) -> Any:
    return None if cell == "" else kind(cell)


def columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Rows as a column dict, ``{name: [value per row]}`` (None where a row lacks the column), every column
    as long as ``rows``, in first-seen order: ``pandas.DataFrame(columns(rows))``."""
    names: list[str] = []
    for row in rows:
        names.extend(name for name in row if name not in names)
    return {name: [row.get(name) for row in rows] for name in names}


def half_width(line: Mapping[str, Any], column: str) -> float | None:
    """Half the width of ``column``'s 95% interval in a `StudyResult.summary` row (``column`` as in
    sweep.csv, e.g. ``"err_increase.final"``); None where there is no interval (a single run).

    An interval clipped to the metric's range (a rate near 0, a count near 0) is not the mean plus or
    minus this: print it with `interval_text`, which shows a clipped interval as its two ends.
    """
    low, high = line.get(f"{column}.ci95_low"), line.get(f"{column}.ci95_high")
    if low is None or high is None:
        return None
    return (float(high) - float(low)) / 2


def interval_text(line: Mapping[str, Any], column: str, digits: int = 3) -> str:
    """``column``'s 95% interval in a `StudyResult.summary` row as a table shows it: ``+-0.012`` when it is
    the mean plus or minus a half-width, ``[0.000, 0.031]`` when it was clipped to the metric's range (then
    it is not symmetric around the mean: a ``+-`` would misstate one end), ``-`` without one (a single run).
    """
    low, high, mean = (line.get(f"{column}.{name}") for name in ("ci95_low", "ci95_high", "mean"))
    if low is None or high is None or mean is None:
        return "-"
    low, high, mean = float(low), float(high), float(mean)
    below, above = mean - low, high - mean
    if math.isclose(below, above, rel_tol=1e-9, abs_tol=1e-12 * max(1.0, abs(mean))):
        return f"+-{(high - low) / 2:.{digits}f}"
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


@dataclass(frozen=True)
class DataSizes:
    """What a scenario's data split holds (the split the run makes from its seed).

    Attributes:
        users: users in the data, including users without any rating.
        items: items in the data.
        train_ratings: entries of the training split.
        test_ratings: entries of the test split.
        train_users: users with at least one training entry.
        test_users: users with at least one test entry (held-out users, where the split holds users out).
        train_only_users: users with training entries and no test entry.
        max_train_per_user: the most training entries any user has.
        rated_items: items with at least one training entry.
    """

    users: int
    items: int
    train_ratings: int
    test_ratings: int
    train_users: int
    test_users: int
    train_only_users: int
    max_train_per_user: int
    rated_items: int


def data_sizes(scenario: Scenario | str | Path, overrides: Sequence[str] = ()) -> DataSizes:
    """The sizes of a scenario's data split, without running it (the run draws the same split):
    ``data_sizes("scenarios/fcf_static.toml", ["data.users=200"]).train_users``.

    Args:
        scenario: a validated `Scenario`, or a scenario file (with ``overrides`` applied).

    Raises:
        ConfigError, DatasetError: the scenario or its data is wrong.
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario, overrides)
    elif overrides:
        raise ConfigError("overrides", "apply overrides when loading the scenario (fedrecsim.load_scenario)")
    train, test = prepare_data(scenario.data, scenario.run.seed)
    per_train, per_test = train.user_counts(), test.user_counts()
    return DataSizes(
        users=int(train.n_users), items=int(train.n_items), train_ratings=len(train), test_ratings=len(test),
        train_users=int(np.count_nonzero(per_train)), test_users=int(np.count_nonzero(per_test)),
        train_only_users=int(np.count_nonzero((per_train > 0) & (per_test == 0))),
        max_train_per_user=int(per_train.max(initial=0)),
        rated_items=int(np.count_nonzero(train.item_counts())),
    )


def _value_lists(axes: Mapping[str, Sequence[Any]], name: str) -> dict[str, list[Any]]:
    if not isinstance(axes, Mapping):
        raise ConfigError(name, "expected a dict of key paths to lists of values")
    lists: dict[str, list[Any]] = {}
    for key, values in axes.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(name, f"expected key paths like 'protocol.epsilon', got {key!r}")
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence) or not values:
            raise ConfigError(f'{name}["{key}"]', f"expected a non-empty list of values, got {values!r}")
        lists[key] = list(values)
    return lists


#: What ``--seeds`` counts in a study script that says nothing else (`ScriptParser`'s ``seeds_help``).
SEEDS_HELP = "runs per grid point, at seeds run.seed, run.seed + 1, ..."


class ScriptParser(argparse.ArgumentParser):
    """The command line every study script shares; a script adds its own options with ``add_argument``.

    ``--quick`` (a small version, seconds), ``--seeds N`` (default ``seeds``, or ``quick_seeds`` with
    ``--quick``), ``--set KEY=VALUE`` (repeatable; applied to every run, after the script's own sizes),
    ``--out DIR`` (default ``out``; re-running resumes it), ``--workers N`` (local processes, default the
    cores) and ``--dask ADDRESS`` (an existing Dask scheduler instead). `parse_args` resolves ``seeds``
    and refuses a count below 1 (exit 2, one line).

    What ``--seeds`` and ``--out`` are differs between scripts, and ``--help`` says it in the script's
    words: ``seeds_help`` is what N counts and what the printed numbers are over them (default: runs per
    grid point, at seeds ``run.seed``, ``run.seed + 1``, ..., as `Study` runs them), ``out_help`` what the
    folder holds (default: the sweep folder). A script whose numbers are means over the seeds says so;
    an audit script's seeds are data worlds, not runs (`fedrecsim.audit.AuditScript`).

    What a script runs at full size and what with ``--quick`` it declares once, before `parse_args`:
    `add_size` names a value (override list, grid, size record, rows) the parsed arguments carry, and
    `add_sized_argument` adds an option of the script's own whose default follows ``--quick``, as
    ``--seeds`` does::

        QUICK = ["data.users=80"]

        parser = ScriptParser("My study", out="results/my_study", quick="80 users, 20 rounds (seconds)")
        parser.add_size("sizes", full=[], quick=QUICK)
        parser.add_sized_argument("--rounds", full=1000, quick=20, type=int, minimum=1, help="rounds per run")
        args = parser.parse_args()      # args.sizes: [] or QUICK; args.rounds: 1000, 20, or what --rounds says
        Study(SCENARIO, overrides=[*args.sizes, f"run.rounds={args.rounds}", *args.set], seeds=args.seeds).run(
            args.out, workers=args.workers, dask=args.dask)
    """

    def __init__(self, description: str, *, out: str | Path, quick: str, seeds: int = 3, quick_seeds: int = 2,
                 seeds_help: str = SEEDS_HELP, out_help: str = "the sweep folder") -> None:
        super().__init__(description=description)
        #: Per size name and per sized option's dest: (full, quick).
        self._sizes: dict[str, tuple[Any, Any]] = {}
        self._sized_defaults: dict[str, tuple[Any, Any]] = {}
        #: Per option's dest: (its flag, the least value it takes).
        self._minimums: dict[str, tuple[str, int]] = {}
        self.add_argument("--quick", action="store_true", help=quick)
        self.add_sized_argument("--seeds", full=seeds, quick=quick_seeds, type=int, minimum=1, help=seeds_help)
        self.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key in every run (repeatable)")
        self.add_argument("--out", type=Path, default=Path(out), help=f"{out_help} (default {out}; re-running resumes it)")
        self.add_argument("--workers", type=int, default=None, help="local worker processes (default: the cores)")
        self._minimums["workers"] = ("--workers", 1)
        self.add_argument("--dask", default=None, metavar="ADDRESS", help="run on an existing Dask scheduler (tcp://host:8786)")

    def add_size(self, name: str, *, full: Any, quick: Any) -> None:
        """Declare a value the script runs with: `parse_args` sets ``args.<name>`` to ``full``, or to ``quick``
        with ``--quick`` (the declared object itself, not a copy).

        Raises:
            ConfigError: ``name`` is not an identifier, or is already a size or an option's name (checked
                again at `parse_args`, for options added after it).
        """
        where = f"ScriptParser.add_size({name!r})"
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(where, "expected a Python identifier, the attribute the parsed arguments carry")
        if name in self._sizes or name in self._dests():
            raise ConfigError(where, f"{name!r} is already the name of a size or an option")
        self._sizes[name] = (full, quick)

    def add_sized_argument(self, flag: str, *, full: Any, quick: Any, help: str, minimum: int | None = None, **options: Any) -> argparse.Action:
        """Add an option ``flag`` whose default is ``full``, or ``quick`` with ``--quick``; a value given on
        the command line wins either way. ``options`` are `add_argument`'s (``type``, ``nargs``, ...; not
        ``default``); the help ends in ``(default FULL; QUICK with --quick)`` (None shows as "the scenario's":
        an option the script leaves out of the overrides when unset). With ``minimum``, `parse_args` refuses
        a value below it (each of a list's) with exit 2 and one line, as ``--seeds 0``.

        Raises:
            ConfigError: ``flag`` does not start with ``--``, ``default`` is given, a number is declared
                without ``type`` (the command line's value would stay text), or a declared value is below
                ``minimum``.
        """
        where = f"ScriptParser.add_sized_argument({flag!r})"
        if not isinstance(flag, str) or not flag.startswith("--"):
            raise ConfigError(where, "expected an option's flag, like '--trials'")
        if "default" in options:
            raise ConfigError(where, "the default is full= (and quick= with --quick), not default=")
        declared = [value for pair in (full, quick) for value in _values(pair)]
        if "type" not in options and any(isinstance(value, (int, float)) for value in declared):
            raise ConfigError(where, "a number is declared: give type= (int, float), or a value given on the command line stays text")
        low = [value for value in declared if minimum is not None and isinstance(value, (int, float)) and value < minimum]
        if low:
            raise ConfigError(where, f"full= and quick= must be >= {minimum} (minimum=), got {low[0]!r}")
        action = self.add_argument(flag, default=None, help=f"{help} (default {_shown(full)}; {_shown(quick)} with --quick)", **options)
        self._sized_defaults[action.dest] = (full, quick)
        if minimum is not None:
            self._minimums[action.dest] = (flag, minimum)
        return action

    def parse_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None) -> argparse.Namespace:  # type: ignore[override]
        """The parsed arguments, with every sized option's default and every size resolved for ``--quick``."""
        clashes = sorted(set(self._sizes) & self._dests())
        if clashes:
            raise ConfigError(f"ScriptParser.add_size({clashes[0]!r})", f"{clashes[0]!r} is also the name of an option")
        parsed = super().parse_args(args, namespace)
        choice = 1 if parsed.quick else 0
        for dest, pair in self._sized_defaults.items():
            if getattr(parsed, dest) is None:
                setattr(parsed, dest, pair[choice])
        for dest, (flag, minimum) in self._minimums.items():
            for value in _values(getattr(parsed, dest)):
                if value is not None and value < minimum:
                    self.error(f"{flag} must be >= {minimum}, got {value}")
        for name, pair in self._sizes.items():
            setattr(parsed, name, pair[choice])
        return parsed

    def _dests(self) -> set[str]:
        return {action.dest for action in self._actions}


def _values(value: Any) -> list[Any]:
    """A sized option's value as a list: a list's or tuple's items (``nargs``), else the value alone."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _shown(value: Any) -> str:
    """A declared default as the help shows it: 1,000; 0.5; 1,000 9,781 (a list); the scenario's (None)."""
    if value is None:
        return "the scenario's"
    if isinstance(value, (list, tuple)):
        return " ".join(_shown(item) for item in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def run_script(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a study script's ``main(argv)`` as a command: its exit status, or one line on stderr for an error.

    A bad scenario, data set, folder or checkpoint (`ConfigError`, `DatasetError`, `OutputError`,
    `CheckpointError`) is ``<script>: error: <message>`` and exit status 2, as the ``fedrecsim`` command
    does; any other `SimulationError` (failed runs, see `StudyResult.complete`) is ``<script>: simulation
    error: <message>`` and 1; Ctrl-C is one line and 130 (the sweep keeps its complete runs, so running
    the script again resumes). A standard output its reader closed (``script.py | head -1``) ends quietly
    with 141, as the ``fedrecsim`` command does (``fedrecsim_entry.pipe_safe``). Anything else is a bug
    and keeps its traceback. A script ends with::

        if __name__ == "__main__":
            sys.exit(run_script(main))
    """
    return pipe_safe(lambda: _status(main, argv))


def _status(main: Callable[[list[str] | None], int], argv: list[str] | None) -> int:
    """``main(argv)``'s exit status, or its error's (`run_script`), printed on stderr in one line."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "script"
    try:
        return main(argv)
    except (CheckpointError, ConfigError, DatasetError, OutputError) as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    except SimulationError as exc:
        print(f"{name}: simulation error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted; the complete runs are kept: running the script again resumes it", file=sys.stderr)
        return 130


__all__ = [
    "DataSizes",
    "ScriptParser",
    "Study",
    "StudyResult",
    "TEXT_COLUMNS",
    "columns",
    "data_sizes",
    "half_width",
    "interval_text",
    "read_study",
    "run_script",
    "typed",
]
