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
