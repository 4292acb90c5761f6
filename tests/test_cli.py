"""The command line: summary on success, exit 2 and no traceback on bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim.cli import main
from fedrecsim.scenario import read_tables
from fedrecsim.summary import number

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
    assert "upload per round" in printed and "set-up (round 0) upload" in printed
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


@pytest.mark.parametrize("override, message", [
    ("protocol.d=true", "protocol.d: expected an integer, got true"),
    ("protocol.gamma=false", "protocol.gamma: expected a number, got false"),
    ("run.name=true", "run.name: expected a string, got true"),
    ("data.split=true", 'data.split: got true; allowed values: "random", "per_user", "leave_one_out", "users", "heldout_users"'),
    ("data.users=[8, true]", "data.users: expected an integer, got [8, true]"),
    ("network.partitions={from_s=0.0, on=true}", "network.partitions: expected an array of PartitionTable, got { from_s = 0.0, on = true }"),
    ("network.latency={model='constant', seconds=true}", "network.latency.seconds: must be a number, got true"),
])
def test_a_value_is_echoed_as_a_scenario_file_writes_it(scenario_file, tmp_path, capsys, override, message) -> None:
    """What the user wrote comes back in TOML's spelling (true, "hold", [8, true]), not Python's (True, 'hold')."""
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "out"), "--set", override]) == 2
    assert capsys.readouterr().err == f"fedrecsim: error: {message}\n"


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


@pytest.mark.parametrize("make, fragment", [
    (lambda path: path.mkdir(), "is a folder"),
    (lambda path: path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"), "not a UTF-8 text file"),
    (lambda path: path.write_bytes("name = 'caf\u00e9'".encode("latin-1")), "not a UTF-8 text file"),
])
def test_a_scenario_path_that_is_no_text_file_exits_2_in_one_line(tmp_path, capsys, make, fragment) -> None:
    path = tmp_path / "scenario.toml"
    make(path)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and str(path) in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_an_unreadable_scenario_exits_2_in_one_line(scenario_file, tmp_path, capsys, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(scenario_file))

    # Tests run as root in CI, where chmod 000 does not stop a read: refuse the open itself.
    monkeypatch.setattr("fedrecsim.scenario.open", refuse, raising=False)
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "cannot be read: Permission denied" in err and err.count("\n") == 1


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal, flags, drawn", [
    (True, [], True),
    (True, ["--quiet"], False),
    (False, [], False),
    (False, ["--progress"], True),
])
def test_the_progress_bar_draws_on_a_terminal_unless_told(scenario_file, tmp_path, monkeypatch, terminal, flags, drawn) -> None:
    monkeypatch.setattr("fedrecsim.progress._DRAW_AFTER_S", 0.0)
    stderr = FakeTerminal() if terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "out"), *flags]) == 0
    assert ("3/3 rounds" in stderr.getvalue()) is drawn


def test_run_progress_true_draws_the_bar_on_stderr(tiny_fcf, monkeypatch, capsys) -> None:
    monkeypatch.setattr("fedrecsim.progress._DRAW_AFTER_S", 0.0)
    fedrecsim.run(tiny_fcf, progress=True)
    assert "5/5 rounds" in capsys.readouterr().err


def test_version_protocols_and_keys(capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0 and capsys.readouterr().out.strip() == f"fedrecsim {fedrecsim.__version__}"
    assert main(["protocols"]) == 0
    listed = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())
    assert set(listed) >= {"fcf", "dpmf", "ldp_implicit"} and all(listed.values())
    assert main(["keys", "fcf"]) == 0
    keys = capsys.readouterr().out
    assert "network.bandwidth_bps" in keys and "0 = unlimited" in keys and "protocol.d" in keys
    assert main(["keys", "nope"]) == 2
    assert "run.protocol" in capsys.readouterr().err


def test_summary_labels_every_number(scenario_file, tmp_path, capsys) -> None:
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "out"), "--set", "availability.dropout=0.2"]) == 0
    printed = capsys.readouterr().out
    for label in ("bytes sent", "bytes received", "msgs sent", "msgs received", "msgs dropped",
                  "participants:", "users in the data", "ever online", "mean over users", "heaviest user",
                  "privacy: none", "invariant monitors"):
        assert label in printed, label
    assert "e+" not in printed


def test_summary_shows_privacy_monitors_and_the_baseline(tmp_path, capsys) -> None:
    path = tmp_path / "s2.toml"
    path.write_text(SCENARIO.replace('protocol = "fcf"', 'protocol = "dpmf"').replace("d = 4", 'scenario = "S2"\nd = 4'))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    document = json.loads((tmp_path / "out" / "result.json").read_text())
    assert f"epsilon: {document['privacy']['epsilon']:g}" in printed
    for invariant in document["invariants"]:
        assert f"{invariant['name']}" in printed
    baseline = document["metrics"]["final"]["baseline_err_mean"]
    row = next(line for line in printed.splitlines() if line.strip().startswith("err_mean "))
    assert number(baseline) in row


def test_numbers_never_use_exponents_for_counts() -> None:
    assert number(1_000_000.0) == "1,000,000" and number(2_500_000) == "2,500,000"
    assert number(12345.678) == "12,345.7" and number(0.125) == "0.125"


def test_relative_paths_in_a_scenario_file_are_taken_from_its_folder(tmp_path, monkeypatch) -> None:
    study = tmp_path / "study"
    (study / "data").mkdir(parents=True)
    (study / "data" / "u.data").write_text("".join(f"{u}\t{i}\t{1 + (u + i) % 5}\t0\n" for u in range(1, 9) for i in range(1, 9)))
    (study / "s.toml").write_text(SCENARIO.replace("users = 30", 'source = "movielens-100k"\npath = "data/u.data"')
                                  .replace("items = 40\n", "").replace("ratings = 700\n", ""))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    tables = read_tables(Path("..") / "study" / "s.toml")
    assert Path(tables["data"]["path"]).resolve() == (study / "data" / "u.data").resolve()
    assert main(["run", "../study/s.toml", "--quiet", "--out", "a"]) == 0
    # A path given with --set is the user's own, relative to the current folder.
    (elsewhere / "mine.data").write_text((study / "data" / "u.data").read_text())
    assert main(["run", "../study/s.toml", "--quiet", "--out", "b", "--set", "data.path=mine.data"]) == 0
    assert json.loads((elsewhere / "b" / "result.json").read_text())["scenario"]["data"]["path"] == "mine.data"


def test_run_result_repr_is_one_short_line(tiny_fcf) -> None:
    text = repr(fedrecsim.run(tiny_fcf))
    assert "\n" not in text and len(text) < 200
    assert text.startswith("<RunResult 'tiny' fcf, 5 rounds") and "transcript " in text


SILENT_PROTOCOL = '''
from dataclasses import dataclass
from fedrecsim.sim import Outcome, ProtocolSpec, User, Party, Role

@dataclass(frozen=True)
class Config:
    pass

class IdleUser(User):
    async def run(self):
        await self.network.sleep(1.0)

async def run(ctx):
    users = {Party(Role.USER, i): IdleUser(Party(Role.USER, i), ctx.network, ctx.rng(1, i)) for i in range(3)}
    async with ctx.population(users).open() as population:
        population.begin_round(1)
        await ctx.network.sleep(2.0)
        population.end_round(1)
    return Outcome(1, [{"round": 1}], {})

PROTOCOL = ProtocolSpec("silent", Config, run, "users that never ask whether they crash")
'''


def test_dropout_and_stragglers_nobody_consults_are_reported(tiny_fcf, tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "silent_protocol.py").write_text(SILENT_PROTOCOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    tiny_fcf["run"]["protocol"] = "silent_protocol:PROTOCOL"
    tiny_fcf["protocol"] = {}
    tiny_fcf["availability"].update({"dropout": 0.5, "compute_median_s": 0.1})
    warnings = fedrecsim.run(tiny_fcf).result["warnings"]
    assert len(warnings) == 2
    assert "availability.dropout" in warnings[0] and "crashes_in" in warnings[0]
    assert "availability.compute_median_s" in warnings[1] and "User.compute" in warnings[1]
    tiny_fcf.update(run={"protocol": "fcf", "rounds": 2}, protocol={"d": 4})
    assert fedrecsim.run(tiny_fcf).result["warnings"] == []


def test_relative_latency_files_in_a_scenario_file_are_taken_from_its_folder(tmp_path) -> None:
    (tmp_path / "study").mkdir()
    path = tmp_path / "study" / "s.toml"
    path.write_text(SCENARIO + '''
[network]
latency = { model = "empirical", file = "delays.txt" }
[network.links."user->server"]
latency = { model = "empirical", file = "up.txt" }
''')
    tables = read_tables(path)
    assert tables["network"]["latency"]["file"] == str(tmp_path / "study" / "delays.txt")
    assert tables["network"]["links"]["user->server"]["latency"]["file"] == str(tmp_path / "study" / "up.txt")


def test_the_summary_prints_an_absent_bound_as_null_the_word_its_text_explains(tmp_path, capsys) -> None:
    """secagg's failure bounds are null in result.json where the failure cannot happen, and the bound's
    text says "null: the failure cannot happen"; the summary printed Python's ``None`` beside it."""
    scenario = Path(__file__).parents[1] / "scenarios" / "secagg_small.toml"
    out = tmp_path / "out"
    assert main(["run", str(scenario), "--out", str(out), "--set", "data.users=12", "--set", "run.rounds=2"]) == 0
    printed = capsys.readouterr().out
    document = json.loads((out / "result.json").read_text())
    bounds = json.dumps(document["privacy"])
    assert '"security_failure_log2": null' in bounds and "null: the failure cannot happen" in bounds
    assert "security_failure_log2: null" in printed and "None" not in printed
    assert number(None) == "null" and number(0.5) == "0.5"
