"""The command line: summary on success, exit 2 and no traceback on bad input."""

from __future__ import annotations

import json

import pytest

from fedrecsim.cli import main

SCENARIO = """
[run]
protocol = "fcf"
name = "cli"
rounds = 3
[data]
users = 30
items = 40
ratings = 700
[protocol]
d = 4
"""


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO)
    return path


def test_run_prints_a_summary_and_writes_results(scenario_file, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--seed", "5", "--set", "run.rounds=2"]) == 0
    printed = capsys.readouterr().out
    assert "final metrics" in printed and "test_rmse" in printed
    assert "per user per round" in printed and "upload" in printed
    document = json.loads((out / "result.json").read_text())
    assert document["seed"] == 5 and document["rounds_completed"] == 2


@pytest.mark.parametrize("override, fragment", [
    ("availability.p_join=1.5", "availability.p_join"),
    ("run.rounds=-1", "run.rounds"),
    ("network.latency={model='lognormal', median_s=0.1}", "network.latency"),
    ("data.source='movielens-100k'", "data"),
])
def test_bad_input_exits_2_with_the_message_and_no_traceback(scenario_file, tmp_path, capsys, override, fragment) -> None:
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--set", override]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert not out.exists()


def test_malformed_dataset_line_exits_2_naming_file_and_line(scenario_file, tmp_path, capsys) -> None:
    data = tmp_path / "u.data"
    data.write_text("1\t1\t5\t881250949\n1\t2\tfive\t881250949\n")
    out = tmp_path / "out"
    code = main(["run", str(scenario_file), "--out", str(out), "--set", "data.source='movielens-100k'",
                 "--set", f"data.path='{data}'"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{data}:2" in err
    assert not out.exists()


@pytest.mark.parametrize("bad_line", [
    "1\t2\t5",  # a missing field
    "1\tx\t5\t881250949",  # a non-integer item id
    "1\t2\t9\t881250949",  # a rating off the 1-5 scale
    "1\t1\t4\t881250949",  # a duplicate (user, item) pair
    "0\t2\t3\t881250949",  # ids are 1-based
])
def test_each_malformed_movielens_line_exits_2_naming_its_line(scenario_file, tmp_path, capsys, bad_line) -> None:
    data = tmp_path / "u.data"
    data.write_text("1\t1\t5\t881250949\n2\t1\t3\t881250950\n" + bad_line + "\n")
    code = main(["run", str(scenario_file), "--out", str(tmp_path / "out"), "--set", "data.source='movielens-100k'",
                 "--set", f"data.path='{data}'"])
    assert code == 2
    assert f"{data}:3" in capsys.readouterr().err
