"""`fedrecsim.study`: a study built in Python runs into a sweep folder, and its tables are what the files hold."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim import ConfigError, SimulationError
from fedrecsim.errors import OutputError
from fedrecsim.study import (
    ScriptParser, Study, StudyResult, columns, data_sizes, half_width, read_study, run_script, typed,
)

ROOT = Path(__file__).resolve().parents[1]
FCF = ROOT / "scenarios" / "fcf_static.toml"
TINY = ["run.rounds=2", "data.users=30", "data.items=60", "data.ratings=600"]
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
#: Studies start a pool of worker processes; on a loaded machine that alone can take tens of seconds.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> tuple[Study, StudyResult]:
    """Two grid points x three seeds of a tiny FCF, run once for the module's tests."""
    study = Study(FCF, overrides=TINY, grid={"protocol.d": [2, 4]}, seeds=3)
    return study, study.run(tmp_path_factory.mktemp("study") / "sweep", workers=1)


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_the_runs_are_points_times_seeds_each_seed_its_own_run(done: tuple[Study, StudyResult]) -> None:
    study, result = done
    assert study.parameters == ("protocol.d",) and study.points() == [{"protocol.d": 2}, {"protocol.d": 4}]
    assert study.runs == 6 and (result.ran, result.skipped, result.failed) == (6, 0, 0)
    runs = result.runs
    assert len(runs) == 6
    for d in (2, 4):
        mine = [row for row in runs if row["protocol.d"] == d]
        assert sorted(row["seed"] for row in mine) == [7, 8, 9]  # the file's run.seed, then +1, +2
        assert len({row["transcript"] for row in mine}) == 3  # three seeds, three distinct transcripts
        assert len({row["run"] for row in mine}) == 3


def test_the_runs_table_is_sweep_csv_cell_for_cell(done: tuple[Study, StudyResult]) -> None:
    _, result = done
    raw = _csv(result.path / "sweep.csv")
    runs = result.runs
    assert [list(row) for row in runs] == [list(row) for row in raw]
    for typed_row, raw_row in zip(runs, raw):
        for name, cell in raw_row.items():
            value = typed_row[name]
            if cell == "":
                assert value is None
            elif isinstance(value, (int, float)):
                assert value == float(cell) and not isinstance(value, bool), name
            else:
                assert value == cell, name
    assert all(isinstance(row["protocol.d"], int) and isinstance(row["user.sent_bytes"], int) for row in runs)
    assert all(isinstance(row["run"], str) and isinstance(row["transcript"], str) for row in runs)


def test_the_summary_is_summary_csv_and_its_interval_recomputes_from_the_runs(done: tuple[Study, StudyResult]) -> None:
    from scipy import stats

    _, result = done
    summary, runs = result.summary, result.runs
    assert len(summary) == 2 and [line["protocol.d"] for line in summary] == [2, 4]
    assert [list(line) for line in summary] == [list(line) for line in _csv(result.path / "summary.csv")]
    line = summary[0]
    values = [row["test_rmse.final"] for row in runs if row["protocol.d"] == 2]
    mean = sum(values) / 3
    spread = math.sqrt(sum((value - mean) ** 2 for value in values) / 2)
    assert line["test_rmse.final.mean"] == pytest.approx(mean, rel=1e-12)
    assert half_width(line, "test_rmse.final") == pytest.approx(stats.t.ppf(0.975, 2) * spread / math.sqrt(3), rel=1e-9)
    assert half_width({"m.ci95_low": None, "m.ci95_high": None}, "m") is None


def test_columns_are_as_long_as_the_rows(done: tuple[Study, StudyResult]) -> None:
    _, result = done
    table = columns(result.runs)
    assert list(table)[:4] == ["run", "protocol.d", "seed", "status"]
    assert {len(values) for values in table.values()} == {6}
    assert table["protocol.d"] == [2, 2, 2, 4, 4, 4]
    assert columns([{"a": 1}, {"b": 2}]) == {"a": [1, None], "b": [None, 2]}


def test_a_run_again_skips_every_complete_run_and_reads_the_same(done: tuple[Study, StudyResult]) -> None:
    study, result = done
    again = study.run(result.path, workers=1)
    assert (again.ran, again.skipped) == (0, 6)
    assert again.runs == result.runs
    found = read_study(result.path)
    assert (found.parameters, found.ran, found.skipped) == (("protocol.d",), None, None)
    assert found.summary == result.summary


def test_a_runs_whole_result_is_its_result_json(done: tuple[Study, StudyResult]) -> None:
    _, result = done
    row = result.runs[0]
    document = result.result(row)
    assert document == json.loads((result.path / "runs" / row["run"] / "result.json").read_text())
    assert document["seed"] == row["seed"] and document["transcript_xxh3_128"] == row["transcript"]
    assert document["ledger"]["roles"]["user"]["sent_bytes"] == row["user.sent_bytes"]
    with pytest.raises(OutputError, match="the run failed: ValueError: boom"):
        result.result({"run": "0" * 16, "status": "failed", "error": "ValueError: boom"})


def test_the_api_reads_a_sweep_the_command_line_ran(tmp_path: Path) -> None:
    """The same study through ``fedrecsim sweep`` and through `Study.run`: the same runs, the same tables."""
    command = [sys.executable, "-m", "fedrecsim.cli", "sweep", str(FCF), "--grid", "protocol.d=2,4", "--seeds", "2",
               "--workers", "1", "--out", str(tmp_path / "cli"), *(part for item in TINY for part in ("--set", item))]
    completed = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300, env=ENV)
    assert completed.returncode == 0, completed.stderr
    scripted = Study(FCF, overrides=TINY, grid={"protocol.d": [2, 4]}, seeds=2).run(tmp_path / "api", workers=1)
    by_cli = read_study(tmp_path / "cli")

    def fixed(rows: list[dict]) -> list[dict]:
        return [{name: value for name, value in row.items() if name != "wall_time_s"} for row in rows]

    assert fixed(by_cli.runs) == fixed(scripted.runs)


def test_a_study_file_brings_its_grid_seeds_and_set_and_a_grid_replaces_its_axis(tmp_path: Path) -> None:
    (tmp_path / "study.toml").write_text(
        f'[sweep]\nscenario = "{FCF}"\nset = ["run.rounds=2"]\nseeds = 2\n'
        'grid = { "protocol.d" = [2, 4, 8] }\nzip = { "data.users" = [30, 40], "data.ratings" = [600, 800] }\n'
    )
    from_file = Study(tmp_path / "study.toml", overrides=["data.items=60"])
    assert from_file.parameters == ("protocol.d", "data.users", "data.ratings")
    assert from_file.runs == 3 * 2 * 2
    replaced = Study(tmp_path / "study.toml", overrides=["data.items=60"], grid={"protocol.d": [4]}, seeds=1)
    assert replaced.parameters == ("data.users", "data.ratings", "protocol.d")
    assert replaced.points() == [
        {"data.users": 30, "data.ratings": 600, "protocol.d": 4}, {"data.users": 40, "data.ratings": 800, "protocol.d": 4}
    ]
    rezipped = Study(tmp_path / "study.toml", zipped={"data.users": [50], "data.ratings": [900]})
    assert rezipped.points() == [{"protocol.d": d, "data.users": 50, "data.ratings": 900} for d in (2, 4, 8)]


def test_a_grid_over_run_seed_lists_the_seeds_of_every_point() -> None:
    study = Study(FCF, overrides=TINY, grid={"protocol.d": [2, 4], "run.seed": [1, 5, 9]})
    assert study.parameters == ("protocol.d",) and study.runs == 6
    assert study.points() == [{"protocol.d": 2}, {"protocol.d": 4}]


def test_a_study_from_tables_zips_its_keys_and_leaves_the_tables_alone() -> None:
    tables = {"run": {"protocol": "fcf", "rounds": 2, "seed": 3}, "data": {"users": 30, "items": 60, "ratings": 600}}
    study = Study(tables, overrides=["run.rounds=3"], zipped={"data.users": [30, 40], "data.ratings": [600, 800]})
    assert study.runs == 2 and study.points()[1] == {"data.users": 40, "data.ratings": 800}
    assert tables["run"]["rounds"] == 2


@pytest.mark.parametrize("arguments, where", [
    ({"grid": {"protocol.d": 4}}, 'grid["protocol.d"]'),
    ({"grid": {"protocol.d": []}}, 'grid["protocol.d"]'),
    ({"grid": {"protocol.d": "2,4"}}, 'grid["protocol.d"]'),
    ({"zipped": {"data.users": [30, 40], "data.ratings": [600]}}, "zipped"),
    ({"grid": {"protocol.d": [2]}, "zipped": {"protocol.d": [4]}}, 'grid["protocol.d"]'),
    ({"seeds": 0}, "seeds"),
    ({"overrides": "run.rounds=2"}, "overrides"),
    ({"grid": {"protocol.d": [2, -1]}}, "protocol.d"),
    ({"grid": {"protocol.nope": [1]}}, "protocol.nope"),
    ({"overrides": ["protocol.d=2"], "grid": {"protocol.d": [4]}}, "overrides protocol.d"),
    ({"grid": {"run.seed": [1, 5]}, "seeds": 2}, "run.seed"),
])
def test_a_bad_study_is_refused_naming_where_before_anything_runs(arguments: dict, where: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        Study(FCF, **arguments)
    assert str(caught.value).startswith(where), str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_failed_runs_are_rows_and_complete_names_their_error(tmp_path: Path) -> None:
    missing = ['data.source="movielens-100k"', f'data.path="{tmp_path / "absent"}"']
    done = Study(FCF, overrides=["run.rounds=2", *missing], seeds=2).run(tmp_path / "sweep", workers=1)
    assert done.failed == 2 and [row["status"] for row in done.runs] == ["failed", "failed"]
    with pytest.raises(SimulationError, match=r"^2 of 2 runs in .* failed: DatasetError: .*absent.* \(2 runs\)$"):
        done.complete()
    with pytest.raises(OutputError, match="the run failed: DatasetError"):
        done.result(done.runs[0])
    assert Study(FCF, overrides=TINY).run(tmp_path / "fine", workers=1).complete().failed == 0


def test_run_script_turns_errors_into_one_line_and_an_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    def bad_key(argv: list[str] | None) -> int:
        Study(FCF, overrides=["protocol.nope=1"])
        return 0

    def failed(argv: list[str] | None) -> int:
        raise SimulationError("2 of 2 runs failed")

    def fine(argv: list[str] | None) -> int:
        return 0 if argv == ["x"] else 3

    name = Path(sys.argv[0]).name
    assert run_script(bad_key) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"{name}: error: protocol.nope: unknown key")
    assert run_script(failed) == 1
    assert capsys.readouterr().err == f"{name}: simulation error: 2 of 2 runs failed\n"
    assert run_script(fine, ["x"]) == 0

    def interrupted(argv: list[str] | None) -> int:
        raise KeyboardInterrupt

    assert run_script(interrupted) == 130
    assert capsys.readouterr().err == f"{name}: interrupted; the complete runs are kept: running the script again resumes it\n"


def test_a_folder_that_is_no_sweep_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("a user's file")
    with pytest.raises(OutputError):
        read_study(tmp_path)
    with pytest.raises(OutputError):
        Study(FCF, overrides=TINY).run(tmp_path, workers=1)
    assert [path.name for path in tmp_path.iterdir()] == ["mine.txt"]


def test_typed_columns_keep_text_text_and_numbers_numbers() -> None:
    rows = typed([{"run": "0123456789012345", "a": "1", "b": "1", "c": "x", "d": ""},
                  {"run": "9876543210987654", "a": "2", "b": "2.5", "c": "3", "d": ""}])
    assert rows == [{"run": "0123456789012345", "a": 1, "b": 1.0, "c": "x", "d": None},
                    {"run": "9876543210987654", "a": 2, "b": 2.5, "c": "3", "d": None}]


def test_data_sizes_are_the_split_a_run_trains_on() -> None:
    sizes = data_sizes(FCF, TINY)
    assert (sizes.users, sizes.items) == (30, 60)
    assert sizes.train_ratings + sizes.test_ratings == 600
    assert sizes.train_only_users <= sizes.train_users <= sizes.users and sizes.test_users <= sizes.users
    assert 0 < sizes.rated_items <= sizes.items and sizes.max_train_per_user * sizes.train_users >= sizes.train_ratings
    assert data_sizes(fedrecsim.load_scenario(FCF, TINY)) == sizes
    result = fedrecsim.run(fedrecsim.load_scenario(FCF, TINY))
    assert (result.result["data"]["train_entries"], result.result["data"]["test_entries"]) == (
        sizes.train_ratings, sizes.test_ratings
    )


def test_the_readme_study_example_runs_and_prints_a_line_per_point(tmp_path: Path) -> None:
    """The README's "Studies" tour shows a study scripted in Python: saved as a file and run with python, as
    a user does, it runs as shown (it once ran only as ``python -c``: as a file without the main guard, every
    worker started the study anew and all six runs failed, then the summary had no test_rmse column)."""
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- study-example -->\n```python\n(.*?)\n```", readme, re.DOTALL)
    assert match, "the README lost its study example"
    code = match.group(1)
    assert len(code.splitlines()) <= 12
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    (tmp_path / "example.py").write_text(code + "\n")
    completed = subprocess.run([sys.executable, "example.py"], capture_output=True, text=True, check=False, cwd=tmp_path,
                               timeout=300, env=ENV)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert len(lines) == 2
    for line, d in zip(lines, (4, 8)):
        fields = line.split()
        assert fields[0] == str(d) and 0 < float(fields[1]) < 10 and fields[3] == "3"
        assert fields[2].startswith("+-") and float(fields[2].removeprefix("+-")) > 0, line
    assert len(read_study(tmp_path / "results" / "fcf-d").runs) == 6


#: A study started at a script's top level, without the main guard: every worker imports the script again.
UNGUARDED = (
    "from fedrecsim.study import Study\n"
    "Study('scenarios/fcf_static.toml', overrides=['run.rounds=1', 'data.users=20', 'data.items=30', 'data.ratings=200'],\n"
    "      seeds=2).run('results/unguarded', workers=2).complete()\n"
)


@pytest.mark.timeout(300)
def test_a_study_at_a_scripts_top_level_fails_saying_it_needs_the_main_guard(tmp_path: Path) -> None:
    """The runs of a study started without ``if __name__ == "__main__":`` fail, each worker having started the
    study again; the error says so (it was "BrokenProcessPool: A process in the process pool was terminated
    abruptly ...", then the README's example read a summary column that was not there: a KeyError)."""
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    (tmp_path / "unguarded.py").write_text(UNGUARDED)
    completed = subprocess.run([sys.executable, "unguarded.py"], capture_output=True, text=True, check=False, cwd=tmp_path,
                               timeout=300, env=ENV)
    assert completed.returncode == 1
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith("fedrecsim.errors.SimulationError: 2 of 2 runs in ")
    assert 'must do it under if __name__ == "__main__":, since each worker imports the script again' in last
    assert [row["status"] for row in read_study(tmp_path / "results" / "unguarded").runs] == ["failed", "failed"]


def test_script_parser_is_public() -> None:
    assert ScriptParser("x", out="o", quick="q").parse_args([]).seeds == 3
