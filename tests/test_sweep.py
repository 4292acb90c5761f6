"""Sweeps: a grid x seeds on a local pool or a Dask cluster, resumed after a kill, identical either way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedrecsim.cli import main
from fedrecsim.errors import ConfigError, OutputError
from fedrecsim.sweep import load_study, plan, read_csv, run_sweep, summarize

SCENARIO = """\
[run]
protocol = "fcf"
name = "tiny"
seed = 3
rounds = {rounds}

[data]
source = "synthetic"
users = 40
items = 60
ratings = 1200

[network]
latency = {{ model = "constant", seconds = 0.0 }}

[protocol]
d = 8
"""


def _scenario(folder: Path, rounds: int = 5, extra: str = "") -> Path:
    path = folder / "tiny.toml"
    path.write_text(SCENARIO.format(rounds=rounds) + extra)
    return path


def _without_wall_time(path: Path) -> list[dict[str, str]]:
    return [{key: value for key, value in row.items() if key != "wall_time_s"} for row in read_csv(path)]


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("local")
    study = load_study(_scenario(folder), grid=["protocol.d=4,8"], seeds=2)
    result = run_sweep(study, folder / "sweep", workers=2)
    assert (result.ran, result.skipped, result.failed) == (4, 0, 0)
    return folder


def test_a_grid_runs_every_point_at_every_seed_and_summarizes_over_seeds(local_sweep: Path) -> None:
    rows = read_csv(local_sweep / "sweep" / "sweep.csv")
    assert [(row["protocol.d"], row["seed"], row["status"]) for row in rows] == [
        ("4", "3", "complete"), ("4", "4", "complete"), ("8", "3", "complete"), ("8", "4", "complete"),
    ]
    assert len({row["run"] for row in rows}) == 4 and all((local_sweep / "sweep" / "runs" / row["run"]).is_dir() for row in rows)
    assert {"test_rmse.final", "test_rmse.round_mean", "user.sent_bytes", "server.recv_bytes", "transcript", "wall_time_s"} <= set(rows[0])
    summary = read_csv(local_sweep / "sweep" / "summary.csv")
    assert [(line["protocol.d"], line["runs"], line["failed"]) for line in summary] == [("4", "2", "0"), ("8", "2", "0")]
    for line, pair in zip(summary, (rows[:2], rows[2:])):
        values = [float(row["test_rmse.final"]) for row in pair]
        assert float(line["test_rmse.final.mean"]) == pytest.approx(sum(values) / 2)
        assert float(line["test_rmse.final.ci95_low"]) < min(values) and float(line["test_rmse.final.ci95_high"]) > max(values)
        # Bytes do not depend on the seed here: the interval is the value itself.
        assert line["user.sent_bytes.ci95_low"] == line["user.sent_bytes.mean"] == line["user.sent_bytes.ci95_high"]


def test_re_running_a_complete_sweep_runs_nothing_and_writes_the_same_table(local_sweep: Path) -> None:
    before = _without_wall_time(local_sweep / "sweep" / "sweep.csv")
    study = load_study(local_sweep / "tiny.toml", grid=["protocol.d=4,8"], seeds=2)
    result = run_sweep(study, local_sweep / "sweep", workers=2)
    assert (result.ran, result.skipped) == (0, 4)
    assert _without_wall_time(local_sweep / "sweep" / "sweep.csv") == before


def test_a_dask_local_cluster_gives_the_same_sweep_csv(local_sweep: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    study = load_study(local_sweep / "tiny.toml", grid=["protocol.d=4,8"], seeds=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        result = run_sweep(study, tmp_path / "dask", dask=cluster.scheduler_address)
    assert result.ran == 4
    assert _without_wall_time(tmp_path / "dask" / "sweep.csv") == _without_wall_time(local_sweep / "sweep" / "sweep.csv")
    assert (tmp_path / "dask" / "summary.csv").read_text() == (local_sweep / "sweep" / "summary.csv").read_text()


def _sweep_command(scenario: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "fedrecsim.cli", "sweep", str(scenario), "--grid", "protocol.d=2,4,6",
            "--seeds", "2", "--workers", "1", "--out", str(out)]


def _complete_runs(out: Path) -> dict[str, int]:
    runs = out / "runs"
    if not runs.is_dir():
        return {}
    return {entry.name: entry.stat().st_ino for entry in runs.iterdir() if (entry / "result.json").exists()}


@pytest.mark.timeout(120)
def test_a_sweep_killed_midway_resumes_and_runs_only_what_was_missing(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, rounds=20)
    run_sweep(load_study(scenario, grid=["protocol.d=2,4,6"], seeds=2), tmp_path / "reference", workers=2)

    killed = subprocess.Popen(_sweep_command(scenario, tmp_path / "sweep"), start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_complete_runs(tmp_path / "sweep")) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(killed.pid, signal.SIGKILL)  # the sweep and its worker processes, as a crash would
    killed.wait()
    survivors = _complete_runs(tmp_path / "sweep")
    assert 2 <= len(survivors) < 6 and not (tmp_path / "sweep" / "sweep.csv").exists(), survivors

    resumed = subprocess.run(_sweep_command(scenario, tmp_path / "sweep"), capture_output=True, text=True, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert f"6 runs ({len(survivors)} already complete, {6 - len(survivors)} ran, 0 failed)" in resumed.stdout, resumed.stdout
    assert {name: inode for name, inode in _complete_runs(tmp_path / "sweep").items() if name in survivors} == survivors
    assert _without_wall_time(tmp_path / "sweep" / "sweep.csv") == _without_wall_time(tmp_path / "reference" / "sweep.csv")
    assert sorted(entry.name for entry in (tmp_path / "sweep" / "runs").iterdir()) == sorted(_complete_runs(tmp_path / "sweep"))


def test_a_failed_run_is_recorded_and_the_others_complete(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, extra=f'\n[sweep]\nset = ["data.path={tmp_path / "missing.npz"}"]\n')
    study = load_study(scenario, grid=['data.source="synthetic","npz"'])
    result = run_sweep(study, tmp_path / "sweep", workers=1)
    assert (result.ran, result.failed) == (2, 1)
    rows = read_csv(tmp_path / "sweep" / "sweep.csv")
    assert [row["status"] for row in rows] == ["complete", "failed"]
    assert rows[1]["error"].startswith("DatasetError: ") and "missing.npz" in rows[1]["error"]
    assert [(line["runs"], line["failed"]) for line in read_csv(tmp_path / "sweep" / "summary.csv")] == [("1", "0"), ("0", "1")]
    assert (tmp_path / "sweep" / "runs" / f"{rows[1]['run']}.failed.json").is_file()


def test_a_study_file_holds_its_grid_zip_and_seeds(tmp_path: Path) -> None:
    study_file = tmp_path / "study.toml"
    _scenario(tmp_path)
    study_file.write_text(
        '[sweep]\nscenario = "tiny.toml"\nset = ["run.rounds=2"]\nseeds = 2\n'
        '[sweep.grid.protocol]\nd = [4, 8]\n'
        '[sweep.zip]\n"data.users" = [30, 40]\n"data.ratings" = [900, 1200]\n'
    )
    study = load_study(study_file)
    assert study.parameters == ("protocol.d", "data.users", "data.ratings") and study.seeds == 2
    assert study.points() == [(4, 30, 900), (4, 40, 1200), (8, 30, 900), (8, 40, 1200)]
    flags = load_study(study_file, grid=["protocol.d=16"], seeds=1)
    assert flags.points() == [(30, 900, 16), (40, 1200, 16)] and flags.seeds == 1


@pytest.mark.parametrize(("arguments", "named"), [
    (["--zip", "data.users=30,40", "--zip", "data.ratings=900"], "--zip: zipped lists must have the same length"),
    (["--grid", "availability.p_join=0.5,2"], "availability.p_join"),
    (["--grid", "protocol.d="], "--grid protocol.d"),
    (["--seeds", "0"], "--seeds"),
    (["--grid", "d=4,8"], "--grid: expected table.key=v1,v2,..., got 'd=4,8'"),
    (["--zip", "protocol.d"], "--zip: expected table.key=v1,v2,..., got 'protocol.d'"),
])
def test_bad_input_is_one_line_naming_the_flag_or_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], named: str
) -> None:
    scenario = _scenario(tmp_path)
    assert main(["sweep", str(scenario), *arguments, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and named in error
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_that_is_not_a_sweep_is_refused_and_left_alone(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not a fedrecsim sweep folder"):
        run_sweep(load_study(scenario), tmp_path / "mine")
    assert sorted(os.listdir(tmp_path / "mine")) == ["notes.txt"]
    with pytest.raises(OutputError, match="not a folder"):
        run_sweep(load_study(scenario), tmp_path / "mine" / "notes.txt")


def test_an_unknown_sweep_key_is_named(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, extra="\n[sweep]\ngrids = {}\n")
    with pytest.raises(ConfigError, match=r"^sweep\.grids: unknown key"):
        load_study(scenario)


STUDIES = sorted(path for path in (Path(__file__).resolve().parent.parent / "scenarios").glob("*.toml") if "[sweep]" in path.read_text())


@pytest.mark.parametrize("path", STUDIES, ids=[path.stem for path in STUDIES])
def test_every_study_file_in_scenarios_plans_every_run(path: Path) -> None:
    study = load_study(path)
    runs = plan(study)
    assert len(runs) == len(study.points()) * study.seeds and len({run.name for run in runs}) == len(runs)


def test_identical_values_summarize_to_the_value_itself_not_a_rounded_mean_and_a_spurious_interval() -> None:
    # fsum([0.1] * 3) / 3 is 0.10000000000000002 and the deviations from it are not 0: before, the summary
    # read 0.1 as varying, with an interval [0.09999999999999998, 0.10000000000000006].
    rows = [{"status": "complete", "seed": seed, "privacy.epsilon": 0.1, "test_rmse.final": 0.9 + seed} for seed in range(3)]
    (line,) = summarize(rows, [])
    assert (line["privacy.epsilon.mean"], line["privacy.epsilon.ci95_low"], line["privacy.epsilon.ci95_high"]) == (0.1, 0.1, 0.1)
    assert line["test_rmse.final.ci95_low"] < 1.9 < line["test_rmse.final.ci95_high"]


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder`` with its bytes and modification time, hidden ones included."""
    return {str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(folder.rglob("*")) if path.is_file()}


def test_the_same_study_extends_its_folder_with_more_seeds_and_values(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, rounds=2)
    out = str(tmp_path / "sweep")
    assert main(["sweep", str(scenario), "--grid", "protocol.d=2,4", "--workers", "1", "--quiet", "--out", out]) == 0
    first = {row["run"] for row in read_csv(tmp_path / "sweep" / "sweep.csv")}
    assert main(["sweep", str(scenario), "--grid", "protocol.d=2,4,6", "--seeds", "2", "--workers", "1", "--quiet",
                 "--out", out]) == 0
    rows = read_csv(tmp_path / "sweep" / "sweep.csv")
    assert [(row["protocol.d"], row["seed"]) for row in rows] == [
        ("2", "3"), ("2", "4"), ("4", "3"), ("4", "4"), ("6", "3"), ("6", "4"),
    ]
    assert first <= {row["run"] for row in rows} and len(rows) == 6


@pytest.mark.parametrize(("arguments", "named"), [
    (["--grid", "protocol.d=2,4", "--set", "run.rounds=3"], "run.rounds is 2 in it, 3 in this study"),
    (["--grid", "protocol.gamma=0.01,0.02"], "it sweeps protocol.d, this study protocol.gamma"),
    (["--grid", "protocol.d=2,4", "--grid", "data.users=30,40"], "it sweeps protocol.d, this study data.users, protocol.d"),
])
def test_another_study_is_refused_before_it_runs_and_the_folder_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], named: str
) -> None:
    scenario = _scenario(tmp_path, rounds=2)
    out = str(tmp_path / "sweep")
    assert main(["sweep", str(scenario), "--grid", "protocol.d=2,4", "--workers", "1", "--quiet", "--out", out]) == 0
    before = _snapshot(tmp_path / "sweep")
    capsys.readouterr()
    assert main(["sweep", str(scenario), *arguments, "--workers", "1", "--quiet", "--out", out]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "holds another study" in error and named in error and "new folder" in error, error
    assert _snapshot(tmp_path / "sweep") == before


@pytest.mark.parametrize("command", ["run", "inspect"])
def test_a_study_file_given_to_run_or_inspect_says_to_sweep_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    _scenario(tmp_path)
    study_file = tmp_path / "study.toml"
    study_file.write_text('[sweep]\nscenario = "tiny.toml"\nseeds = 2\n')
    assert main([command, str(study_file)]) == 2
    assert "sweep: this is a study file (a grid x seeds): run it with fedrecsim sweep FILE --out DIR" in capsys.readouterr().err
