"""No traceback anywhere the README promises none, and nothing left behind: each case ends with exit 2 (130
after Ctrl-C, 141 on a closed pipe) and at most one line, and a killed or failed command's leftovers are
cleaned up by the next one -- only ever what fedrecsim itself made."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from fedrecsim.cli import main
from fedrecsim.inspect import _toml_lines, evaluation_period, inspect_scenario
from fedrecsim.output import STAGING_MARKER, prepare_output
from fedrecsim.scenario import load_scenario, parse_scenario, read_tables

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.toml"))

SCENARIO = """
[run]
protocol = "fcf"
name = "robust"
rounds = 2
[data]
users = 30
items = 40
ratings = 700
[protocol]
d = 4
"""


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO)
    return path


def _command(*args: str, **options: object) -> subprocess.Popen[str]:
    """``fedrecsim ARGS`` as the console entry point runs it (`fedrecsim_entry`), in a child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen(
        [sys.executable, *options.pop("flags", ()), "-m", "fedrecsim_entry", *args],  # type: ignore[misc]
        env=env, text=True, **options,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- the seed


@pytest.mark.parametrize("flag", [["--seed", "99999999999999999999999"], ["--set", "run.seed=18446744073709551616"]])
def test_a_seed_beyond_64_bits_is_refused_naming_run_seed(scenario_file, tmp_path, capsys, flag) -> None:
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet", *flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedrecsim: error: run.seed: must be >= 0 and <= 18446744073709551615")
    assert not out.exists()


def test_the_largest_64_bit_seed_runs(scenario_file, tmp_path) -> None:
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "out"), "--quiet", "--seed", str(2**64 - 1)]) == 0
    assert json.loads((tmp_path / "out" / "result.json").read_text())["seed"] == 2**64 - 1


# --------------------------------------------------------------------------- eval_every = 0


FEDVAE_TINY = [
    "--set", "data.users=60", "--set", "data.items=30", "--set", "data.ratings=600", "--set", "protocol.users_per_round=7",
    "--set", "protocol.hidden=8", "--set", "protocol.latent=4", "--set", "protocol.baseline=false", "--set", "run.rounds=5",
]


def test_the_shipped_fedvae_scenario_with_eval_every_0_inspects(capsys) -> None:
    """scenarios/fedvae_byzantine.toml leaves eval_every at 0 (fedvae: at every epoch's end): inspect runs."""
    path = ROOT / "scenarios" / "fedvae_byzantine.toml"
    assert load_scenario(path).protocol.eval_every == 0
    assert main(["inspect", str(path), *FEDVAE_TINY, "--calibrate", "2"]) == 0
    printed = capsys.readouterr().out
    assert "time: about " in printed


def test_eval_every_0_is_the_epoch_the_protocol_measures_at(tmp_path) -> None:
    """The rounds inspect counts as measuring are the rounds whose metrics the run measured."""
    from fedrecsim import run

    tables = read_tables(ROOT / "scenarios" / "fedvae_byzantine.toml")
    for override in FEDVAE_TINY[1::2]:
        key, value = override.split("=")
        section, name = key.split(".")
        tables[section][name] = tomllib.loads(f"v = {value}")["v"]
    tables["run"]["rounds"] = 9
    scenario = parse_scenario(tables)
    inspection = inspect_scenario(scenario, calibration_rounds=0)
    from fedrecsim.data import prepare_data

    train, test = prepare_data(scenario.data, scenario.run.seed)
    period = evaluation_period(scenario, train, test)
    training = int(((train.user_counts() > 0) & (test.user_counts() == 0)).sum())
    assert period == math.ceil(training / 7) and 1 < period < 9
    result = run(scenario)
    measured = [row["round"] for row in result.result["metrics"]["rounds"] if any(k.startswith("ndcg") for k in row)]
    assert measured == [r for r in range(1, 10) if r % period == 0 or r == 9]
    assert inspection.data["users"] == train.n_users


# --------------------------------------------------------------------------- closed pipes and Ctrl-C


@pytest.mark.parametrize("args", [["protocols"], ["data", "list"], ["run", "SCENARIO", "--quiet", "--out", "OUT"]])
def test_a_closed_standard_output_ends_quietly_with_141(scenario_file, tmp_path, args) -> None:
    """``fedrecsim ... | head -1``, the reader gone before the command printed: exit 141, nothing on stderr."""
    args = [str(scenario_file) if a == "SCENARIO" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    child = _command(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # type: ignore[union-attr]
    err = child.stderr.read()  # type: ignore[union-attr]
    assert child.wait(timeout=120) == 141, err
    assert err == ""


def test_a_closed_standard_output_ends_python_m_fedrecsim_cli_quietly_with_141() -> None:
    """``python -m fedrecsim.cli protocols | head -1`` ends as the console command does (it once ended in a
    BrokenPipeError traceback)."""
    child = subprocess.Popen([sys.executable, "-m", "fedrecsim.cli", "protocols"], env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # type: ignore[union-attr]
    err = child.stderr.read()  # type: ignore[union-attr]
    assert child.wait(timeout=120) == 141, err
    assert err == ""


@pytest.mark.timeout(120)
def test_ctrl_c_during_the_imports_is_one_line_and_130() -> None:
    """SIGINT once numpy is being imported (``-X importtime`` shows it), long before the command runs.

    The child starts with SIGINT's default action whoever started the tests: a shell starts a background
    job (``pytest &``) with SIGINT ignored, a child inherits that, and a command that ignores Ctrl-C
    during its imports is then right to run on."""
    child = _command("protocols", flags=["-X", "importtime"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in child.stderr:  # type: ignore[union-attr]
        lines.append(line)
        if line.split("|")[-1].strip() == "numpy":
            child.send_signal(signal.SIGINT)
            break
    rest = child.stderr.read()  # type: ignore[union-attr]
    assert child.wait(timeout=60) == 130
    assert "Traceback" not in rest and rest.strip().splitlines()[-1] == "fedrecsim: interrupted"
    assert child.stdout.read() == ""  # type: ignore[union-attr]


# --------------------------------------------------------------------------- inspect's TOML


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda path: path.name)
def test_inspects_resolved_scenario_of_every_shipped_scenario_parses_back_to_it(path) -> None:
    from fedrecsim.sweep import load_study

    scenario = parse_scenario(load_study(path).base)  # a scenario file, or a study's base scenario
    text = "\n".join(_toml_lines(scenario.to_table()))
    assert parse_scenario(tomllib.loads(text)) == scenario


def test_inspect_prints_toml_that_parses_back_with_links_and_faults(tmp_path, capsys) -> None:
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO + """
[network.links."user->server"]
loss = 0.1

[[faults.crash]]
party = "user:3"
""")
    assert main(["inspect", str(path), "--calibrate", "0"]) == 0
    printed = capsys.readouterr().out
    text = printed.split("\n\n")[0]
    assert text.startswith("# resolved scenario") and "None" not in text
    assert parse_scenario(tomllib.loads(text)) == load_scenario(path)


# --------------------------------------------------------------------------- nothing left behind


@pytest.mark.timeout(180)
def test_a_killed_runs_staging_folder_is_removed_by_the_next_run_of_the_target(scenario_file, tmp_path) -> None:
    out = tmp_path / "out"
    child = _command("run", str(scenario_file), "--quiet", "--out", str(out), "--set", "run.rounds=100000",
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    staging = tmp_path / f".out.partial-{child.pid}-0"
    deadline = time.monotonic() + 120
    while not (staging / STAGING_MARKER).exists():
        assert time.monotonic() < deadline and child.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)
    child.kill()
    child.wait(timeout=30)
    assert staging.is_dir()
    # What another, live run's staging folder looks like (this test's own process is alive), a dead run's
    # folder holding a user's file, and one without the marker: none of them is touched.
    live = tmp_path / f".out.partial-{os.getpid()}-0"
    live.mkdir()
    (live / STAGING_MARKER).write_text((staging / STAGING_MARKER).read_text().replace(str(child.pid), str(os.getpid())))
    foreign = tmp_path / f".out.partial-{child.pid}-7"
    foreign.mkdir()
    (foreign / STAGING_MARKER).write_text((staging / STAGING_MARKER).read_text())
    (foreign / "notes.txt").write_text("a user's file")
    unmarked = tmp_path / f".out.partial-{child.pid}-8"
    unmarked.mkdir()
    other_target = tmp_path / f".other.partial-{child.pid}-0"
    other_target.mkdir()
    (other_target / STAGING_MARKER).write_text((staging / STAGING_MARKER).read_text())
    assert main(["run", str(scenario_file), "--quiet", "--out", str(out)]) == 0
    assert not staging.exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["scenario.toml", "out", live.name, foreign.name, unmarked.name, other_target.name]
    )
    assert (foreign / "notes.txt").read_text() == "a user's file" and sorted(os.listdir(out)) == ["ledger.csv", "metrics.csv", "result.json"]


def test_a_committed_result_holds_no_marker_and_an_abandoned_target_leaves_nothing(tmp_path) -> None:
    target = prepare_output(tmp_path / "res")
    assert (target.staging / STAGING_MARKER).is_file()
    target.abandon()
    assert list(tmp_path.iterdir()) == []
    target = prepare_output(tmp_path / "res")
    (target.staging / "result.json").write_text("{}")
    assert sorted(os.listdir(target.commit())) == ["result.json"]


def test_a_failed_fetch_leaves_no_folder_it_created_and_keeps_the_users(tmp_path, capsys) -> None:
    missing = (tmp_path / "nowhere.zip").as_uri()
    created = tmp_path / "a" / "b"
    args = ["data", "fetch", "movielens-100k", "--accept-licence", "--url", missing, "--quiet"]
    assert main([*args, "--dir", str(created)]) == 2
    assert list(tmp_path.iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir()
    assert main([*args, "--dir", str(mine / "sub")]) == 2
    assert list(tmp_path.iterdir()) == [mine] and list(mine.iterdir()) == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("fedrecsim: error: file://") for line in err)
