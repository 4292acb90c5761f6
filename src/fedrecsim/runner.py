"""Running a scenario: data, network and protocol in virtual time, and the result folder.

``run(scenario)`` prepares the data, builds the seeded link policy, the ledger and the network, runs the
protocol in virtual time (`VirtualClock`: time jumps to the next deadline whenever every task is
blocked) -- so a week of protocol time passes in the seconds the computation takes -- and returns a `RunResult` whose ``result`` is the ``result.json``
contract of DESIGN.md. With ``out`` it also writes the result folder atomically: everything goes to a
temporary sibling folder first and is renamed into place only when complete, so a failed run leaves no
folder (and no half-written one) behind.
"""

from __future__ import annotations

import csv
import gc
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from . import __version__
from .clock import VirtualClock
from .data import prepare_data
from .errors import ConfigError
from .network.ledger import Ledger
from .network.network import Network
from .network.party import Party
from .protocols import Outcome, RunContext, protocol_spec
from .scenario import Scenario, load_scenario, parse_scenario

ProgressCallback = Callable[[int, int], None]


@dataclass
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
    def transcript_sha256(self) -> str:
        return self.result["transcript_sha256"]


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
    out: str | Path | None = None,
    transcript: bool = False,
    record_views: Iterable[Party] = (),
    progress: ProgressCallback | None = None,
) -> RunResult:
    """Run one scenario in virtual time.

    Args:
        scenario: a `Scenario`, raw scenario tables, or a scenario file path.
        out: write the result folder here (atomically); None writes nothing.
        transcript: record every message (``transcript.csv`` in the folder).
        record_views: parties whose received messages are kept in ``RunResult.views``.
        progress: called as ``progress(completed_rounds, total_rounds)`` after each round.

    Raises:
        ConfigError: the scenario is invalid. DatasetError: the data cannot be read.
    """
    scenario = coerce_scenario(scenario)
    wall_start = time.perf_counter()
    train, test = prepare_data(scenario.data, scenario.run.seed)
    spec = protocol_spec(scenario.run.protocol)
    ledger = Ledger(record_transcript=transcript)
    views = tuple(record_views)
    network = Network(
        scenario.network.link_policy(scenario.run.seed),
        ledger,
        resolution_s=scenario.network.resolution_s,
        max_message_bytes=int(scenario.network.max_message_mb * 1024 * 1024),
        record_views=views,
    )
    total = scenario.run.rounds
    context = RunContext(
        scenario=scenario,
        train=train,
        test=test,
        network=network,
        churn=scenario.availability.churn(),
        dropout=scenario.availability.mid_round_dropout(),
        compute=scenario.availability.compute_time(),
        progress=(lambda completed: progress(completed, total)) if progress is not None else (lambda completed: None),
    )

    async def main() -> tuple[Outcome, float]:
        start = trio.current_time()
        async with network.open():
            outcome = await spec.run(context)
        return outcome, trio.current_time() - start

    try:
        with relaxed_garbage_collection():
            outcome, virtual_time = trio.run(main, clock=VirtualClock())
    except BaseExceptionGroup as group:
        single = _sole_error(group)
        if single is None:
            raise
        raise single from None
    result = _result_document(scenario, outcome, ledger, virtual_time, time.perf_counter() - wall_start)
    run_result = RunResult(result, ledger, outcome, {party: network.view(party) for party in views})
    if out is not None:
        run_result.path = write_result_folder(Path(out), run_result)
    return run_result


@contextmanager
def relaxed_garbage_collection() -> Iterator[None]:
    """Collect garbage less often for the duration of a run, then restore the previous thresholds.

    A run allocates many long-lived objects (actors, their generators, mailboxes) and, per message,
    short-lived ones that reference counting already frees; at the default thresholds the cyclic
    collector keeps re-scanning the long-lived ones (measured: a third of the CPU time of a
    100,000-user round).
    """
    previous = gc.get_threshold()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*previous)


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
    scenario: Scenario, outcome: Outcome, ledger: Ledger, virtual_time: float, wall_time: float
) -> dict[str, Any]:
    return {
        "fedrecsim_version": __version__,
        "scenario": scenario.to_table(),
        "seed": scenario.run.seed,
        "protocol": scenario.run.protocol,
        "rounds_completed": outcome.rounds_completed,
        "virtual_time_s": float(virtual_time),
        "wall_time_s": float(wall_time),
        "transcript_sha256": ledger.transcript_sha256,
        "metrics": {"final": _plain(outcome.final), "rounds": _plain(outcome.rounds)},
        "ledger": ledger.summary(),
        "invariants": [monitor.report() for monitor in outcome.invariants],
        "privacy": _plain(outcome.privacy),
    }


def _plain(value: Any) -> Any:
    """JSON-ready copy: numpy scalars to Python numbers, tuples to lists."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value


def write_result_folder(path: Path, run_result: RunResult) -> Path:
    """Write ``result.json``, ``metrics.csv``, ``ledger.csv`` (and ``transcript.csv``) atomically to ``path``.

    An existing folder at ``path`` is replaced only once the new one is complete.
    """
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        with open(staging / "result.json", "w") as handle:
            json.dump(run_result.result, handle, indent=2, allow_nan=False)
            handle.write("\n")
        _write_metrics_csv(staging / "metrics.csv", run_result.rounds)
        run_result.ledger.write_csv(staging / "ledger.csv")
        if run_result.ledger.transcript is not None:
            run_result.ledger.write_transcript_csv(staging / "transcript.csv")
        if path.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.rename(path, retired / path.name)
            os.rename(staging, path)
            shutil.rmtree(retired)
        else:
            os.rename(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


def _write_metrics_csv(path: Path, rounds: list[dict[str, float]]) -> None:
    names: list[str] = []
    for row in rounds:
        names.extend(name for name in row if name not in names)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=names)
        writer.writeheader()
        writer.writerows(rounds)


__all__ = ["RunResult", "coerce_scenario", "relaxed_garbage_collection", "run", "write_result_folder"]
