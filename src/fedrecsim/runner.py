"""Running a scenario: data, network and protocol in virtual time, and the result folder.

``run(scenario)`` prepares the data, builds the seeded link policy, the ledger and the network, runs the
protocol in virtual time (`VirtualClock`: time jumps to the next deadline whenever every task is
blocked) -- so a week of protocol time passes in the seconds the computation takes -- and returns a
`RunResult` whose ``result`` is the ``result.json`` contract of ``docs/architecture.md``. ``run_async``
does the same inside a trio loop that is already running, on whatever clock that loop has: the run's time
starts at 0 there too (`Network`'s event time), so its transcript and metrics are those of ``run``.

With ``out``, the location is checked before the simulation starts and the folder is written atomically
(`fedrecsim.output`): a failed or interrupted run leaves no folder, and nothing of the user's is ever
removed or overwritten.

With ``checkpoint_every`` as well, a run of a resumable protocol saves its state every so many rounds in a
work folder beside ``out`` (`fedrecsim.checkpoint`); an interrupted run leaves it, and `resume` continues
from it to the result the run would have had. A run that completes or fails removes it.

Garbage collection: for the duration of ``run`` (and ``resume``, ``run_on_data``) the process's cyclic
collector runs at relaxed thresholds, and once the protocol reports its first round every object the
collector tracks is frozen (``gc.freeze``) -- the actors, data and network the set-up built are never
scanned again in the run; the last run to end in the process restores the thresholds and unfreezes
(`relaxed_garbage_collection`). Process-wide by nature, so it is held by a count of the runs under way
in any thread and left alone where the process froze objects of its own; ``run_async`` does none of it.
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import json
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
import trio.testing

from . import __version__
from .clock import VirtualClock
from .checkpoint import Checkpoints, data_fingerprint, load, work_folder
from .data import prepare_data
from .data.ratings import Ratings
from .data.registry import resolve_path
from .errors import CheckpointError, ConfigError, DatasetError, Interrupted, OutputError, PartyTimeout
from .memory import check_memory
from .metric_declarations import worse_than_trivial
from .network.ledger import COUNTER_NAMES as LEDGER_COUNTERS
from .network.ledger import CLOSING, Ledger
from .network.links import latency_from_table
from .network.network import Network
from .network.party import Party
from .output import RESULT_FORMAT, OutputTarget, platform_record, prepare_output
from .progress import ProgressBar
from .protocols import Outcome, ProtocolSpec, RunContext, available_protocols, protocol_spec
from .scenario import Scenario, load_scenario, parse_scenario

ProgressCallback = Callable[[int, int], None]

#: Wall seconds between two within-round ticks of a progress callback that has ``tick`` (at most 10 a second).
TICK_EVERY_S = 0.1

#: With ``run.max_virtual_s = 0`` a run's virtual-time budget ends this long before the horizon at which
#: every party's waits end (`RunContext.horizon_s`), so that a run that never finishes stops with the
#: budget's `PartyTimeout`, the same one whichever party would have given up first.
BUDGET_MARGIN_S = 600.0

#: `run_async` warns (`SlowClockWarning`) before a run on a loop whose clock does not jump when the run is
#: expected to take longer than this many wall seconds.
SLOW_CLOCK_WARN_S = 10.0


class SlowClockWarning(RuntimeWarning):
    """`run_async` on a loop whose clock does not jump to the run's next instant (trio's default clock,
    a ``MockClock`` without autojump): the run's virtual seconds pass in the loop's seconds, and the
    message names the wall time expected."""


@dataclass(frozen=True)
class RoundStatus:
    """Where a run is within its current round, for a progress callback's ``tick`` (`run`).

    Attributes:
        round: the round under way (0: the set-up before round 1; the last round + 1: the closing phase,
            `Ledger.closing_round`).
        completed, total: rounds completed and the run's rounds.
        virtual_s: the run's virtual seconds (`Network.now`: since the run started).
        ledger: the run's ledger, to read (never to write).
    """

    round: int
    completed: int
    total: int
    virtual_s: float
    ledger: Ledger


class _Ticker(trio.abc.Instrument):
    """Calls ``tick(RoundStatus)`` from trio's scheduler, at most every `TICK_EVERY_S` wall seconds.

    It runs between two passes of trio's loop -- whenever virtual time may move -- and only reads: the
    run's tasks, messages and draws are what they are without it, so transcripts and results are too.
    """

    def __init__(self, tick: Callable[[RoundStatus], None], rounds: _RoundCounter, network: Network) -> None:
        self.tick = tick
        self.rounds = rounds
        self.ledger = network.ledger
        self.network = network
        self.last = -math.inf

    def after_io_wait(self, timeout: float) -> None:
        now = time.perf_counter()
        if now - self.last < TICK_EVERY_S:
            return
        self.last = now
        rounds = self.rounds
        self.tick(RoundStatus(self.ledger.round, rounds.completed, rounds.total, self.network.now, self.ledger))


@dataclass(repr=False)
class RunResult:
    """The outcome of one run.

    Attributes:
        result: the ``result.json`` document (plain JSON types).
        ledger: the run's ledger (per-party counters; the transcript if it was recorded).
        outcome: the protocol's outcome, including its final model ``state`` for scripts and tests.
        views: what each party named in ``record_views`` received, in delivery order.
        path: the result folder, if one was written.
    """

    result: dict[str, Any]
    ledger: Ledger
    outcome: Outcome
    views: dict[Party, list[Any]]
    path: Path | None = None

    @property
    def metrics(self) -> dict[str, float]:
        return self.result["metrics"]["final"]

    @property
    def rounds(self) -> list[dict[str, float]]:
        return self.result["metrics"]["rounds"]

    @property
    def transcript_xxh3_128(self) -> str:
        """The run's determinism fingerprint: XXH3-128 of its transcript (`fedrecsim.network.ledger`),
        bit-identical for one scenario and seed on one platform (``result["platform"]``)."""
        return self.result["transcript_xxh3_128"]

    @property
    def structure_xxh3_128(self) -> str:
        """The run's structure fingerprint: who sent what kind of message of what size to whom, delivered
        when (`fedrecsim.network.ledger`), the same on every platform (README, "Determinism")."""
        return self.result["structure_xxh3_128"]

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value:.4g}" for name, value in list(self.metrics.items())[:3])
        return (
            f"<RunResult {self.result['scenario']['run']['name']!r} {self.result['protocol']}, "
            f"{self.result['rounds_completed']} rounds{', ' + shown if shown else ''}, "
            f"transcript {self.transcript_xxh3_128[:12]}>"
        )


def coerce_scenario(scenario: Scenario | Mapping[str, Any] | str | Path) -> Scenario:
    """Accept a validated scenario, raw tables, or the path of a scenario file."""
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario)
    if isinstance(scenario, Mapping):
        return parse_scenario(scenario)
    raise ConfigError("", f"expected a Scenario, a table or a path, got {type(scenario).__name__}")


def run(
    scenario: Scenario | Mapping[str, Any] | str | Path,
    *,
    out: str | Path | OutputTarget | None = None,
    overwrite: bool = False,
    transcript: bool = False,
    record_views: Iterable[Party] = (),
    progress: ProgressCallback | bool | None = None,
    checkpoint_every: int = 0,
) -> RunResult:
    """Run one scenario in virtual time (its own trio loop on a `VirtualClock`).

    Args:
        scenario: a `Scenario`, raw scenario tables, or a scenario file path.
        out: write the result folder here (atomically); None writes nothing. The location is checked
            before the simulation starts; an existing target is refused (see `fedrecsim.output`).
        overwrite: replace an existing fedrecsim result folder at ``out`` (never anything else).
        transcript: record every message (``transcript.csv`` in the folder).
        record_views: parties whose received messages are kept in ``RunResult.views``.
        progress: True draws a progress bar on stderr; a callable is called as
            ``progress(completed_rounds, total_rounds)`` after each round, and, if it has a ``tick``
            method, ``progress.tick(RoundStatus)`` within rounds, at most every `TICK_EVERY_S` wall seconds.
        checkpoint_every: with ``out``, save a checkpoint every this many rounds (0: none), for `resume`.

    Raises:
        ConfigError: the scenario is invalid, or asks for checkpoints of a protocol that cannot resume.
        DatasetError: the data cannot be read. OutputError: ``out`` exists or cannot be written, or its
        checkpoint folder holds an interrupted run's (raised before the simulation starts). Interrupted:
        SIGINT (or a SIGTERM the caller turned into one) stopped the run; nothing was written but its
        checkpoint, if it saved one.
    """
    scenario = coerce_scenario(scenario)
    try:
        _check_checkpointing(scenario, out, checkpoint_every)
    except ConfigError:
        if isinstance(out, OutputTarget):
            out.abandon()
        raise
    target = _output_target(out, overwrite)
    checkpoints = None
    if checkpoint_every:
        try:
            checkpoints = Checkpoints.create(target.path, checkpoint_every, scenario, transcript)  # type: ignore[union-attr]
        except OutputError:
            target.abandon()  # type: ignore[union-attr]
            raise
    return _run_virtual(scenario, target, transcript, tuple(record_views), progress, checkpoints)


def resume(
    out: str | Path, *, overwrite: bool = False, progress: ProgressCallback | bool | None = None
) -> RunResult:
    """Continue the interrupted run whose result folder was to be ``out`` from its last checkpoint (`run`'s
    ``checkpoint_every``), to the result -- transcript hash, metrics, ledger -- of the run uninterrupted.

    It runs the checkpoint's scenario with its settings (transcript recording, checkpoint interval) and
    keeps saving checkpoints; like `run`, it writes ``out`` atomically and removes the checkpoint folder
    when it completes.

    Raises:
        CheckpointError: no checkpoint beside ``out``, an unreadable one, one of another fedrecsim version,
        or data that changed since it was taken. OutputError, Interrupted, and the run's errors: as `run`.
    """
    out = Path(os.path.abspath(out))
    folder = work_folder(out)
    saved = load(folder)
    _remove_empty_staging(out)
    target = _output_target(out, overwrite)
    checkpoints = Checkpoints(folder, saved.every, saved.scenario, saved.transcript, resumed=saved)
    return _run_virtual(saved.scenario, target, saved.transcript, (), progress, checkpoints)


def run_on_data(
    scenario: Scenario, train: Ratings, test: Ratings, *, record_views: Iterable[Party] = ()
) -> RunResult:
    """Run ``scenario`` in virtual time on the split ``(train, test)`` instead of the one its ``[data]`` table
    draws, writing nothing: what a privacy audit's trials do (`fedrecsim.audit`), each on one fixed data set
    with or without its target and a seed of its own. The run's ``result.json`` still shows ``[data]`` as
    written; ``record_views`` as for `run`."""
    return _run_virtual(scenario, None, False, tuple(record_views), None, None, (train, test))


def _run_virtual(
    scenario: Scenario, target: OutputTarget | None, transcript: bool, views: tuple[Party, ...],
    progress: ProgressCallback | bool | None, checkpoints: Checkpoints | None,
    data: tuple[Ratings, Ratings] | None = None,
) -> RunResult:
    rounds = _RoundCounter(_progress_callback(progress), scenario.run.rounds)
    start = 0.0
    if checkpoints is not None and checkpoints.resumed is not None:
        rounds.completed, start = checkpoints.resumed.round, checkpoints.resumed.time

    def simulate() -> RunResult:
        with relaxed_garbage_collection() as freeze:
            rounds.first_round = freeze
            return trio.run(_simulate, scenario, transcript, views, rounds, checkpoints, data, clock=VirtualClock(start))

    return finish_run(simulate, target, rounds, checkpoints)


def _check_checkpointing(scenario: Scenario, out: object, every: int) -> None:
    if every and out is None:
        raise ConfigError("--checkpoint-every", "needs --out DIR (out=...): the checkpoints are kept beside the result folder")
    check_checkpoint_interval(every, [scenario.run.protocol])
    check_checkpoint_due(every, scenario.run.rounds)


def check_checkpoint_due(every: int, most_rounds: int) -> None:
    """Refuse (`ConfigError`) a checkpoint interval > 0 under which no checkpoint would ever be saved: one
    is saved at the end of a round before the last (`Checkpoints.due`), so ``every`` must be below the
    largest number of rounds the runs have (``most_rounds``)."""
    if every and every >= most_rounds:
        rounds = "1 round" if most_rounds == 1 else f"{most_rounds} rounds"
        usable = "no interval saves one" if most_rounds == 1 else f"use 1 to {most_rounds - 1}"
        raise ConfigError(
            "--checkpoint-every",
            f"{every} would save no checkpoint: one is saved at the end of a round before the last, and the "
            f"longest run here has {rounds} ({usable})",
        )


def check_checkpoint_interval(every: int, protocols: Iterable[str]) -> None:
    """Refuse (`ConfigError`) a checkpoint interval that is not a number of rounds >= 0, or one > 0 for a
    run of a protocol that cannot resume (`ProtocolSpec.resumable`)."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ConfigError("--checkpoint-every", f"must be a number of rounds >= 1, got {every!r}")
    if not every:
        return
    for protocol in sorted(set(protocols)):
        if not protocol_spec(protocol).resumable:
            resumable = ", ".join(name for name in available_protocols() if protocol_spec(name).resumable)
            raise ConfigError(
                "run.protocol",
                f"{protocol}: this protocol cannot resume from checkpoints (its ProtocolSpec is not resumable: "
                f"docs/writing-a-protocol.md); these can: {resumable}",
            )


def _remove_empty_staging(out: Path) -> None:
    """Remove the empty staging folders a killed run of ``out`` left (``rmdir``: never one with anything in it)."""
    for candidate in out.parent.glob(f".{out.name}.partial-*"):
        with suppress(OSError):
            candidate.rmdir()


def finish_run(
    make: Callable[[], RunResult], target: OutputTarget | None, rounds: _RoundCounter, checkpoints: Checkpoints | None = None,
) -> RunResult:
    """``make()`` a run's result and write its folder to ``target`` (if any). On any failure ``target`` is
    abandoned -- nothing is written -- and an interrupt (SIGINT, or a SIGTERM turned into one) becomes
    `Interrupted` with the rounds completed. ``checkpoints``' folder is removed when the run completes,
    or fails by the simulation's own verdict, which a resume would repeat; it is kept, for `resume`, when
    the run was interrupted or could not go on with its checkpoint or its data (`CheckpointError`,
    `DatasetError`: fix the data, then resume) -- if it holds a checkpoint."""
    try:
        run_result = make()
        if target is not None:
            run_result.path = write_result_folder(target, run_result)
    except BaseException as exc:
        if target is not None:
            target.abandon()
        resumable = _is_interrupt(exc) or isinstance(exc, (CheckpointError, DatasetError))
        if checkpoints is not None and not (resumable and checkpoints.saved):
            checkpoints.discard()
        if _is_interrupt(exc):
            raise Interrupted(rounds.completed, rounds.total) from None
        raise
    if checkpoints is not None:
        checkpoints.discard()
    return run_result


async def run_async(
    scenario: Scenario | Mapping[str, Any] | str | Path,
    *,
    out: str | Path | OutputTarget | None = None,
    overwrite: bool = False,
    transcript: bool = False,
    record_views: Iterable[Party] = (),
    progress: ProgressCallback | bool | None = None,
) -> RunResult:
    """Run one scenario inside the trio loop that is already running (e.g. a pytest-trio test).

    The run's time starts at 0 when it starts, whatever the loop's clock reads, and moves from one instant
    of the run to the next (`Network`'s event time): the loop's clock only paces it. So on any clock the
    run gives the transcript hash and metrics that `run` gives. Under a clock that jumps (pytest-trio's
    ``autojump_clock``, a `VirtualClock`) the next instant comes as soon as every task is blocked; under
    one that does not (trio's default clock: real time) each instant comes when the loop's clock reaches
    it, so the run takes about its virtual duration in wall time -- a run expected to take longer than
    `SLOW_CLOCK_WARN_S` wall seconds warns so before it starts (`SlowClockWarning`, also kept in the
    result's ``warnings``). Arguments, result and errors are those of `run`; a cancelled run writes nothing.
    """
    scenario = coerce_scenario(scenario)
    slow = slow_clock_warning(scenario, trio.lowlevel.current_clock())
    if slow is not None:
        warnings.warn(slow, SlowClockWarning, stacklevel=2)
    target = _output_target(out, overwrite)
    rounds = _RoundCounter(_progress_callback(progress), scenario.run.rounds)
    try:
        run_result = await _simulate(scenario, transcript, tuple(record_views), rounds)
        if slow is not None:
            run_result.result["warnings"].insert(0, slow)
        if target is not None:
            run_result.path = write_result_folder(target, run_result)
    except BaseException:
        if target is not None:
            target.abandon()
        raise
    return run_result


def slow_clock_warning(scenario: Scenario, clock: trio.abc.Clock) -> str | None:
    """What `run_async` warns before a run on ``clock`` expected to take more than `SLOW_CLOCK_WARN_S` wall
    seconds (None: the clock jumps to the run's next instant, or the run is quick enough).

    A clock that does not jump paces the run's virtual time: every instant of it comes when the loop's
    clock reaches it. The run's virtual duration is at least ``rounds x run.round_gap_s`` plus, for the
    set-up and each round, a request and a reply of a typical latency (the latency model's median, at
    least ``network.resolution_s``), and up to ``run.round_timeout_s`` more per round where parties wait out
    their deadlines; wall time is that divided by the clock's rate. trio's own clocks say their rate
    (``MockClock.rate``, autojumping ``MockClock``s jump); any other clock is taken to follow the wall clock.
    """
    if isinstance(clock, VirtualClock):
        return None
    rate, pace = 1.0, f"its clock ({type(clock).__name__}) follows the wall clock"
    if isinstance(clock, trio.testing.MockClock):
        if clock.autojump_threshold == 0:
            return None
        if clock.rate == 0 and not math.isfinite(clock.autojump_threshold):
            return (
                "run_async on a MockClock that neither runs (rate 0) nor autojumps: the run waits at its first "
                "instant until something jumps the clock; use MockClock(autojump_threshold=0) or fedrecsim.run"
            )
        if clock.rate > 0:
            rate, pace = clock.rate, f"its MockClock runs at rate {clock.rate:g}"
        else:
            rate, pace = 0.0, f"its MockClock jumps only after {clock.autojump_threshold:g} idle wall seconds"
    timing, network = scenario.run, scenario.network
    hop = max(_median_latency(network.latency), network.resolution_s)
    exchanges = 2 * hop * (timing.rounds + 1)
    least = timing.rounds * timing.round_gap_s + exchanges
    most = least + (timing.rounds + 1) * timing.round_timeout_s
    if rate > 0:
        least_wall, most_wall = least / rate, most / rate
    else:  # each instant (at least a request and a reply a round) waits out the autojump threshold
        least_wall = most_wall = 2 * (timing.rounds + 1) * clock.autojump_threshold  # type: ignore[attr-defined]
    if least_wall <= SLOW_CLOCK_WARN_S:
        return None
    return (
        f"run_async: the loop's clock does not jump ({pace}), so the run's virtual time passes in wall time: "
        f"{timing.rounds} rounds of run.round_gap_s = {timing.round_gap_s:g} s with a request and a reply of "
        f"~{hop:g} s each are expected to take at least {_duration(least_wall)} of wall time (up to "
        f"{_duration(most_wall)} where parties wait out run.round_timeout_s = {timing.round_timeout_s:g} s); "
        "fedrecsim.run, or a loop on trio.testing.MockClock(autojump_threshold=0), takes none of it"
    )


def _median_latency(table: Mapping[str, Any]) -> float:
    """The median of a latency model's delays, over a fixed grid of its two uniforms (any model)."""
    latency = latency_from_table(table, "network.latency")
    grid = [(position + 0.5) / 16 for position in range(16)]
    delays = sorted(latency.sample(u, v) for u in grid for v in grid)
    return delays[len(delays) // 2]


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class _RoundCounter:
    """Passes each completed round on to the caller's progress callback and remembers the last one.
    ``first_round``, if set, is called once, when the protocol reports the first round it completed."""

    def __init__(self, progress: ProgressCallback | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.completed = 0
        self.first_round: Callable[[], None] | None = None

    def __call__(self, completed: int) -> None:
        self.completed = completed
        if self.first_round is not None:
            first_round, self.first_round = self.first_round, None
            first_round()
        if self.progress is not None:
            self.progress(completed, self.total)


def _progress_callback(progress: ProgressCallback | bool | None) -> ProgressCallback | None:
    if progress is True:
        return ProgressBar(sys.stderr)
    if progress is False or progress is None:
        return None
    return progress


def _output_target(out: str | Path | OutputTarget | None, overwrite: bool) -> OutputTarget | None:
    if out is None or isinstance(out, OutputTarget):
        return out
    return prepare_output(out, overwrite=overwrite)


def _is_interrupt(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None


async def _simulate(
    scenario: Scenario, transcript: bool, views: tuple[Party, ...], rounds: _RoundCounter,
    checkpoints: Checkpoints | None = None, data: tuple[Ratings, Ratings] | None = None,
) -> RunResult:
    """Data, network and protocol, run in the current trio loop; the single error of a failed run unwrapped.
    ``data``, when given, is the split to run on instead of the one the scenario's ``[data]`` draws.

    With ``checkpoints`` resuming, the loop's clock stands at the checkpoint's time and the protocol puts
    the saved state into the world it builds (`RunContext.resumed`)."""
    wall_start = time.perf_counter()
    seen = _with_data_path(scenario)
    check_memory(seen)  # before the data is drawn: synthetic data's sizes are its keys
    train, test = data if data is not None else prepare_data(seen.data, scenario.run.seed)
    check_memory(seen, (train.n_users, train.n_items, len(train), len(test)))
    spec = protocol_spec(scenario.run.protocol)
    if spec.check is not None:
        spec.check(seen, train)
    start = trio.current_time()
    if checkpoints is not None:
        start = _prepare_checkpoints(checkpoints, train, test, start, wall_start)
    # A resumed run goes on from its checkpoint's time (its clock stands there: `_run_virtual`).
    resumed_at = trio.current_time() - start if checkpoints is not None and checkpoints.resumed is not None else 0.0
    ledger = Ledger(record_transcript=transcript)
    faults = scenario.faults
    network = Network(
        scenario.network.link_policy(scenario.run.seed, slow=faults.slow_parties()),
        ledger,
        resolution_s=scenario.network.resolution_s,
        max_message_bytes=int(scenario.network.max_message_mb * 1024 * 1024),
        record_views=views,
        faults=faults.party_faults(),
        origin=start,
        event_time=True,
        started_at=resumed_at,
    )
    context = RunContext(
        scenario=seen,
        train=train,
        test=test,
        network=network,
        churn=scenario.availability.churn(),
        dropout=scenario.availability.mid_round_dropout(),
        compute=scenario.availability.compute_time(),
        progress=rounds,
        checkpoints=checkpoints,
    )
    tick = getattr(rounds.progress, "tick", None)
    ticker = _Ticker(tick, rounds, network) if tick is not None else None
    if ticker is not None:
        trio.lowlevel.add_instrument(ticker)
    budget_s = scenario.run.max_virtual_s or context.horizon_s - BUDGET_MARGIN_S
    try:
        with sole_errors():
            async with network.open():
                # On the loop's clock: where it does not jump, the run's time lags it, never leads.
                with trio.move_on_at(start + budget_s) as budget:
                    outcome = await spec.run(context)
    finally:
        if ticker is not None:
            with suppress(KeyError):  # trio removes an instrument that raised
                trio.lowlevel.remove_instrument(ticker)
    if budget.cancelled_caught:
        raise PartyTimeout(
            f"the run did not finish within its virtual-time budget of {budget_s:g} s (run.max_virtual_s): "
            f"stopped {_where(ledger)} of {scenario.run.rounds}"
        )
    virtual_time = network.now
    wall_time = time.perf_counter() - wall_start + (checkpoints.wall_before_s if checkpoints is not None else 0.0)
    shape = {"users": train.n_users, "items": train.n_items, "train_entries": len(train), "test_entries": len(test)}
    warnings = [*_warnings(scenario, context), *_unanswered(scenario, outcome)]
    result = _result_document(scenario, shape, outcome, ledger, virtual_time, wall_time, warnings, spec)
    return RunResult(result, ledger, outcome, {party: network.view(party) for party in views})


def _where(ledger: Ledger) -> str:
    """Where the run is, for a message: ``in round 3``, or ``in the closing phase after round 3``."""
    if ledger.closing_round is not None:
        return f"in the closing phase after round {ledger.closing_round - 1}"
    return f"in round {ledger.round}"


def _prepare_checkpoints(checkpoints: Checkpoints, train: Any, test: Any, now: float, wall_start: float) -> float:
    """Fill in what ``checkpoints`` saves about this run (its data's fingerprint, when it started) and, when
    resuming, check the data is the checkpoint's; returns the virtual time the run started at."""
    fingerprint = data_fingerprint(train, test)
    saved = checkpoints.resumed
    if saved is not None and saved.data != fingerprint:
        raise CheckpointError(
            checkpoints.folder, "the run's data differ from those the checkpoint was taken on (a data file changed?)"
        )
    checkpoints.data = fingerprint
    checkpoints.start = saved.start if saved is not None else now
    checkpoints.wall_start = wall_start
    return checkpoints.start


def _with_data_path(scenario: Scenario) -> Scenario:
    """The scenario as the run reads it: an empty ``data.path`` of a fetched data set filled in.

    The protocol sees the fetched folder (so a reader of files beside the ratings -- the zip-code silo
    partition -- finds them); ``result.json`` keeps the scenario as written, free of this machine's paths.
    """
    path = resolve_path(scenario.data.source, scenario.data.path)
    if path == scenario.data.path:
        return scenario
    return dataclasses.replace(scenario, data=dataclasses.replace(scenario.data, path=path))


def _warnings(scenario: Scenario, context: RunContext) -> list[str]:
    """What the scenario asked for that the run did not simulate or do (the protocol adds its own warnings)."""
    availability = scenario.availability
    warnings = [f"[faults] never applied: {rule}" for rule in context.network.faults.idle_rules()]
    checkpoints = context.checkpoints
    if checkpoints is not None and checkpoints.deferred:
        warnings.append(
            f"{checkpoints.deferred} checkpoint(s) due at a round's end were put off to a later one: some party was "
            "not at a resume point then (e.g. a user still in a secure-aggregation stage it was left behind in); "
            "a longer run.round_gap_s lets such waits end within the gap"
        )
    if availability.dropout > 0 and not context.model_use.dropout:
        warnings.append(
            f"availability.dropout = {availability.dropout} was not simulated: "
            "no user of this protocol asked whether it crashes (User.crashes_in)"
        )
    if availability.compute_median_s > 0 and not context.model_use.compute:
        warnings.append(
            f"availability.compute_median_s = {availability.compute_median_s} (stragglers) was not simulated: "
            "no user of this protocol spent its compute time (User.compute)"
        )
    return warnings


def _unanswered(scenario: Scenario, outcome: Outcome) -> list[str]:
    """A warning when no party answered in any round (``participants`` 0 in every round that reports it):
    nothing the run reports then comes from the parties' answers. When a one-way delay of the latency
    model (its seconds, median or bounds) is at least half of ``run.round_timeout_s`` -- a round trip does
    not fit the deadline -- the warning says so."""
    counts = [row["participants"] for row in outcome.rounds if "participants" in row]
    if not counts or any(counts):
        return []
    run = scenario.run
    latency = scenario.network.latency
    delays = [value for key, value in latency.items() if key != "model" and isinstance(value, (int, float))]
    warning = (
        f"nobody answered in any of the {len(counts)} rounds (participants = 0 in every round): no party's answer "
        "reached the model or the sums this run reports"
    )
    if delays and 2 * max(delays) >= run.round_timeout_s:
        shown = ", ".join(f"{key} = {value}" for key, value in latency.items())
        warning += (
            f"; run.round_timeout_s = {run.round_timeout_s:g} s is shorter than a round trip over network.latency "
            f"({shown})"
        )
    return [warning]


#: The collector's thresholds while runs of `run` are under way (`relaxed_garbage_collection`).
RELAXED_THRESHOLDS = (100_000, 50, 1000)


class _RunsCollector:
    """The process's cyclic garbage collector while runs of `run` are under way, in any of its threads.

    The collector is one per process, so its settings are held by a count of the runs under way: the
    first run in relaxes the thresholds, the last one out restores those it found. A run's long-lived
    objects are frozen (`freeze`) once they exist; frozen objects stay so until the last run ends, then
    go back to the oldest generation, as they would be had they been scanned. The freeze is the run's
    only if nothing was frozen when the first of them froze: a process that froze objects of its own
    (``gc.freeze()`` before forking workers, say) keeps them frozen, and its runs freeze nothing.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs = 0
        self._thresholds = gc.get_threshold()
        self._froze = False

    @contextmanager
    def relaxed(self) -> Iterator[Callable[[], None]]:
        with self._lock:
            if self._runs == 0:
                self._thresholds = gc.get_threshold()
                gc.set_threshold(*RELAXED_THRESHOLDS)
            self._runs += 1
        try:
            yield self.freeze
        finally:
            with self._lock:
                self._runs -= 1
                if self._runs == 0:
                    gc.set_threshold(*self._thresholds)
                    if self._froze:
                        self._froze = False
                        gc.unfreeze()

    def freeze(self) -> None:
        """Freeze every object the collector tracks now, unless the process froze objects of its own."""
        with self._lock:
            if self._runs and (self._froze or gc.get_freeze_count() == 0):
                gc.freeze()
                self._froze = True


_COLLECTOR = _RunsCollector()


def relaxed_garbage_collection() -> AbstractContextManager[Callable[[], None]]:
    """Collect garbage less often for the duration of a run; the block gets ``freeze``, to call once the
    run's long-lived objects exist (`run` calls it when the protocol reports its first round).

    A run allocates many long-lived objects (actors, their generators, mailboxes) and, per message, short-lived
    ones that reference counting already frees; at the default thresholds the cyclic collector keeps re-scanning
    the long-lived ones (measured: a third of the CPU time of a 100,000-user round). At relaxed thresholds the
    set-up's objects are still scanned once more when they move to the oldest generation (W3 at 191,668 users:
    3.4 million objects, 2.9-3.3 s CPU in one iteration, 28 to 47 iterations in, measured); frozen, they are not
    scanned in the run. Only cyclic garbage is affected: an object that existed at the freeze and becomes part
    of an unreachable cycle during the run is collected after it, by the next full collection. Reference
    counting frees everything else as always, and objects made after the freeze are collected as always.

    Process-wide, and held by a count of the runs under way (`_RunsCollector`): runs in several threads at once
    share the relaxed thresholds and the freeze (each freezes what exists when it reports its first round), and
    the last one out restores the thresholds and unfreezes. The collector is left as it was on every way out
    (return, error, interrupt). `run_async` does none of this: its loop is the caller's, whose objects and
    collection settings are the caller's business.
    """
    return _COLLECTOR.relaxed()


@contextmanager
def sole_errors() -> Iterator[None]:
    """Let the single error of a failed block out as itself, unwrapped from trio's exception groups
    (`_sole_error`); a group of several errors goes out as it is."""
    try:
        yield
    except BaseExceptionGroup as group:
        single = _sole_error(group)
        if single is None:
            raise
        raise single from None


def _sole_error(group: BaseExceptionGroup) -> BaseException | None:
    """The one error inside nested single-member exception groups, or None if there are several.

    Trio's nurseries wrap whatever a task raised; a run that failed for one reason (a bad key found by
    the protocol, a party that timed out) must reach the caller as that typed error, not as a group.
    """
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return None


def _result_document(
    scenario: Scenario,
    shape: dict[str, int],
    outcome: Outcome,
    ledger: Ledger,
    virtual_time: float,
    wall_time: float,
    warnings: list[str],
    spec: ProtocolSpec | None = None,
) -> dict[str, Any]:
    nonfinite: list[str] = []
    final = _plain(outcome.final, "metrics.final", nonfinite)
    document = {
        "format": RESULT_FORMAT,
        "fedrecsim_version": __version__,
        "scenario": scenario.to_table(),
        "data": shape,
        "seed": scenario.run.seed,
        "protocol": scenario.run.protocol,
        "rounds_completed": outcome.rounds_completed,
        "virtual_time_s": float(virtual_time),
        "wall_time_s": float(wall_time),
        "timing": {name: float(seconds) for name, seconds in outcome.timing.items()},
        "transcript_xxh3_128": ledger.transcript_xxh3_128,
        "structure_xxh3_128": ledger.structure_xxh3_128,
        "platform": platform_record(),
        "metrics": {
            "final": final,
            "rounds": _plain(outcome.rounds, "metrics.rounds", nonfinite),
            "baselines": dict(outcome.baselines),
            "trivial": dict(outcome.trivial),
            "worse_than_trivial": worse_than_trivial(
                spec.metrics if spec is not None else (), final, outcome.trivial, outcome.trivial_reason
            ),
        },
        "ledger": ledger.summary(),
        "invariants": [monitor.report() for monitor in outcome.invariants],
        "privacy": _plain(outcome.privacy, "privacy", nonfinite),
        "distributions": _plain(outcome.distributions, "distributions", nonfinite),
        "paper_figures": [
            _plain(dataclasses.asdict(figure), f"paper_figures[{position}]", nonfinite)
            for position, figure in enumerate(outcome.paper_figures)
        ],
        "warnings": [*warnings, *outcome.warnings],
    }
    if nonfinite:
        shown = ", ".join(nonfinite[:5]) + (f" and {len(nonfinite) - 5} more" if len(nonfinite) > 5 else "")
        document["warnings"].append(f"not finite, written as null: {shown}")
    return document


def _plain(value: Any, path: str, nonfinite: list[str]) -> Any:
    """JSON-ready copy: numpy scalars to Python numbers, tuples to lists, and NaN or infinity to None
    (JSON's null), each such value's key path appended to ``nonfinite``."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item, f"{path}.{key}", nonfinite) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{path}[{position}]", nonfinite) for position, item in enumerate(value)]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        nonfinite.append(path)
        return None
    return value


def write_result_folder(target: OutputTarget, run_result: RunResult) -> Path:
    """Write ``result.json``, ``metrics.csv``, ``ledger.csv`` (and ``transcript.csv``) into the target's
    staging folder, then move it into place (`OutputTarget.commit`); returns the final path."""
    staging = target.staging
    with open(staging / "result.json", "w", encoding="utf-8") as handle:
        json.dump(run_result.result, handle, indent=2, allow_nan=False)
        handle.write("\n")
    _write_metrics_csv(staging / "metrics.csv", run_result.rounds, run_result.result["ledger"]["rounds_by_role"])
    run_result.ledger.write_csv(staging / "ledger.csv")
    if run_result.ledger.transcript is not None:
        run_result.ledger.write_transcript_csv(staging / "transcript.csv")
    return target.commit()


def _write_metrics_csv(path: Path, rounds: list[dict[str, float]], rounds_by_role: list[dict[str, Any]]) -> None:
    """``metrics.csv``: one row per round, the protocol's metrics and then each role's traffic in that round
    (``<role>.<counter>``, the ledger's ``rounds_by_role``; 0 for a role without traffic in the round).
    Round 0, the set-up, has a row of its own with traffic and no metrics, and so has the closing phase
    after the last round in a run that has one (`Ledger.begin_closing`): then a ``phase`` column after
    ``round`` says ``closing`` on that row and nothing on the others."""
    traffic = {
        entry["round"]: {f"{role}.{name}": value for role, counters in entry["roles"].items() for name, value in counters.items()}
        for entry in rounds_by_role
    }
    traffic_names = sorted({name for columns in traffic.values() for name in columns}, key=_traffic_column_order)
    by_round = {row.get("round"): dict(row) for row in rounds}
    for index in traffic:
        by_round.setdefault(index, {"round": index})
    table = [by_round[index] for index in sorted(by_round, key=lambda index: (index is None, index or 0))]
    for row in table:
        row.update(dict.fromkeys(traffic_names, 0) | traffic.get(row.get("round"), {}))
    names: list[str] = []
    for row in table:
        names.extend(name for name in row if name not in names and name not in traffic_names)
    closing = next((entry["round"] for entry in rounds_by_role if entry.get("phase") == CLOSING), None)
    if closing is not None:
        for row in table:
            row["phase"] = CLOSING if row.get("round") == closing else ""
        names.insert(names.index("round") + 1, "phase")
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*names, *traffic_names])
        writer.writeheader()
        writer.writerows(table)


def _traffic_column_order(name: str) -> tuple[str, int]:
    role, counter = name.split(".", 1)
    return role, LEDGER_COUNTERS.index(counter)


__all__ = [
    "RELAXED_THRESHOLDS", "RunResult", "SLOW_CLOCK_WARN_S", "SlowClockWarning", "check_checkpoint_due", "check_checkpoint_interval", "slow_clock_warning", "coerce_scenario", "finish_run", "relaxed_garbage_collection", "resume", "run", "run_async", "run_on_data", "sole_errors",
    "write_result_folder",
]
