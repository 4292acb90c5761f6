"""How a sweep runs and ends: failures named on the console, a protocol of one's own shipped to Dask workers,
nothing left behind after a kill, Ctrl-C or an unreachable scheduler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim.sweep import read_csv

SRC = Path(fedrecsim.__file__).resolve().parents[1]

FCF = """\
[run]
protocol = "fcf"
name = "tiny"
seed = 3
rounds = {rounds}

[data]
source = "synthetic"
users = 30
items = 40
ratings = 600

[network]
latency = {{ model = "constant", seconds = 0.0 }}

[protocol]
d = 4
"""


def _environment(*folders: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), *map(str, folders)]))


def _command(scenario: Path, *arguments: str) -> list[str]:
    return [sys.executable, "-m", "fedrecsim.cli", "sweep", str(scenario), *arguments]


def test_each_distinct_error_of_a_sweep_is_printed_with_its_count(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(FCF.format(rounds=2))
    missing = [tmp_path / "first.npz", tmp_path / "second.npz"]
    done = subprocess.run(
        _command(scenario, "--set", 'data.source="npz"', "--grid", f'data.path="{missing[0]}","{missing[1]}"',
                 "--seeds", "2", "--workers", "1", "--out", str(tmp_path / "out")),
        capture_output=True, text=True, timeout=120, check=False, env=_environment(),
    )
    assert done.returncode == 1, done.stderr
    assert "4 runs (0 already complete, 4 ran, 4 failed)" in done.stdout
    lines = done.stderr.splitlines()
    assert lines[0] == "sweep: 4 runs failed (the error column of sweep.csv):", done.stderr
    assert len(lines) == 3 and all(line.startswith("  2 x DatasetError: ") for line in lines[1:]), done.stderr
    assert str(missing[0]) in lines[1] and str(missing[1]) in lines[2]
    # Each line is the first line of the error sweep.csv records in full.
    errors = [row["error"] for row in read_csv(tmp_path / "out" / "sweep.csv") if row["status"] == "failed"]
    assert [line.removeprefix("  2 x ") for line in lines[1:]] == [errors[0].splitlines()[0], errors[2].splitlines()[0]]


# --------------------------------------------------------------------------- nothing left behind

LONG = FCF.format(rounds=200_000)  # far longer than any test waits: the runs are under way when stopped


def _processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, state), from /proc (zombies count as gone)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            state, parent = stat[stat.rindex(")") + 2:].split()[:2]
            if state != "Z":
                table[int(entry.name)] = (int(parent), state)
    return table


def _descendants(pid: int) -> set[int]:
    table, found, frontier = _processes(), set(), {pid}
    while frontier:
        frontier = {child for child, (parent, _) in table.items() if parent in frontier} - found
        found |= frontier
    return found


def _started_sweep(tmp_path: Path, workers: int) -> tuple[subprocess.Popen[str], set[int]]:
    """A long sweep in a process of its own, once its pool runs ``workers`` workers: (process, its descendants)."""
    scenario = tmp_path / "long.toml"
    scenario.write_text(LONG)
    # Output to files, not pipes: a surviving worker would hold a pipe open and hang the reader.
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr:
        sweep = subprocess.Popen(
            _command(scenario, "--seeds", str(workers), "--workers", str(workers), "--out", str(tmp_path / "out")),
            stdout=stdout, stderr=stderr, text=True, env=_environment(), start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        descendants = _descendants(sweep.pid)
        # resource tracker, forkserver and the workers, the forkserver's children
        if len(descendants) >= 2 + workers:
            return sweep, descendants
        time.sleep(0.05)
    sweep.kill()
    pytest.fail(f"the sweep did not start {workers} workers in 60 s: {(tmp_path / 'stderr').read_text()}")


def _survivors(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while (alive := pids & set(_processes())) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def _kill(pids: set[int]) -> None:
    """End what a failed test's sweep left (processes this test started, by their ids)."""
    for pid in pids & set(_processes()):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.timeout(120)
def test_a_sigkilled_sweep_leaves_no_worker_running(tmp_path: Path) -> None:
    sweep, descendants = _started_sweep(tmp_path, workers=2)
    try:
        os.kill(sweep.pid, signal.SIGKILL)  # the sweep alone, as the OOM killer would: not its process group
        sweep.wait()
        assert _survivors(descendants, seconds=10) == set()
    finally:
        _kill(descendants)
    assert not any((tmp_path / "out" / "runs").iterdir())  # no run was complete, and no straggler wrote one


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.timeout(120)
def test_ctrl_c_stops_a_sweep_at_once_with_exit_130_and_no_traceback(tmp_path: Path) -> None:
    sweep, descendants = _started_sweep(tmp_path, workers=2)
    try:
        started = time.monotonic()
        os.kill(sweep.pid, signal.SIGINT)
        sweep.wait(timeout=30)
        error = (tmp_path / "stderr").read_text()
        assert sweep.returncode == 130 and time.monotonic() - started < 15, error
        assert error.startswith("fedrecsim: interrupted") and error.count("\n") == 1, error
        assert "Traceback" not in error and "Exception ignored" not in error
        assert _survivors(descendants, seconds=10) == set()
    finally:
        sweep.kill()
        sweep.wait()
        _kill(descendants)
    assert not (tmp_path / "out" / "sweep.csv").exists() and not any((tmp_path / "out" / "runs").iterdir())


def test_staging_of_a_dead_process_is_removed_and_a_running_ones_left_alone(tmp_path: Path) -> None:
    from fedrecsim.sweep import load_study, run_sweep

    scenario = tmp_path / "tiny.toml"
    scenario.write_text(FCF.format(rounds=1))
    run_sweep(load_study(scenario), tmp_path / "out", workers=1)
    runs = tmp_path / "out" / "runs"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    straggler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        left = {pid: runs / f".0123456789abcdef.partial-{pid}-0" for pid in (int(dead.stdout), straggler.pid)}
        for folder in left.values():
            folder.mkdir()
            (folder / "result.json").write_text("{}")
        result = run_sweep(load_study(scenario), tmp_path / "out", workers=1)
        assert (result.ran, result.skipped) == (0, 1)
        # The dead sweep's staging is gone; a process still running may still commit or abandon its own.
        assert not left[int(dead.stdout)].exists() and (left[straggler.pid] / "result.json").exists()
    finally:
        straggler.kill()
        straggler.wait()


def test_a_run_a_straggler_stored_first_is_kept_not_replaced_nor_failed(tmp_path: Path) -> None:
    from fedrecsim.sweep import _store, is_complete, load_study, run_sweep

    scenario = tmp_path / "tiny.toml"
    scenario.write_text(FCF.format(rounds=1))
    run_sweep(load_study(scenario), tmp_path / "out", workers=1)
    runs = tmp_path / "out" / "runs"
    [name] = [entry.name for entry in runs.iterdir()]
    files = {entry.name: entry.read_bytes() for entry in (runs / name).iterdir()}
    inode = (runs / name).stat().st_ino
    _store(runs, name, {**files, "metrics.csv": b"round\n"})  # the same run arriving a second time
    assert is_complete(runs / name) and (runs / name).stat().st_ino == inode
    assert (runs / name / "metrics.csv").read_bytes() == files["metrics.csv"]
    assert sorted(entry.name for entry in runs.iterdir()) == [name]


def test_an_unreachable_dask_scheduler_is_one_line_and_leaves_no_folder(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(FCF.format(rounds=1))
    done = subprocess.run(
        _command(scenario, "--dask", "tcp://127.0.0.1:1", "--dask-timeout", "2", "--out", str(tmp_path / "out")),
        capture_output=True, text=True, timeout=60, check=False, env=_environment(),
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("fedrecsim: error: --dask: cannot reach a Dask scheduler at tcp://127.0.0.1:1")
    assert done.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- a protocol of one's own on Dask

OWN_PROTOCOL = """\
from dataclasses import dataclass

from fedrecsim.sim import Outcome, ProtocolSpec
{extra_import}


@dataclass(frozen=True)
class Config:
    pass


async def run(ctx):
    rounds = [{{"round": r, "value": float(ctx.seed * r)}} for r in range(1, ctx.rounds + 1)]
    return Outcome(len(rounds), rounds, {{"value": float(ctx.seed), "where": {where}}})


PROTOCOL = ProtocolSpec("shipped", Config, run, "a protocol of the test's own, in a package")
"""

OWN_SCENARIO = """\
[run]
protocol = "{protocol}"
seed = 1
rounds = 2

[data]
source = "synthetic"
users = 10
items = 10
ratings = 30
"""


def _own_package(folder: Path, name: str, extra_import: str = "", where: str = "1.0") -> None:
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text("")
    (folder / name / "constants.py").write_text(f"WHERE = {where}\n")
    (folder / name / "protocol.py").write_text(OWN_PROTOCOL.format(
        extra_import=f"from .constants import WHERE\n{extra_import}", where="WHERE"
    ))


@pytest.mark.timeout(60)
def test_a_protocol_of_ones_own_is_shipped_to_dask_workers_and_checked_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed")
    from fedrecsim.errors import ConfigError
    from fedrecsim.sweep import load_study, run_sweep

    _own_package(tmp_path, "my_protocols", where="2.5")
    _own_package(tmp_path, "needs_more", extra_import="import only_here  # a module the workers do not have")
    (tmp_path / "only_here.py").write_text("")
    (tmp_path / "own.toml").write_text(OWN_SCENARIO.format(protocol="my_protocols.protocol:PROTOCOL"))
    (tmp_path / "more.toml").write_text(OWN_SCENARIO.format(protocol="needs_more.protocol:PROTOCOL"))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster:
        # The worker process started before the protocols' folder was on this process's path: it has none of them.
        monkeypatch.syspath_prepend(str(tmp_path))
        result = run_sweep(load_study(tmp_path / "own.toml", seeds=2), tmp_path / "own", dask=cluster.scheduler_address)
        assert (result.ran, result.failed) == (2, 0), [row.get("error") for row in result.rows]
        assert [(row["value.final"], row["where.final"]) for row in read_csv(tmp_path / "own" / "sweep.csv")] == [
            ("1.0", "2.5"), ("2.0", "2.5"),
        ]
        # A protocol that imports what the workers lack fails before anything runs, naming what and where.
        with pytest.raises(ConfigError) as refused:
            run_sweep(load_study(tmp_path / "more.toml"), tmp_path / "more", dask=cluster.scheduler_address)
        message = str(refused.value)
        assert message.startswith("run.protocol: 'needs_more.protocol:PROTOCOL' cannot be loaded on the Dask worker tcp://127.0.0.1:")
        assert "No module named 'only_here'" in message and "\n" not in message
        assert not (tmp_path / "more").exists()
