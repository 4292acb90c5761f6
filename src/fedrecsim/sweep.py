"""Studies: a grid of scenario overrides x seeds, run on a local process pool or an existing Dask cluster.

A study is a base scenario, the axes of its grid and a number of seeds. An axis is one key with a list of
values (``--grid``), or several keys whose lists are paired element-wise (``--zip``, all of them one
axis); the study's points are the Cartesian product of its axes, each run at the seeds ``run.seed``,
``run.seed + 1``, ... (``--seeds N``: N of them). A grid over any key reaches the runs, ``run.*`` included;
a grid over ``run.seed`` (``--grid run.seed=1,5,9``) is the list of seeds itself: each grid point runs at
exactly those seeds, they are the replicates summary.csv averages over (``run.seed`` is no grid column),
and it is refused together with ``--seeds N`` > 1 and inside a ``--zip``. A key both fixed by ``--set``
and swept, or given twice to ``--grid``, is refused rather than one of the two silently dropped.
A study can live in a file: a scenario TOML with a ``[sweep]`` table (`load_study`)::

    [sweep]
    scenario = "hua_s3_churn.toml"     # optional: the base scenario (else this file's own tables)
    set = ["run.rounds=200"]           # optional: overrides applied to the base
    seeds = 3
    grid = { "availability.p_join" = [0.005, 0.01] }
    zip = { "protocol.epsilon" = [0.1, 1.0], "protocol.k" = [1, 10] }

Every run is independent and deterministic, so the runs go to any engine: a local process pool (the
default, nothing to start) or a Dask distributed cluster at an address (``distributed``, the optional
extra ``dask``). Workers run a scenario into a private temporary folder and send the files back; the
caller writes them into the sweep folder, so a remote cluster needs no shared file system. Local workers
never outlive their sweep, killed or interrupted (`_start_worker`); a Dask scheduler is reached and the
study's protocols loaded on its workers, one's own shipped there first (`ship_protocol`), before the
sweep folder is created.

The sweep folder (``--out``):

- ``sweep.json`` -- the marker (`SWEEP_FORMAT`), the grid's parameters (``run.seed`` excepted), the number
  of points, of seeds per point and of runs, and ``study`` (`_study_identity`). A folder without it
  is never written into: an existing folder that is not a sweep of ours is refused, like `prepare_output`
  refuses a foreign result folder; a sweep folder of another study (another base scenario or other swept
  keys) is refused too (`_refuse_other_study`), while the same study extends it (more seeds, more values).
- ``runs/<hash>/`` -- one complete result folder per run, named by a hash of its resolved scenario (every
  default filled, keys sorted), written atomically (`fedrecsim.output`). Re-running a sweep skips every
  complete run, so an interrupted sweep resumes and loses nothing; ``runs/<hash>.failed.json`` records a
  failed run's error (retried on the next run of the sweep) while the other runs go on.
- ``runs/.<hash>.checkpoints/`` -- with ``checkpoint_every`` (``--checkpoint-every``, the local engine
  only: its workers write into the sweep folder), the checkpoint of a run under way (`fedrecsim.checkpoint`):
  a sweep interrupted in the middle of a long run resumes that run from its last checkpoint.
- ``sweep.csv`` -- one row per run, in plan order: ``run`` (the folder name), the grid values (one column
  per parameter), ``seed``, ``status`` (complete / failed), then the measured columns:

  - ``M.final`` for each metric ``M`` of the run: its final value, ``result.json`` ``metrics.final[M]``;
  - ``M.round_mean`` for each metric reported per round: the mean of ``M`` over the entries of
    ``metrics.rounds`` that carry it (a count such as ``participants`` is 97 at the end but 95.15 on
    average over the rounds: two different statistics, two columns);
  - ``privacy.<name>`` -- each numeric figure at the top level of ``result.json`` ``privacy`` (epsilon spent,
    ...); a nested table (ldp_implicit's ``shuffle``) is not flattened into columns;
  - ``<role>.sent_bytes`` / ``<role>.recv_bytes`` -- the role's bytes over the whole run;

  and ``rounds_completed``, ``transcript`` (the transcript fingerprint), ``wall_time_s`` and, for a failed
  run, ``error``.
- ``summary.csv`` -- one row per grid point: the grid values, ``runs`` (complete) and ``failed``, then for
  every measured column ``C`` of sweep.csv: ``C.mean`` (the mean over the point's seeds), ``C.ci95_low``
  and ``C.ci95_high`` (Student's t 95% confidence interval of that mean, clipped to the metric's range:
  ranking metrics to [0, 1], errors and byte counts to >= 0, see `column_range`; empty with one value) and
  ``C.n`` (the number of complete runs that gave a value; the mean and interval are over those n).

Only the wall-time column differs between two sweeps of the same study, on any engine.
"""

from __future__ import annotations

import copy
import csv
import fcntl
import hashlib
import importlib
import importlib.machinery
import importlib.util
import itertools
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import threading
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TextIO

from . import __version__
from .allocator import keep_freed_memory
from .checkpoint import CHECKPOINT_FILE, work_folder
from .config import toml_literal
from .errors import ConfigError, OutputError
from .output import RESULT_FORMAT, RESULT_FILES, prepare_output, replaceable_problem
from .protocols import protocol_spec
from .runner import check_checkpoint_due, check_checkpoint_interval, resume, run
from .scenario import apply_overrides, parse_override, parse_scenario, read_tables

SWEEP_FORMAT = "fedrecsim-sweep/1"
MARKER = "sweep.json"
RUNS = "runs"
_LOCK = ".lock"
_FAILED_SUFFIX = ".failed.json"
_HASH_CHARS = 16
SEED_KEY = "run.seed"  # a grid over it lists the seeds of every point (`Study.seed_list`)


@dataclass(frozen=True)
class Axis:
    """One dimension of the grid: ``keys`` take ``values[i]`` together (one key unless zipped)."""

    keys: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class Study:
    """A base scenario's raw tables, the grid's axes and the number of seeds per point."""

    base: dict[str, Any]
    axes: tuple[Axis, ...]
    seeds: int

    @property
    def parameters(self) -> tuple[str, ...]:
        """Every swept key, ``run.seed`` included."""
        return tuple(key for axis in self.axes for key in axis.keys)

    @property
    def point_parameters(self) -> tuple[str, ...]:
        """The swept keys that tell grid points apart (the grid columns of sweep.csv and summary.csv):
        every swept key but ``run.seed``, whose grid lists the seeds of every point."""
        return tuple(key for key in self.parameters if key != SEED_KEY)

    def points(self) -> list[tuple[Any, ...]]:
        """The grid's points in order (values in `point_parameters` order); `plan` refuses a point listed
        twice."""
        return _product(axis for axis in self.axes if SEED_KEY not in axis.keys)

    def seed_list(self) -> list[int] | None:
        """The seeds a grid over ``run.seed`` lists (in order), or None without one.

        Raises:
            ConfigError: ``run.seed`` zipped with other keys, or swept together with ``seeds`` > 1.
        """
        axes = [axis for axis in self.axes if SEED_KEY in axis.keys]
        if not axes:
            return None
        if len(axes[0].keys) > 1:
            raise ConfigError(SEED_KEY, "a grid over run.seed lists the seeds of every grid point; it cannot be "
                              "zipped with other keys (use --grid run.seed=..., or --seeds N)")
        if self.seeds > 1:
            raise ConfigError(SEED_KEY, f"is swept by a grid (the seeds themselves) and {self.seeds} seeds per point "
                              "are asked (--seeds / sweep.seeds, which count from run.seed): use one of the two")
        return [point[0] for point in _product(axes)]


def _product(axes: Iterable[Axis]) -> list[tuple[Any, ...]]:
    """The Cartesian product of the axes' values, flattened to one tuple per point."""
    return [tuple(value for values in combination for value in values)
            for combination in itertools.product(*(axis.values for axis in axes))]


@dataclass(frozen=True)
class PlannedRun:
    """One run of a study: its grid point, seed, resolved scenario table and the folder name it gets."""

    point: tuple[Any, ...]
    seed: int
    scenario: dict[str, Any]
    name: str


@dataclass
class SweepResult:
    """What `run_sweep` did: the folder, every run's row, and how many ran, were skipped or failed."""

    path: Path
    parameters: tuple[str, ...]
    rows: list[dict[str, Any]]
    ran: int
    skipped: int
    failed: int


def parse_values(text: str, flag: str) -> tuple[list[str], list[Any]]:
    """Split ``key.path=v1,v2,...`` into the key path and its values.

    The list is read as a TOML array (so ``{model='constant', seconds=0.0}`` is one value); when it is not
    one, it is split on commas into bare strings, as ``--set`` takes a non-literal as a string.
    """
    key, sep, raw = text.partition("=")
    keys = key.strip().split(".")
    if not sep or not all(keys) or len(keys) < 2:
        raise ConfigError(flag, f"expected table.key=v1,v2,..., got {text!r}")
    raw = raw.strip()
    if not raw:
        raise ConfigError(f"{flag} {'.'.join(keys)}", "expected a comma-separated list of values after =")
    try:
        values = tomllib.loads(f"values = [{raw}]")["values"]
    except tomllib.TOMLDecodeError:
        values = [part.strip() for part in raw.split(",")]
    if not values or any(value == "" for value in values):
        raise ConfigError(f"{flag} {'.'.join(keys)}", f"expected a comma-separated list of values, got {raw!r}")
    return keys, values


def make_axes(grid: Mapping[str, Sequence[Any]], zipped: Mapping[str, Sequence[Any]], source: str) -> tuple[Axis, ...]:
    """One axis per ``grid`` key, then one axis pairing every ``zipped`` key element-wise.

    Args:
        source: how the user wrote the lists (``--grid``/``--zip`` or ``sweep.grid``/``sweep.zip``),
            named in errors.
    """
    grid_name, zip_name = ("sweep.grid", "sweep.zip") if source == "file" else ("--grid", "--zip")
    axes = []
    for key, values in grid.items():
        _check_values(values, f"{grid_name} {key}")
        axes.append(Axis((key,), tuple((value,) for value in values)))
    if zipped:
        lengths = {key: len(values) for key, values in zipped.items()}
        for key, values in zipped.items():
            _check_values(values, f"{zip_name} {key}")
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{key} has {length}" for key, length in lengths.items())
            raise ConfigError(zip_name, f"zipped lists must have the same length: {shown}")
        axes.append(Axis(tuple(zipped), tuple(zip(*zipped.values()))))
    keys = [key for axis in axes for key in axis.keys]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ConfigError(f"{grid_name} {repeated[0]}", f"is swept twice (in {grid_name} and {zip_name})")
    return tuple(axes)


def _check_values(values: Any, where: str) -> None:
    if not isinstance(values, list) or not values:
        raise ConfigError(where, "expected a non-empty list of values")


def load_study(
    path: str | Path,
    *,
    grid: Iterable[str] = (),
    zipped: Iterable[str] = (),
    seeds: int | None = None,
    overrides: Iterable[str] = (),
) -> Study:
    """A study from a scenario or study file plus command-line grids (``key.path=v1,v2``), zips and seeds.

    A ``--grid`` or ``--zip`` on a key the file already sweeps (or fixes in ``sweep.set``) replaces the
    file's list (value); a ``--zip`` replaces the file's whole zip. ``seeds`` defaults to the file's
    ``sweep.seeds``, else 1. ``overrides`` (``--set``) apply after the file's ``sweep.set``.

    Refused, because one of the two would be silently lost: a key given twice to ``--grid`` (or twice to
    ``--zip``), a ``--set`` key that a grid or zip also sweeps, a ``sweep.set`` key the file's own grid or
    zip sweeps. A grid over ``run.seed`` is the list of seeds (see `plan`).

    Raises:
        ConfigError: naming the ``sweep.*`` key or the flag that is wrong.
    """
    path = Path(path)
    tables = read_tables(path)
    table = tables.pop("sweep", {})
    if not isinstance(table, dict):
        raise ConfigError("sweep", "expected a table")
    unknown = sorted(set(table) - {"scenario", "set", "seeds", "grid", "zip"})
    if unknown:
        raise ConfigError(f"sweep.{unknown[0]}", "unknown key; allowed: scenario, set, seeds, grid, zip")
    if "scenario" in table:
        if not isinstance(table["scenario"], str):
            raise ConfigError("sweep.scenario", "expected the path of a scenario file")
        if tables:
            raise ConfigError(
                "sweep.scenario", f"a study naming its scenario file holds only [sweep]; move [{sorted(tables)[0]}] into sweep.set"
            )
        tables = read_tables(path.parent / table["scenario"])
    file_set = table.get("set", [])
    if not isinstance(file_set, list) or not all(isinstance(item, str) for item in file_set):
        raise ConfigError("sweep.set", 'expected a list of "key.path=value" strings')
    overrides = list(overrides)
    apply_overrides(tables, [*file_set, *overrides])

    file_grid = _flatten(table.get("grid", {}), "sweep.grid")
    file_zip = _flatten(table.get("zip", {}), "sweep.zip")
    flag_grid = _flag_lists(grid, "--grid")
    flag_zip = _flag_lists(zipped, "--zip")
    _refuse_set_and_swept(file_set, {**file_grid, **file_zip}, "sweep.set", "the file's [sweep] grid or zip")
    _refuse_set_and_swept(overrides, {**file_grid, **file_zip, **flag_grid, **flag_zip}, "--set", "a grid or zip")
    if flag_zip:
        file_zip = {}
    file_grid = {key: values for key, values in file_grid.items() if key not in flag_grid and key not in flag_zip}
    axes = make_axes(file_grid, file_zip, "file") + make_axes(flag_grid, flag_zip, "flags")
    keys = [key for axis in axes for key in axis.keys]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ConfigError(f"--grid {repeated[0]}", "is swept twice")

    if seeds is None:
        seeds = table.get("seeds", 1)
        if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
            raise ConfigError("sweep.seeds", f"expected a whole number >= 1, got {seeds!r}")
    elif seeds < 1:
        raise ConfigError("--seeds", f"expected a whole number >= 1, got {seeds}")
    return Study(tables, axes, seeds)


def _flag_lists(texts: Iterable[str], flag: str) -> dict[str, list[Any]]:
    """Each ``--grid`` / ``--zip`` key with its list; a key given twice is refused (which list was meant?)."""
    lists: dict[str, list[Any]] = {}
    for text in texts:
        keys, values = parse_values(text, flag)
        key = ".".join(keys)
        if key in lists:
            raise ConfigError(f"{flag} {key}", f"is given twice; list every value once: {flag} {key}=v1,v2,...")
        lists[key] = values
    return lists


def _refuse_set_and_swept(overrides: Iterable[str], swept: Mapping[str, Any], flag: str, sweeps: str) -> None:
    """A key both fixed (``--set`` / ``sweep.set``) and swept would silently take the swept values: refused."""
    for text in overrides:
        key = ".".join(parse_override(text)[0])
        if key in swept:
            raise ConfigError(f"{flag} {key}", f"is also swept by {sweeps}; set it or sweep it, not both")


def _flatten(table: Any, where: str) -> dict[str, list[Any]]:
    """``{"a.b" = [..]}`` and ``[sweep.grid.a] b = [..]`` both as ``{"a.b": [..]}``."""
    if not isinstance(table, dict):
        raise ConfigError(where, "expected a table of key paths to lists of values")
    flat: dict[str, list[Any]] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": values for inner, values in _flatten(value, f"{where}.{key}").items()})
        else:
            flat[key] = value
    return flat


def plan(study: Study) -> list[PlannedRun]:
    """Every run of the study, point by point and seed by seed within a point, validated (a bad grid value
    raises its ConfigError before anything runs).

    A point's seeds are ``run.seed``, ``run.seed + 1``, ... (``study.seeds`` of them), or, with a grid over
    ``run.seed``, exactly the seeds that grid lists (then ``study.seeds`` must be 1: `Study.seed_list`).
    Every grid value, ``run.*`` included, is in the run's resolved scenario, hence in its folder name.
    """
    seeds = study.seed_list()
    if seeds is None:
        run_table = study.base.get("run")
        base_seed = run_table.get("seed", 0) if isinstance(run_table, dict) else 0
        if not isinstance(base_seed, int) or isinstance(base_seed, bool) or base_seed < 0:
            raise ConfigError("run.seed", f"expected a whole number >= 0, got {base_seed!r}")
        seeds = [base_seed + offset for offset in range(study.seeds)]
    _refuse_repeated_values(study.axes)
    planned: list[PlannedRun] = []
    names: dict[str, PlannedRun] = {}
    for point in study.points():
        for seed in seeds:
            tables = copy.deepcopy(study.base)
            for key, value in zip(study.point_parameters, point):
                _set(tables, key, copy.deepcopy(value))
            _set(tables, SEED_KEY, seed)
            resolved = parse_scenario(tables).to_table()
            run = PlannedRun(point, seed, resolved, run_name(resolved))
            if run.name in names:
                raise _same_run(study, names[run.name], run)
            names[run.name] = run
            planned.append(run)
    return planned


def _listed(value: Any) -> str:
    """A grid value as a user wrote it, NaN and all, for comparing the values of one axis."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def _refuse_repeated_values(axes: Iterable[Axis]) -> None:
    """A value listed twice on an axis would be one grid point, run once, where the user asked for two (a
    typo like ``--grid protocol.d=4,4`` or ``--grid run.seed=1,1``): refused, naming the key.

    Raises:
        ConfigError: naming the axis' key (its keys, zipped) and the value.
    """
    for axis in axes:
        seen: set[str] = set()
        for values in axis.values:
            identity = _listed(values)
            if identity in seen:
                shown = toml_literal(values[0]) if len(values) == 1 else f"({', '.join(map(toml_literal, values))})"
                raise ConfigError(" + ".join(axis.keys), f"{shown} is listed twice; list each value once")
            seen.add(identity)


def _same_run(study: Study, first: PlannedRun, second: PlannedRun) -> ConfigError:
    """Two grid points whose values differ as written but give the same scenario once read (``1`` and
    ``1.0`` of a float key): one run would stand for two points. The error names the key that differs."""
    differing = [
        (key, a, b) for key, a, b in zip(study.point_parameters, first.point, second.point) if _listed(a) != _listed(b)
    ]
    key, a, b = differing[0] if differing else (study.point_parameters[0], first.point[0], second.point[0])
    return ConfigError(key, f"the values {toml_literal(a)} and {toml_literal(b)} are the same scenario once read; list each value once")


def _set(tables: dict[str, Any], key_path: str, value: Any) -> None:
    keys = key_path.split(".")
    target = tables
    for position, key in enumerate(keys[:-1]):
        node = target.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(".".join(keys[: position + 1]), "is a value, not a table; cannot sweep a key in it")
        target = node
    target[keys[-1]] = value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def run_name(scenario_table: Mapping[str, Any]) -> str:
    """The folder name of a run: a hash of its resolved scenario (keys sorted, every default filled)."""
    return hashlib.sha256(_canonical(scenario_table).encode()).hexdigest()[:_HASH_CHARS]


# -- the engines ------------------------------------------------------------------------------------


def execute(scenario_table: dict[str, Any], out: str | None = None, checkpoint_every: int = 0) -> dict[str, Any]:
    """Run one scenario on a worker: ``{"files": {name: bytes}}``, or ``{"error": "Type: message"}``.

    With ``out`` (a run folder of the sweep's, on a worker that shares its file system), the run goes
    there itself, saving a checkpoint every ``checkpoint_every`` rounds beside it -- or resumes from the
    checkpoint an interrupted sweep left there -- and the outcome is ``{"stored": True}``.

    Any exception of the run is its recorded failure -- one run's bug must not stop a study -- and is
    reported with its type in ``sweep.csv``, the failure record and the summary's count.
    """
    if out is not None:
        folder = Path(out)
        try:
            if (work_folder(folder) / CHECKPOINT_FILE).exists():
                resume(folder)
            else:
                run(parse_scenario(scenario_table), out=folder, checkpoint_every=checkpoint_every)
        except Exception as exc:  # noqa: BLE001 -- recorded, see the docstring
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"stored": True}
    with tempfile.TemporaryDirectory(prefix="fedrecsim-sweep-") as scratch:
        folder = Path(scratch) / "run"
        try:
            run(parse_scenario(scenario_table), out=folder)
        except Exception as exc:  # noqa: BLE001 -- recorded, see the docstring
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"files": {entry.name: entry.read_bytes() for entry in sorted(folder.iterdir())}}


Submit = Callable[[PlannedRun], Any]

def _start_worker(lifeline: Connection) -> None:
    """A local pool worker's initializer: it dies with the sweep, leaves Ctrl-C to it, and keeps freed memory.

    No worker may outlive its sweep (a straggler would go on computing and writing runs). The lifeline is
    a pipe whose only writer is the sweep: a daemon thread of the worker reads it and kills the worker
    when it closes -- when the sweep dies, however (the kernel closes its end, even after SIGKILL), and
    when the sweep is interrupted and closes it on purpose, so that a run under way is not waited for.
    It works on every platform and start method. A parent-death signal (Linux ``PR_SET_PDEATHSIG``) would
    not: a forkserver worker's parent is the forkserver, which lives on while any of its workers holds
    its "alive" pipe, so it never dies first.

    SIGINT is ignored: a Ctrl-C at a terminal reaches the whole process group, and the sweep decides.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_lifeline, args=(lifeline,), name="fedrecsim-lifeline", daemon=True).start()
    keep_freed_memory()


def _watch_lifeline(lifeline: Connection) -> None:
    """Block until the sweep's end of the lifeline closes (nothing is ever sent on it), then die at once."""
    try:
        lifeline.recv_bytes()
    except (EOFError, OSError):
        pass
    os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def local_pool(
    workers: int, runs: Path | None = None, checkpoint_every: int = 0, task: Callable[[dict[str, Any]], dict[str, Any]] = execute,
) -> Iterator[tuple[Submit, Callable[[set[Any]], set[Any]], int]]:
    """A process pool of ``workers``: (submit, wait for any, slots). Forkserver where there is one; each
    worker dies with the sweep and keeps the memory it frees mapped (`_start_worker`).

    Leaving the block by an exception (Ctrl-C included) kills the workers at once: the runs under way are
    lost (a run is written only when complete), the pool is shut down before the exception goes on, and
    no worker is left behind.

    With ``checkpoint_every``, each run goes straight into its folder in ``runs`` with its checkpoints
    beside it (`execute`). ``task`` (a module-level function, default `execute`) is what a worker calls on
    a submitted entry's ``scenario`` table: another job of independent pieces (an audit's trials,
    `fedrecsim.audit.runner`) runs on the same engine."""
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    lifeline, keeper = context.Pipe(duplex=False)
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker, initargs=(lifeline,)) as pool:

            def submit(entry: PlannedRun) -> Future[dict[str, Any]]:
                if checkpoint_every and runs is not None:
                    return pool.submit(execute, entry.scenario, str(runs / entry.name), checkpoint_every)
                return pool.submit(task, entry.scenario)

            def wait_any(pending: set[Any]) -> set[Any]:
                return wait(pending, return_when=FIRST_COMPLETED)[0]

            try:
                yield submit, wait_any, workers
            except BaseException:
                keeper.close()
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    finally:
        keeper.close()
        lifeline.close()


@contextmanager
def dask_cluster(
    address: str, protocols: Iterable[str] = (), timeout_s: float = 10.0,
    task: Callable[[dict[str, Any]], dict[str, Any]] = execute,
) -> Iterator[tuple[Submit, Callable[[set[Any]], set[Any]], int]]:
    """An existing Dask distributed cluster at ``address``: (submit, wait for any, slots).

    Before anything is submitted, the code of each protocol of one's own (``package.module:ATTRIBUTE``)
    is shipped to the workers (`ship_protocol`), and every worker must load every protocol of
    ``protocols``: one that cannot is a ConfigError naming the protocol, the worker and its error.
    ``task`` is what a worker calls on a submitted entry's ``scenario`` table, as for `local_pool`.

    Raises:
        ConfigError: ``distributed`` is missing, no scheduler answers at ``address`` within ``timeout_s``,
            or a worker cannot load a protocol.
    """
    try:
        import distributed
    except ImportError:
        raise ConfigError("--dask", 'needs the optional extra: pip install "fedrecsim[dask]"') from None
    try:
        client = distributed.Client(address, timeout=f"{timeout_s}s")
    except (OSError, ValueError) as exc:
        raise ConfigError("--dask", f"cannot reach a Dask scheduler at {address}: {exc}") from None
    with client:
        for name in sorted(set(protocols)):
            ship_protocol(client, name)
        finished = distributed.as_completed()

        def submit(entry: PlannedRun) -> Any:
            future = client.submit(task, entry.scenario, pure=False)
            finished.add(future)
            return future

        def wait_any(pending: set[Any]) -> set[Any]:
            return set(finished.next_batch(block=True)) & pending

        yield submit, wait_any, max(sum(client.nthreads().values()), 1)


def ship_protocol(client: Any, name: str) -> None:
    """Make the protocol ``name`` loadable on every worker of a Dask ``client``, or say why it is not.

    A protocol of one's own, ``package.module:ATTRIBUTE``, lives in code the workers may not have: its
    top-level module or package (unless it is installed in site-packages, or is fedrecsim) is zipped and
    uploaded (``Client.upload_file``, named by its content), put first on each worker's path, and
    imported afresh there, so a worker that ran an older version of it runs this one. A built-in or
    installed protocol must be installed on the workers like fedrecsim itself. Then every worker loads
    the protocol (`protocol_problem`).

    Raises:
        ConfigError: naming ``run.protocol``, the protocol, the worker and the worker's error; or naming
            ``--dask`` when the workers cannot run the check at all (no fedrecsim there, ...).
    """
    top = name.partition(":")[0].split(".")[0] if ":" in name else ""
    spec = importlib.util.find_spec(top) if top and top != __package__ else None
    try:
        if spec is not None and spec.origin not in (None, "built-in", "frozen") and not _installed(spec):
            with tempfile.TemporaryDirectory(prefix="fedrecsim-ship-") as scratch:
                bundle = _bundle(spec, Path(scratch))
                client.upload_file(str(bundle), load=False)
            problems = client.run(_load_shipped, bundle.name, top, name)
        else:
            problems = client.run(protocol_problem, name)
    except Exception as exc:  # noqa: BLE001 -- the workers could not even run the check; say why, in one line
        raise ConfigError(
            "--dask", f"the workers could not check the protocol {name!r} (is fedrecsim installed there?): "
            f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        ) from None
    for worker, problem in sorted(problems.items()):
        if problem is not None:
            raise ConfigError(
                "run.protocol", f"{name!r} cannot be loaded on the Dask worker {worker}: {' '.join(problem.split())} "
                "(a protocol of one's own is shipped to the workers; what else it imports must be installed there)"
            )


def _installed(spec: importlib.machinery.ModuleSpec) -> bool:
    """Whether a module comes from site-packages (installed on the workers like fedrecsim, not shipped)."""
    return any(part in ("site-packages", "dist-packages") for part in Path(spec.origin or "").parts)


def _bundle(spec: importlib.machinery.ModuleSpec, scratch: Path) -> Path:
    """The module's .py, or its package's files, in a zip named ``<module>-<digest of the content>.zip``."""
    origin = Path(spec.origin or "")
    if spec.submodule_search_locations:
        files = sorted(file for file in origin.parent.rglob("*") if file.is_file() and "__pycache__" not in file.parts)
        members = [(file, Path(spec.name) / file.relative_to(origin.parent)) for file in files]
    else:
        members = [(origin, Path(f"{spec.name}.py"))]
    digest = hashlib.sha256()
    for file, member in members:
        digest.update(f"{member.as_posix()}\0{file.stat().st_size}\0".encode())
        digest.update(file.read_bytes())
    archive = scratch / f"{spec.name}-{digest.hexdigest()[:_HASH_CHARS]}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for file, member in members:
            bundle.write(file, member.as_posix())
    return archive


def _load_shipped(bundle: str, top: str, name: str, dask_worker: Any) -> str | None:
    """On a Dask worker: put the uploaded zip first on the path, forget any earlier import of ``top`` and
    load the protocol from the zip (`protocol_problem`)."""
    path = os.path.join(dask_worker.local_directory, bundle)
    if path in sys.path:
        sys.path.remove(path)
    sys.path.insert(0, path)
    for module in [module for module in sys.modules if module == top or module.startswith(f"{top}.")]:
        del sys.modules[module]
    importlib.invalidate_caches()
    return protocol_problem(name)


def protocol_problem(name: str) -> str | None:
    """Why this process cannot load the protocol ``name`` (``"Type: message"``), or None when it can."""
    try:
        protocol_spec(name)
    except Exception as exc:  # noqa: BLE001 -- whatever stops the import is what the user must read
        return f"{type(exc).__name__}: {exc}"
    return None


# -- the sweep folder -------------------------------------------------------------------------------


def open_sweep_folder(path: Path) -> Path:
    """Check (or create) a sweep folder; OutputError for anything that is not one of ours."""
    path = Path(os.path.abspath(path))
    if os.path.lexists(path):
        problem = sweep_folder_problem(path)
        if problem is not None:
            raise OutputError(path, f"{problem}; choose a new location (a sweep writes only into its own folder)")
    else:
        try:
            os.makedirs(path)
        except OSError as exc:
            raise OutputError(exc.filename or path, f"cannot create the sweep folder: {exc.strerror}") from None
    return path


def sweep_folder_problem(path: Path) -> str | None:
    """Why ``path`` is not a fedrecsim sweep folder (None: it is)."""
    if path.is_symlink() or not path.is_dir():
        return "exists and is not a folder"
    document = _read_json(path / MARKER)
    if not isinstance(document, dict) or document.get("format") != SWEEP_FORMAT:
        return f"exists and is not a fedrecsim sweep folder (no {MARKER} with format {SWEEP_FORMAT!r})"
    return None


def check_sweep_folder(study: Study, out: str | Path) -> None:
    """Refuse ``out`` as `run_sweep` would before it runs anything, without creating or touching it: an
    existing folder that is not a sweep of ours, or the sweep folder of another study.

    Raises:
        OutputError: naming the folder and the reason.
    """
    path = Path(os.path.abspath(out))
    if os.path.lexists(path):
        open_sweep_folder(path)
        _refuse_other_study(path, _study_identity(study))


def _study_identity(study: Study) -> dict[str, Any]:
    """What makes two studies one study, as sweep.json records it (``study``): ``scenario``, the base
    scenario as written (after ``--set`` and ``sweep.set``) flattened to ``{key.path: value}``, without the
    swept keys and without ``run.seed``; and ``swept``, the set of swept keys (``run.seed`` excepted).

    The values a grid lists and the seeds are not part of it: more seeds, more (or other) values of the
    same keys and a resume all extend the same study. Anything else changes what a run of the folder
    means, so it is another study (`_refuse_other_study`).
    """
    swept = set(study.parameters) | {SEED_KEY}
    scenario = {
        key: value for key, value in _key_paths(study.base, "").items()
        if not any(key == name or key.startswith(f"{name}.") for name in swept)
    }
    # Through JSON, so that it compares equal to what sweep.json gives back (a TOML date becomes its text).
    return json.loads(json.dumps({"scenario": scenario, "swept": sorted(study.point_parameters)}, default=str))


def _key_paths(table: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """A table's leaves by key path, ``{"run.rounds": 5}``; an empty table has none."""
    leaves: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            leaves.update(_key_paths(value, f"{prefix}{key}."))
        else:
            leaves[f"{prefix}{key}"] = value
    return leaves


def _refuse_other_study(path: Path, identity: Mapping[str, Any]) -> None:
    """Refuse to write a study into the sweep folder ``path`` that holds another study (`_study_identity`):
    its sweep.csv and summary.csv would be replaced and its runs left out of them, as if orphaned.

    A folder written before sweep.json recorded its study is checked on its swept keys alone.

    Raises:
        OutputError: naming what differs (up to three keys), before the folder is touched.
    """
    document = _read_json(path / MARKER)
    if not isinstance(document, dict):
        return  # a folder this sweep has just made (`open_sweep_folder` refuses any other without a marker)
    recorded = document.get("study")
    if isinstance(recorded, dict):
        there_swept, there = recorded.get("swept", []), recorded.get("scenario", {})
    else:
        there_swept, there = document.get("parameters", []), None
    differences = []
    if sorted(there_swept) != identity["swept"]:
        differences.append(f"it sweeps {_keys(there_swept)}, this study {_keys(identity['swept'])}")
    if isinstance(there, dict):
        here = identity["scenario"]
        for key in sorted(set(there) | set(here)):
            if _listed(there.get(key)) != _listed(here.get(key)):
                differences.append(f"{key} is {_shown(there, key)} in it, {_shown(here, key)} in this study")
    if differences:
        more = f" (and {len(differences) - 3} more)" if len(differences) > 3 else ""
        raise OutputError(path, (
            f"holds another study: {'; '.join(differences[:3])}{more}. Writing it here would replace the folder's "
            "sweep.csv and summary.csv and leave its runs out of them: give this study a new folder (--out). The "
            "same scenario and swept keys extend a sweep (more seeds, more values, a resume)"
        ))


def _keys(keys: Sequence[str]) -> str:
    return ", ".join(sorted(keys)) or "none"


def _shown(scenario: Mapping[str, Any], key: str) -> str:
    return _listed(scenario[key]) if key in scenario else "not set"


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


@contextmanager
def _exclusive(folder: Path) -> Iterator[None]:
    """Hold the sweep folder's lock: two sweeps writing into one folder would race on its files."""
    with open(folder / _LOCK, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(folder, "another sweep is writing into this folder") from None
        yield


def _write_atomically(path: Path, text: str) -> None:
    """Write ``path`` (a file of ours) through a hidden sibling and one rename: never half a file."""
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    with open(partial, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    os.replace(partial, path)


_STAGING = re.compile(r"^\..+\.partial-(?P<pid>[0-9]+)-[0-9]+$")


def _remove_stale_staging(runs: Path) -> None:
    """Remove the staging folders dead processes left in ``runs/`` (a killed sweep, or a worker of one).

    A staging folder is hidden and named by the process that made it (`fedrecsim.output`); it is removed
    only when that process is gone and the folder holds nothing but result files (ours). One of a process
    still running -- a straggler of a killed sweep -- is left to it: it commits or abandons it itself. This
    sweep's own process has none yet (the folder's lock admits one sweep at a time).
    """
    for entry in sorted(runs.iterdir()):
        match = _STAGING.match(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir() or _running(int(match["pid"])):
            continue
        try:
            files = list(entry.iterdir())
            if all(item.name in RESULT_FILES and item.is_file() for item in files):
                for item in files:
                    item.unlink()
                entry.rmdir()
        except OSError:
            continue  # it changed while being removed (not stale after all): the next sweep looks again


def _running(pid: int) -> bool:
    """Whether another process with this id runs (one of another user's counts as running)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_complete(folder: Path) -> bool:
    return os.path.lexists(folder) and replaceable_problem(folder) is None


def _store(runs: Path, name: str, files: Mapping[str, bytes]) -> None:
    """Write a run's files into ``runs/<name>`` atomically (staging folder, one rename).

    A run found complete already -- stored meanwhile by a straggler of an earlier, killed sweep: the same
    scenario, so the same result -- is kept as it is, never replaced.
    """
    if is_complete(runs / name):
        return
    target = prepare_output(runs / name)
    try:
        for file_name, content in files.items():
            if file_name not in RESULT_FILES:
                raise OutputError(runs / name, f"a worker sent {file_name!r}, which is no result file")
            (target.staging / file_name).write_bytes(content)
        target.commit()
    except OutputError:
        target.abandon()
        if not is_complete(runs / name):
            raise
    except BaseException:
        target.abandon()
        raise


# -- running ----------------------------------------------------------------------------------------


def run_sweep(
    study: Study,
    out: str | Path,
    *,
    workers: int | None = None,
    dask: str | None = None,
    progress: bool | TextIO | None = None,
    checkpoint_every: int = 0,
    dask_timeout_s: float = 10.0,
) -> SweepResult:
    """Run every missing run of ``study`` into the sweep folder ``out``; write sweep.csv and summary.csv.

    Everything that can be checked is checked before the sweep folder is created or touched: the plan,
    the options, and with ``dask`` the scheduler and the protocols on its workers (`dask_cluster`).

    Args:
        workers: local processes (default: the cores). Ignored with ``dask``.
        dask: the address of an existing Dask scheduler (``tcp://host:8786``) to run on instead.
        progress: True draws a progress bar on stderr; a stream draws it there.
        checkpoint_every: each run saves a checkpoint every this many rounds, and a run an interrupted
            sweep left under way resumes from its last one (local engine only; resumable protocols only).
        dask_timeout_s: how long to wait for the Dask scheduler to answer.

    Raises:
        ConfigError: a grid value or key is invalid, checkpoints are asked of Dask or of a protocol that
        cannot resume, the Dask scheduler does not answer or its workers cannot load a protocol (before
        anything runs). OutputError: ``out`` exists and is not a sweep folder, or cannot be written.
        KeyboardInterrupt: the sweep was interrupted; the runs under way are stopped and lost, the complete
        ones kept (running the sweep again resumes it), sweep.csv and summary.csv are not written.
    """
    planned = plan(study)
    if workers is not None and workers < 1:
        raise ConfigError("--workers", f"expected a whole number >= 1, got {workers}")
    _check_checkpoints(planned, dask, checkpoint_every)
    path = Path(os.path.abspath(out))
    identity = _study_identity(study)
    check_sweep_folder(study, path)  # before a cluster is asked
    protocols = {entry.scenario["run"]["protocol"] for entry in planned}
    with dask_cluster(dask, protocols, dask_timeout_s) if dask is not None else nullcontext(None) as cluster:
        folder = open_sweep_folder(path)
        with _exclusive(folder):
            _refuse_other_study(folder, identity)  # another sweep may have written the folder meanwhile
            runs = folder / RUNS
            runs.mkdir(exist_ok=True)
            _remove_stale_staging(runs)
            _write_atomically(folder / MARKER, json.dumps({
                "format": SWEEP_FORMAT,
                "fedrecsim_version": __version__,
                "parameters": list(study.point_parameters),
                "points": len(study.points()),
                "seeds": len(planned) // max(len(study.points()), 1),
                "runs": len(planned),
                "study": identity,
            }, indent=2) + "\n")
            for name in sorted({entry.name for entry in planned}):
                if os.path.lexists(runs / name) and not is_complete(runs / name):
                    raise OutputError(runs / name, "exists and is not a complete fedrecsim result; move it away to re-run it")
            missing = {entry.name: entry for entry in planned if not is_complete(runs / entry.name)}
            bar = _bar(progress)
            skipped = len({entry.name for entry in planned}) - len(missing)
            failures = 0
            if missing:
                engine = nullcontext(cluster) if cluster is not None else local_pool(workers or os.cpu_count() or 1, runs, checkpoint_every)
                with engine as entered:
                    failures = _run_missing(entered, runs, list(missing.values()), bar, skipped)
            rows = [_row(runs, entry, study.point_parameters) for entry in planned]
            _write_csv(folder / "sweep.csv", rows)
            _write_csv(folder / "summary.csv", summarize(rows, study.point_parameters))
    return SweepResult(folder, study.point_parameters, rows, len(missing), skipped, failures)


def _check_checkpoints(planned: list[PlannedRun], dask: str | None, every: int) -> None:
    if every and dask is not None:
        raise ConfigError("--checkpoint-every", "needs the local engine: Dask workers do not share the sweep folder")
    check_checkpoint_interval(every, (entry.scenario["run"]["protocol"] for entry in planned))
    check_checkpoint_due(every, max((entry.scenario["run"]["rounds"] for entry in planned), default=0))


def _run_missing(
    engine: tuple[Submit, Callable[[set[Any]], set[Any]], int], runs: Path, missing: list[PlannedRun],
    bar: SweepProgress | None, done: int,
) -> int:
    failures = 0
    if bar is not None:
        bar.start(done + len(missing), done)
    submit, wait_any, slots = engine
    pending = {submit(entry): entry for entry in missing}
    try:
        while pending:
            if bar is not None:
                bar.draw(running=min(slots, len(pending)))
            for future in wait_any(set(pending)):
                entry = pending.pop(future)
                outcome = _outcome(future)
                failed_record = runs / f"{entry.name}{_FAILED_SUFFIX}"
                # An error beside a complete folder: a straggler of a killed sweep stored this run first.
                failed = "error" in outcome and not is_complete(runs / entry.name)
                if failed:
                    failures += 1
                    _write_atomically(failed_record, json.dumps(
                        {"error": outcome["error"], "scenario": entry.scenario}, indent=2, allow_nan=False
                    ) + "\n")
                elif "files" in outcome:
                    _store(runs, entry.name, outcome["files"])
                    if failed_record.exists():
                        failed_record.unlink()
                if bar is not None:
                    bar.finished(failed=failed)
    finally:
        if bar is not None:
            bar.draw(running=0, final=True)
    return failures


#: A run's error when its local worker process died (`_outcome`): what can kill one, and the usual cause
#: of a pool that dies at once -- a script that starts a study at its top level, which every worker, importing
#: the script again as Python's spawn and forkserver start methods do, starts anew.
WORKER_DIED = ("BrokenProcessPool: a worker process died (killed, out of memory, or failed to start: a script that runs a "
               'study at its top level must do it under if __name__ == "__main__":, since each worker imports the script again)')


def _outcome(future: Any) -> dict[str, Any]:
    """A finished future's outcome; an engine's own failure (a worker that died) is the run's error."""
    try:
        return future.result()
    except BrokenProcessPool:
        return {"error": WORKER_DIED}
    except Exception as exc:  # noqa: BLE001 -- a lost worker fails its run, recorded like any failure
        return {"error": f"{type(exc).__name__}: {exc}"}


# -- tables -----------------------------------------------------------------------------------------


def _row(runs: Path, entry: PlannedRun, parameters: Sequence[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"run": entry.name}
    row.update({key: _cell(value) for key, value in zip(parameters, entry.point)})
    row["seed"] = entry.seed
    document = _read_json(runs / entry.name / "result.json") if is_complete(runs / entry.name) else None
    if document is None:
        failure = _read_json(runs / f"{entry.name}{_FAILED_SUFFIX}")
        row["status"] = "failed"
        row["error"] = failure["error"] if isinstance(failure, dict) else "not run"
        return row
    row["status"] = "complete"
    row.update(metric_columns(document["metrics"]))
    row.update({f"privacy.{name}": value for name, value in document["privacy"].items() if _is_number(value)})
    for role, counters in document["ledger"]["roles"].items():
        row[f"{role}.sent_bytes"] = counters["sent_bytes"]
        row[f"{role}.recv_bytes"] = counters["recv_bytes"]
    row["rounds_completed"] = document["rounds_completed"]
    row["transcript"] = _fingerprint(document)
    row["wall_time_s"] = document["wall_time_s"]
    return row


FINAL = ".final"
ROUND_MEAN = ".round_mean"
_BYTE_COLUMNS = (".sent_bytes", ".recv_bytes")


def metric_columns(metrics: Mapping[str, Any]) -> dict[str, float]:
    """A run's ``result.json`` ``metrics`` as sweep.csv columns: ``M.final`` and ``M.round_mean``.

    ``M.final`` is ``metrics.final[M]``; ``M.round_mean`` is the mean of ``M`` over the entries of
    ``metrics.rounds`` that carry it, present only for a metric reported per round. Each metric's columns
    are adjacent (final first), in the order of ``metrics.final``, then the metrics reported only per round.
    """
    per_round: dict[str, list[float]] = {}
    for entry in metrics["rounds"]:
        for name, value in entry.items():
            if name != "round" and _is_number(value):
                per_round.setdefault(name, []).append(float(value))
    columns: dict[str, float] = {}
    for name in [*metrics["final"], *(name for name in per_round if name not in metrics["final"])]:
        if name in metrics["final"]:
            columns[f"{name}{FINAL}"] = metrics["final"][name]
        if name in per_round:
            columns[f"{name}{ROUND_MEAN}"] = math.fsum(per_round[name]) / len(per_round[name])
    return columns


def column_range(column: str) -> tuple[float, float]:
    """The support of a measured sweep.csv column: its metric's (`fedrecsim.metric_reference.value_range`,
    the name without ``.final`` / ``.round_mean``), ``[0, inf)`` for a byte count, else unbounded."""
    # Imported here: the reference is a module of its own (``python -m fedrecsim.metric_reference``), which
    # the package (through `fedrecsim.study`) must not have imported before it runs as __main__.
    from .metric_reference import value_range

    if column.endswith(_BYTE_COLUMNS):
        return 0.0, math.inf
    for suffix in (FINAL, ROUND_MEAN):
        if column.endswith(suffix):
            return value_range(column[: -len(suffix)])
    return value_range(column)


def distinct_errors(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """Each distinct error of the failed rows (its first line) with the number of runs that gave it, most
    frequent first, ties in the order first seen: what the console shows of a sweep's failures."""
    counts: dict[str, int] = {}
    for row in rows:
        if row["status"] == "failed":
            first = str(row.get("error") or "").strip().splitlines()[0:1] or ["(no error recorded)"]
            counts[first[0]] = counts.get(first[0], 0) + 1
    return sorted(counts.items(), key=lambda item: -item[1])


def _fingerprint(document: Mapping[str, Any]) -> str:
    """The transcript hash under whichever ``transcript_<algorithm>`` key this result.json carries."""
    return next(str(value) for key, value in document.items() if key.startswith("transcript_"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value: Any) -> Any:
    """A grid value as a CSV cell: numbers and strings as they are, anything else as compact JSON."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return value
    return _canonical(value)


#: Columns of sweep.csv that are not a measured quantity (not summarized over seeds).
_NOT_MEASURED = frozenset({"run", "seed", "status", "error", "transcript", "wall_time_s", "rounds_completed"})


def measured_columns(rows: Sequence[Mapping[str, Any]], parameters: Sequence[str]) -> list[str]:
    """The metric, privacy and byte columns of sweep.csv rows, in their first-seen order."""
    names: list[str] = []
    for row in rows:
        names.extend(name for name in row if name not in names and name not in _NOT_MEASURED and name not in parameters)
    return names


def summarize(rows: Sequence[Mapping[str, Any]], parameters: Sequence[str]) -> list[dict[str, Any]]:
    """Per grid point (in order): runs, failures, and for each measured column C ``C.mean``,
    ``C.ci95_low``, ``C.ci95_high`` and ``C.n``.

    ``C.n`` is the number of complete runs that gave C a value, and the mean and interval are over those.
    The interval is Student's t 95% interval of the mean, clipped to C's range (`column_range`): it never
    leaves the values the quantity can take. With n = 1 the interval is left empty; with identical values
    it is the value itself; with n = 0 every cell is empty but ``C.n`` (0).
    """
    from scipy import stats

    measured = measured_columns(rows, parameters)
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_canonical([row[key] for key in parameters]), []).append(row)
    summary = []
    for members in groups.values():
        complete = [row for row in members if row["status"] == "complete"]
        line: dict[str, Any] = {key: members[0][key] for key in parameters}
        line["runs"] = len(complete)
        line["failed"] = len(members) - len(complete)
        for name in measured:
            values = [float(row[name]) for row in complete if row.get(name) is not None]
            mean, low, high = _mean_interval(values, column_range(name), stats)
            line[f"{name}.mean"], line[f"{name}.ci95_low"], line[f"{name}.ci95_high"] = mean, low, high
            line[f"{name}.n"] = len(values)
        summary.append(line)
    return summary


def _mean_interval(
    values: list[float], support: tuple[float, float], stats: Any
) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    if len(values) >= 2 and min(values) == max(values):
        return values[0], values[0], values[0]  # exactly: fsum(3 * [0.1]) / 3 is 0.10000000000000002
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, None, None
    spread = math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1))
    low, high = stats.t.interval(0.95, len(values) - 1, loc=mean, scale=spread / math.sqrt(len(values)))
    return mean, max(float(low), support[0]), min(float(high), support[1])


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    names: list[str] = []
    for row in rows:
        names.extend(name for name in row if name not in names)
    with tempfile.SpooledTemporaryFile(mode="w+", newline="") as buffer:
        writer = csv.DictWriter(buffer, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)
        buffer.seek(0)
        _write_atomically(path, buffer.read())


def read_csv(path: str | Path) -> list[dict[str, str]]:
    """The rows of a sweep's sweep.csv or summary.csv (cells as text; empty = none)."""
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# -- the progress bar -------------------------------------------------------------------------------


def _bar(progress: bool | TextIO | None) -> SweepProgress | None:
    if progress is True:
        return SweepProgress(sys.stderr)
    if progress is None or progress is False:
        return None
    return SweepProgress(progress)


class SweepProgress:
    """``[####....] 12/40 runs  done 11  running 2  failed 1  3.4s  ETA 9s`` on one line, redrawn."""

    _WIDTH = 30

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.total = self.done = self.failed = self.resumed = 0
        self.started = time.perf_counter()

    def start(self, total: int, resumed: int) -> None:
        self.total, self.done, self.resumed = total, resumed, resumed
        self.started = time.perf_counter()

    def finished(self, *, failed: bool) -> None:
        self.done += 1
        self.failed += failed

    def draw(self, *, running: int, final: bool = False) -> None:
        elapsed = time.perf_counter() - self.started
        ran = self.done - self.resumed
        remaining = self.total - self.done
        eta = f"ETA {elapsed / ran * remaining:5.0f}s" if ran and remaining else "ETA     ?" if remaining else ""
        filled = int(self._WIDTH * self.done / max(self.total, 1))
        bar = "#" * filled + "." * (self._WIDTH - filled)
        self.stream.write(
            f"\r[{bar}] {self.done:,}/{self.total:,} runs  done {self.done - self.failed:,}  running {running:,}  "
            f"failed {self.failed:,}  {elapsed:6.1f}s  {eta}"
        )
        if final:
            self.stream.write("\n")
        self.stream.flush()


__all__ = [
    "FINAL",
    "MARKER",
    "ROUND_MEAN",
    "SEED_KEY",
    "SWEEP_FORMAT",
    "Axis",
    "PlannedRun",
    "Study",
    "SweepResult",
    "execute",
    "load_study",
    "make_axes",
    "measured_columns",
    "parse_values",
    "plan",
    "check_sweep_folder",
    "column_range",
    "dask_cluster",
    "distinct_errors",
    "local_pool",
    "metric_columns",
    "read_csv",
    "run_name",
    "run_sweep",
    "ship_protocol",
    "summarize",
    "sweep_folder_problem",
]
