"""What a sweep's tables say: every grid value reaches its runs (``run.seed`` included), each column names
its statistic (``M.final``, ``M.round_mean``), and summary.csv's intervals stay inside the metric's range
with their n stated -- checked on sweep.csv, summary.csv and the runs' result.json, through the command."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats

import fedrecsim
from fedrecsim.sweep import read_csv

SRC = Path(fedrecsim.__file__).resolve().parents[1]

FCF = """\
[run]
protocol = "fcf"
name = "tiny"
seed = 3
rounds = 2

[data]
source = "synthetic"
users = 30
items = 40
ratings = 600

[network]
latency = { model = "constant", seconds = 0.0 }

[protocol]
d = 4
"""

# A protocol of the test's own: no messages, metrics chosen per seed so that the statistics are known.
# hr@10 near 0 makes the t interval of 3 seeds reach below 0 (clipped); odd_only is reported by odd seeds
# only (its n is 2 where the others' is 3); sparse is reported in even rounds only.
PROTOCOL = """\
from dataclasses import dataclass

from fedrecsim.sim import Outcome, ProtocolSpec


@dataclass(frozen=True)
class Config:
    pass


HITS = {1: 0.02, 2: 0.10, 3: 0.06}


async def run(ctx):
    rounds = [{"round": r, "participants": 10 * ctx.seed + r * r, **({"sparse": float(r)} if r % 2 == 0 else {})}
              for r in range(1, ctx.rounds + 1)]
    final = {"hr@10": HITS[ctx.seed], "participants": rounds[-1]["participants"]}
    if ctx.seed % 2:
        final["odd_only"] = float(ctx.seed)
    return Outcome(len(rounds), rounds, final)


PROTOCOL = ProtocolSpec("seeded_metrics", Config, run, "metrics chosen per seed (a test's)")
"""

OWN = """\
[run]
protocol = "seeded_metrics:PROTOCOL"
seed = 1
rounds = 4

[data]
source = "synthetic"
users = 10
items = 10
ratings = 30
"""


def _sweep(folder: Path, scenario: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``fedrecsim sweep`` in a fresh process that imports the test folder's modules too."""
    path = folder / "scenario.toml"
    path.write_text(scenario)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(folder)]))
    return subprocess.run(
        [sys.executable, "-m", "fedrecsim.cli", "sweep", str(path), "--workers", "1", *arguments],
        capture_output=True, text=True, timeout=120, check=False, env=environment,
    )


def _result(out: Path, row: dict[str, str]) -> dict:
    return json.loads((out / "runs" / row["run"] / "result.json").read_text())


def test_a_grid_over_run_seed_runs_each_seed_and_summarizes_over_them(tmp_path: Path) -> None:
    done = _sweep(tmp_path, FCF, "--grid", "run.seed=1,2,5", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "3 runs (0 already complete, 3 ran, 0 failed)" in done.stdout
    rows = read_csv(tmp_path / "out" / "sweep.csv")
    assert [row["seed"] for row in rows] == ["1", "2", "5"] and "run.seed" not in rows[0]
    assert len({row["run"] for row in rows}) == 3 and len({row["transcript"] for row in rows}) == 3
    assert [_result(tmp_path / "out", row)["seed"] for row in rows] == [1, 2, 5]
    # The listed seeds are the replicates: one grid point, its mean over three runs.
    [line] = read_csv(tmp_path / "out" / "summary.csv")
    assert line["runs"] == "3" and line["test_rmse.final.n"] == "3" and "run.seed" not in line
    assert float(line["test_rmse.final.mean"]) == pytest.approx(sum(float(row["test_rmse.final"]) for row in rows) / 3)


def test_n_seeds_give_n_runs_and_a_grid_over_another_run_key_reaches_the_run(tmp_path: Path) -> None:
    done = _sweep(tmp_path, FCF, "--seeds", "3", "--grid", "run.rounds=1,2", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    rows = read_csv(tmp_path / "out" / "sweep.csv")
    assert [(row["run.rounds"], row["seed"], row["rounds_completed"]) for row in rows] == [
        ("1", "3", "1"), ("1", "4", "1"), ("1", "5", "1"), ("2", "3", "2"), ("2", "4", "2"), ("2", "5", "2"),
    ]
    assert len({row["run"] for row in rows}) == 6 and len({row["transcript"] for row in rows}) == 6


def test_a_sweep_of_one_run_says_one_run(tmp_path: Path) -> None:
    done = _sweep(tmp_path, FCF, "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sweep: 1 run (0 already complete, 1 ran, 0 failed) -> "), done.stdout
    assert len(read_csv(tmp_path / "out" / "sweep.csv")) == 1


def test_n_seeds_count_from_a_run_seed_set_on_the_command_line(tmp_path: Path) -> None:
    """``--set run.seed=40 --seeds 2``: runs at seeds 40 and 41, two transcripts (not two runs of seed 40)."""
    done = _sweep(tmp_path, FCF, "--set", "run.seed=40", "--seeds", "2", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    rows = read_csv(tmp_path / "out" / "sweep.csv")
    assert [row["seed"] for row in rows] == ["40", "41"] and len({row["transcript"] for row in rows}) == 2
    assert [_result(tmp_path / "out", row)["seed"] for row in rows] == [40, 41]


@pytest.mark.parametrize(("arguments", "named"), [
    (["--grid", "run.seed=1,2", "--seeds", "2"], "run.seed: is swept by a grid"),
    (["--zip", "run.seed=1,2", "--zip", "protocol.d=4,8"], "run.seed: a grid over run.seed lists the seeds"),
    (["--grid", "protocol.d=4", "--grid", "protocol.d=8"], "--grid protocol.d: is given twice"),
    (["--zip", "protocol.d=4,8", "--zip", "protocol.d=2,3"], "--zip protocol.d: is given twice"),
    (["--set", "protocol.d=4", "--grid", "protocol.d=4,8"], "--set protocol.d: is also swept"),
    (["--set", "run.seed=4", "--grid", "run.seed=1,2"], "--set run.seed: is also swept"),
    # A value listed twice was one point run once (4 runs asked, 2 made); two spellings of one value were
    # two points sharing one run folder ("4 runs, 2 ran"); NaN was a ValueError traceback from json.
    (["--grid", "protocol.d=4,4", "--seeds", "2"], "protocol.d: 4 is listed twice"),
    (["--grid", "run.seed=1,1"], "run.seed: 1 is listed twice"),
    (["--zip", "protocol.d=4,4", "--zip", "protocol.gamma=0.5,0.5"], "protocol.d + protocol.gamma: (4, 0.5) is listed twice"),
    (["--grid", "protocol.gamma=1,1.0"], "protocol.gamma: the values 1 and 1.0 are the same scenario"),
    # Values are echoed as a scenario file writes them: true, not Python's True.
    (["--grid", "data.binarize=true,true"], "data.binarize: true is listed twice"),
    (["--zip", "data.binarize=false,false", "--zip", "protocol.d=4,4"], "data.binarize + protocol.d: (false, 4) is listed twice"),
    (["--grid", "protocol.d=4,false"], "protocol.d: expected an integer, got false"),
    (["--grid", "protocol.d=4,nan"], "protocol.d: expected an integer, got nan"),
])
def test_a_sweep_that_would_drop_a_value_is_refused_naming_the_key(tmp_path: Path, arguments: list[str], named: str) -> None:
    done = _sweep(tmp_path, FCF, *arguments, "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_a_study_file_that_sets_and_sweeps_one_key_is_refused(tmp_path: Path) -> None:
    done = _sweep(tmp_path, FCF + '\n[sweep]\nset = ["protocol.d=2"]\ngrid = { "protocol.d" = [4, 8] }\n',
                  "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "sweep.set protocol.d: is also swept" in done.stderr, done.stderr
    # On the command line, a grid replaces what the file fixes (documented): the runs take the grid's values.
    done = _sweep(tmp_path, FCF + '\n[sweep]\nset = ["protocol.d=2"]\n', "--grid", "protocol.d=4,8", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert [_result(tmp_path / "out", row)["scenario"]["protocol"]["d"] for row in read_csv(tmp_path / "out" / "sweep.csv")] == [4, 8]


@pytest.fixture(scope="module")
def own_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("own")
    (folder / "seeded_metrics.py").write_text(PROTOCOL)
    done = _sweep(folder, OWN, "--seeds", "3", "--out", str(folder / "out"))
    assert done.returncode == 0, done.stderr
    return folder / "out"


def test_each_metric_is_its_final_value_and_its_mean_over_the_rounds_that_report_it(own_sweep: Path) -> None:
    rows = read_csv(own_sweep / "sweep.csv")
    assert [name for name in rows[0] if name.endswith((".final", ".round_mean"))] == [
        "hr@10.final", "participants.final", "participants.round_mean", "odd_only.final", "sparse.round_mean",
    ]
    for row in rows:
        document = _result(own_sweep, row)
        seed = document["seed"]
        assert float(row["participants.final"]) == document["metrics"]["final"]["participants"] == 10 * seed + 16
        # participants 10s + 1, 10s + 4, 10s + 9, 10s + 16: the mean is 10s + 7.5, not the last round's.
        assert float(row["participants.round_mean"]) == 10 * seed + 7.5
        assert float(row["sparse.round_mean"]) == 3.0  # rounds 2 and 4 only, not divided by 4 rounds
        assert float(row["hr@10.final"]) == document["metrics"]["final"]["hr@10"]
        assert row["odd_only.final"] == ("" if seed % 2 == 0 else str(float(seed)))


def _t_interval(values: list[float], low: float, high: float) -> tuple[float, float, float, float, float]:
    """(mean, t-interval low, high, and both clipped to [low, high]) computed here, from the values."""
    n = len(values)
    mean = sum(values) / n
    half = stats.t.ppf(0.975, n - 1) * math.sqrt(sum((value - mean) ** 2 for value in values) / (n - 1)) / math.sqrt(n)
    return mean, mean - half, mean + half, max(mean - half, low), min(mean + half, high)


def test_summary_csv_is_the_t_interval_of_sweep_csv_clipped_to_the_metrics_range(own_sweep: Path) -> None:
    rows = read_csv(own_sweep / "sweep.csv")
    [line] = read_csv(own_sweep / "summary.csv")
    support = {"hr@10.final": (0.0, 1.0)}  # a ranking metric; the test's other metrics are unbounded
    for column in ("hr@10.final", "participants.final", "participants.round_mean", "odd_only.final"):
        values = [float(row[column]) for row in rows if row[column]]
        mean, raw_low, raw_high, low, high = _t_interval(values, *support.get(column, (-math.inf, math.inf)))
        assert int(line[f"{column}.n"]) == len(values)
        assert float(line[f"{column}.mean"]) == pytest.approx(mean, rel=1e-12)
        assert float(line[f"{column}.ci95_low"]) == pytest.approx(low, rel=1e-9, abs=1e-12)
        assert float(line[f"{column}.ci95_high"]) == pytest.approx(high, rel=1e-9)
    # The clip bites: hr@10 of 0.02, 0.10, 0.06 has a t interval reaching below 0.
    assert _t_interval([0.02, 0.10, 0.06], 0.0, 1.0)[1] < -0.03 and float(line["hr@10.final.ci95_low"]) == 0.0
    # n is the column's own: odd_only came from seeds 1 and 3 only.
    assert (line["hr@10.final.n"], line["odd_only.final.n"]) == ("3", "2")
