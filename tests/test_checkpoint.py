"""Checkpoints and resume (issue 18, `fedrecsim.checkpoint`): a run resumed from any of its checkpoints
ends exactly as the run never interrupted -- transcript hash, metrics, ledger, privacy report, models --
whatever was under way at the checkpoint: messages in flight, restarts due, stragglers computing, users
offline, crashed or forged; through the command, after a SIGKILL; and in sweeps. What the runner refuses and
leaves behind is in tests/test_runner_checkpoints.py, the checkpoint file in tests/test_checkpoint_file.py.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import fedrecsim
from fedrecsim.checkpoint import CHECKPOINT_FILE, Checkpoints, load, work_folder
from fedrecsim.errors import ConfigError, Interrupted
from fedrecsim.testing import InterruptAfter, assert_same_run, checkpoint_world, every_checkpoint, resume_from

_LOGNORMAL = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}
_CHURN = {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.6, "dropout": 0.1}
_STRAGGLERS = {"compute_median_s": 1.0, "compute_sigma": 1.0}
_DPMF = {"d": 4, "epsilon": 1.0}

SCENARIOS: dict[str, dict[str, Any]] = {
    "fcf explicit: churn, dropout, loss, a slow byzantine user": {
        "run": {"protocol": "fcf", "seed": 3, "rounds": 6, "round_timeout_s": 5.0},
        "data": {"users": 30, "items": 40, "ratings": 500},
        "network": {"latency": _LOGNORMAL, "loss": 0.05, "bandwidth_bps": 1e6},
        "availability": _CHURN,
        "faults": {"byzantine": [{"party": "user:4", "corrupt": "shape"}], "slow": [{"party": "user:4", "delay_s": 8.0}]},
        "protocol": {"d": 4, "max_users": 20},
    },
    "fcf explicit: a crashed user restarts with its state": {
        "run": {"protocol": "fcf", "seed": 3, "rounds": 6, "round_timeout_s": 5.0},
        "data": {"users": 20, "items": 30, "ratings": 300}, "network": {"latency": _LOGNORMAL},
        "faults": {"crash": [{"party": "user:3", "kind": "fcf.item_gradients", "round": 2, "restart_after_s": 14.0}]},
        "protocol": {"d": 4},
    },
    "fcf explicit: stragglers, duplicates, reordering": {
        "run": {"protocol": "fcf", "seed": 7, "rounds": 6, "round_timeout_s": 2.0, "round_gap_s": 0.5},
        "data": {"users": 20, "items": 30, "ratings": 300},
        "network": {"latency": _LOGNORMAL, "duplicate": 0.3, "reorder": 0.3, "reorder_delay_s": 3.0},
        "availability": _STRAGGLERS, "protocol": {"d": 4},
    },
    "fcf implicit: markov churn, stragglers": {
        "run": {"protocol": "fcf", "seed": 4, "rounds": 6, "round_timeout_s": 2.0},
        "data": {"users": 30, "items": 150, "ratings": 600, "feedback": "implicit", "split": "leave_one_out"},
        "network": {"latency": {"model": "uniform", "low_s": 0.0, "high_s": 0.1}, "loss": 0.05},
        "availability": {"model": "markov", "mean_on_s": 20.0, "mean_off_s": 5.0, **_STRAGGLERS},
        "protocol": {"feedback": "implicit", "d": 3},
    },
    "dpmf S1": {
        "run": {"protocol": "dpmf", "seed": 6, "rounds": 5}, "data": {"users": 30, "items": 40, "ratings": 600},
        "network": {"latency": _LOGNORMAL}, "protocol": {"scenario": "S1", **_DPMF},
    },
    "dpmf S2: a user restarts without its state, a slow user": {
        "run": {"protocol": "dpmf", "seed": 5, "rounds": 6, "round_timeout_s": 5.0},
        "data": {"users": 20, "items": 30, "ratings": 300}, "network": {"latency": _LOGNORMAL},
        "faults": {
            "crash": [{"party": "user:3", "kind": "dpmf.contribution", "round": 2, "restart_after_s": 6.0, "keep_state": False}],
            "slow": [{"party": "user:5", "delay_s": 8.0}],
        },
        "protocol": {"scenario": "S2", **_DPMF},
    },
    "dpmf S2: churn, dropout, stragglers": {
        "run": {"protocol": "dpmf", "seed": 5, "rounds": 6, "round_timeout_s": 2.0},
        "data": {"users": 30, "items": 40, "ratings": 600}, "network": {"latency": _LOGNORMAL},
        "availability": {**_CHURN, **_STRAGGLERS}, "protocol": {"scenario": "S2", **_DPMF},
    },
    "dpmf S3: churn, dropout, loss": {
        "run": {"protocol": "dpmf", "seed": 5, "rounds": 6, "round_timeout_s": 5.0},
        "data": {"users": 30, "items": 40, "ratings": 600}, "network": {"latency": _LOGNORMAL, "loss": 0.02},
        "availability": _CHURN, "protocol": {"scenario": "S3", "max_users": 10, "k_presharing": 4, **_DPMF},
    },
    "ldp_implicit: two proxies holding underfull pools, churn, stragglers": {
        "run": {"protocol": "ldp_implicit", "seed": 9, "rounds": 6, "round_timeout_s": 3.0},
        "data": {"feedback": "implicit", "users": 30, "items": 150, "ratings": 300, "split": "leave_one_out"},
        "network": {"latency": _LOGNORMAL, "loss": 0.02},
        "availability": {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.2, **_STRAGGLERS},
        "protocol": {"k": 10, "proxies": 2, "min_users": 6, "underfull": "hold", "proxy_wait_s": 1.0},
    },
    "secagg, real mode: dropout, stragglers": {
        "run": {"protocol": "secagg", "seed": 5, "rounds": 5, "round_timeout_s": 20.0},
        "data": {"users": 12, "items": 50, "ratings": 300},
        "network": {"latency": _LOGNORMAL}, "availability": {"dropout": 0.15, **_STRAGGLERS},
        "protocol": {"mode": "real", "graph": "complete", "length": 16, "bits": 32, "frac_bits": 16},
    },
    "secagg+, ideal mode: churn, dropout": {
        "run": {"protocol": "secagg", "seed": 7, "rounds": 5}, "data": {"users": 16, "items": 50, "ratings": 300},
        "network": {"latency": _LOGNORMAL}, "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2, "dropout": 0.1},
        "protocol": {"mode": "ideal", "graph": "sparse", "neighbours": 6, "length": 16},
    },
    "prototypes: three silos, loss": {
        "run": {"protocol": "prototypes", "seed": 3, "rounds": 2},
        "data": {"feedback": "counts", "users": 60, "items": 40, "ratings": 1200, "rank": 3, "split": "users",
                 "test_fraction": 0.2, "test_entries": 5, "silos": 3},
        "network": {"latency": _LOGNORMAL, "loss": 0.2}, "protocol": {"k": 3, "rank": 2, "support": 5, "nmf_iterations": 30},
    },
    "privirec-k, ideal secure aggregation: dropout, stragglers, an abort in round 3": {
        "run": {"protocol": "privirec", "seed": 4, "rounds": 4, "round_timeout_s": 40.0, "round_gap_s": 30.0},
        "data": {"feedback": "implicit", "users": 20, "items": 30, "ratings": 300, "split": "per_user", "test_fraction": 0.2},
        "network": {"latency": _LOGNORMAL}, "availability": {"dropout": 0.1, **_STRAGGLERS},
        "protocol": {"variant": "privirec_k", "k": 4, "secagg": "ideal", "stage_timeout_s": 2.0},
    },
    "privirec, real secure aggregation": {
        "run": {"protocol": "privirec", "seed": 4, "rounds": 3, "round_timeout_s": 20.0},
        "data": {"feedback": "implicit", "users": 20, "items": 30, "ratings": 300, "split": "per_user", "test_fraction": 0.2},
        "network": {"latency": _LOGNORMAL}, "protocol": {"k": 4, "secagg": "real", "stage_timeout_s": 2.0},
    },
    "fedvae: churn, stragglers, byzantine users": {
        "run": {"protocol": "fedvae", "seed": 3, "rounds": 5, "round_timeout_s": 3.0},
        "data": {"feedback": "implicit", "users": 40, "items": 40, "ratings": 700, "split": "heldout_users", "test_fraction": 0.2},
        "network": {"latency": _LOGNORMAL},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2, **_STRAGGLERS},
        "protocol": {"users_per_round": 12, "hidden": 8, "latent": 4, "byzantine_fraction": 0.1, "gamma": 1.0, "baseline": False},
    },
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_run_resumed_from_any_checkpoint_ends_as_the_run_never_interrupted(tmp_path, name) -> None:
    tables = SCENARIOS[name]
    uninterrupted = fedrecsim.run(tables)
    checkpointed, written = every_checkpoint(tables, tmp_path / "checkpointed")
    assert_same_run(checkpointed, uninterrupted)
    # A checkpoint at every round's end but the last (and none after a round that aborted).
    completed = uninterrupted.result["rounds_completed"]
    assert [saved.round for saved in written] == list(range(1, min(completed + 1, tables["run"]["rounds"])))
    assert not work_folder(tmp_path / "checkpointed").exists()
    for saved in written:
        out = tmp_path / f"resumed-{saved.round}"
        assert_same_run(resume_from(saved, out), uninterrupted)
        assert not work_folder(out).exists()


def test_the_checkpoints_above_hold_every_kind_of_unfinished_business(tmp_path) -> None:
    """The scenarios of the test above resume from checkpoints taken while each of these was under way."""
    seen: set[str] = set()
    for position, tables in enumerate(SCENARIOS.values()):
        _, written = every_checkpoint(tables, tmp_path / str(position))
        for saved in written:
            world = checkpoint_world(saved)
            network = world["network"]
            population = world["population"] or {"_restarts_due": [], "_online": set(), "running": []}  # none: silos
            users = world["users"].values()
            seen.update(name for name, held in (
                ("messages in flight", network["in_flight"]),
                ("messages delivered and not yet taken", any(any(by_kind.values()) for by_kind, _ in network["mailboxes"].values())),
                ("a restart due", population["_restarts_due"]),
                ("a crashed party", network["crashed"]),
                ("a user offline", len(population["_online"]) < len(world["users"])),
                ("a straggler computing", any(user.get("computing_until") is not None for user in users)),
                ("a forged message in flight", network["forged"]),
                ("a user without its task (it left or crashed)", len(population["running"]) < len(population["_online"])),
                ("a proxy holding a pool", any(proxy.get("pools") for proxy in world["objects"].values())),
            ) if held)
    assert seen == {
        "messages in flight", "messages delivered and not yet taken", "a restart due", "a crashed party", "a user offline",
        "a straggler computing", "a forged message in flight", "a user without its task (it left or crashed)",
        "a proxy holding a pool",
    }


# --------------------------------------------------------------------------- the command, and SIGKILL

_LONG = """
[run]
protocol = "fcf"
seed = 3
rounds = 400
round_timeout_s = 5.0
[data]
users = 60
items = 60
ratings = 1200
[network]
latency = { model = "lognormal", median_s = 0.05, sigma = 0.5 }
loss = 0.05
[availability]
model = "bernoulli"
p_join = 0.3
p_leave = 0.2
initial_online = 0.7
dropout = 0.1
[protocol]
d = 4
"""
# A guard against a hang, not a timing assertion.
_PROCESS_TIMEOUT_S = 60


def _command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fedrecsim.cli", "run", *args], cwd=cwd, capture_output=True, text=True, timeout=_PROCESS_TIMEOUT_S
    )


def test_a_run_killed_with_sigkill_resumes_to_the_uninterrupted_result(tmp_path) -> None:
    (tmp_path / "long.toml").write_text(_LONG)
    process = subprocess.Popen(
        [sys.executable, "-m", "fedrecsim.cli", "run", "long.toml", "--quiet", "--out", "run", "--checkpoint-every", "25"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    checkpoint = work_folder(tmp_path / "run") / CHECKPOINT_FILE
    deadline = time.monotonic() + _PROCESS_TIMEOUT_S
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=_PROCESS_TIMEOUT_S) == -signal.SIGKILL, "the run ended before it could be killed"
    assert not (tmp_path / "run").exists()
    killed_at = load(work_folder(tmp_path / "run")).round
    assert 25 <= killed_at < 400

    resumed = _command("--resume", "run", "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    uninterrupted = fedrecsim.run(fedrecsim.load_scenario(tmp_path / "long.toml"))
    written = json.loads((tmp_path / "run" / "result.json").read_text())
    assert written["transcript_xxh3_128"] == uninterrupted.transcript_xxh3_128
    assert written["metrics"] == json.loads(json.dumps(uninterrupted.result["metrics"]))
    assert written["ledger"] == json.loads(json.dumps(uninterrupted.result["ledger"]))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["long.toml", "run"]


@pytest.mark.parametrize("args, problem", [
    (["--resume", "run", "long.toml"], "--resume: continues the checkpoint's own scenario and settings; drop a scenario file"),
    (["--resume", "run", "--seed", "3", "--transcript"], "--resume: continues the checkpoint's own scenario and settings; drop --seed, --transcript"),
    ([], "run: name a scenario file, or --resume DIR to continue an interrupted run"),
    (["long.toml", "--checkpoint-every", "2"], "--checkpoint-every: needs --out DIR"),
    (["long.toml", "--out", "run", "--checkpoint-every", "2", "--transport", "tcp"], "--checkpoint-every: not available with --transport tcp"),
    (["--resume", "run"], "checkpoint.pkl: no checkpoint here"),
    (["long.toml", "--out", "run", "--checkpoint-every", "400"],
     "--checkpoint-every: 400 would save no checkpoint: one is saved at the end of a round before the last, "
     "and the longest run here has 400 rounds (use 1 to 399)"),
    (["long.toml", "--out", "run", "--checkpoint-every", "1", "--set", "run.rounds=1"],
     "--checkpoint-every: 1 would save no checkpoint: one is saved at the end of a round before the last, "
     "and the longest run here has 1 round (no interval saves one)"),
])
def test_the_command_refuses_what_cannot_be_checkpointed_or_resumed_in_one_line(tmp_path, args, problem) -> None:
    (tmp_path / "long.toml").write_text(_LONG)
    finished = _command(*args, cwd=tmp_path)
    assert finished.returncode == 2
    assert finished.stderr.startswith("fedrecsim: error: ") and problem in finished.stderr
    assert "Traceback" not in finished.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["long.toml"]



@pytest.mark.parametrize("held", [{"notes.txt": b"mine"}, {}])
def test_a_checkpoint_folder_without_a_checkpoint_is_refused_as_no_interrupted_run_and_left_alone(
    tmp_path, capsys, held
) -> None:
    """A user's folder where the checkpoints would go is not called an interrupted run to resume (before:
    "holds the checkpoints of an interrupted run ...: resume it", and --resume then found no checkpoint)."""
    from fedrecsim.cli import main

    (tmp_path / "long.toml").write_text(_LONG)
    folder = work_folder(tmp_path / "run")
    folder.mkdir()
    for name, content in held.items():
        (folder / name).write_bytes(content)
    assert main(["run", str(tmp_path / "long.toml"), "--checkpoint-every", "2", "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert f"{folder}: exists and holds no checkpoint" in error and "--resume" not in error, error
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == held
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["long.toml", folder.name])


# --------------------------------------------------------------------------- sweeps

_SWEPT = _LONG.replace("rounds = 400", "rounds = 300")


def _sweep_command(scenario: Path, out: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "fedrecsim.cli", "sweep", str(scenario), "--grid", "protocol.d=2,3", "--workers", "1",
            "--quiet", "--out", str(out), *more]


def _checkpoints_in(sweep: Path) -> list[Path]:
    runs = sweep / "runs"
    return sorted(runs.glob(f".*.checkpoints/{CHECKPOINT_FILE}")) if runs.is_dir() else []


@pytest.mark.timeout(120)
def test_a_sweep_killed_in_the_middle_of_a_run_resumes_it_from_its_checkpoint(tmp_path) -> None:
    from fedrecsim.sweep import load_study, read_csv, run_sweep

    scenario = tmp_path / "swept.toml"
    scenario.write_text(_SWEPT)
    run_sweep(load_study(scenario, grid=["protocol.d=2,3"]), tmp_path / "reference", workers=1)

    killed = subprocess.Popen(_sweep_command(scenario, tmp_path / "sweep", "--checkpoint-every", "20"), start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + _PROCESS_TIMEOUT_S
    while not _checkpoints_in(tmp_path / "sweep") and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(killed.pid, signal.SIGKILL)  # the sweep and its worker, as a crash would
    killed.wait()
    [checkpoint] = _checkpoints_in(tmp_path / "sweep")
    assert 20 <= load(checkpoint.parent).round < 300

    resumed = subprocess.run(_sweep_command(scenario, tmp_path / "sweep", "--checkpoint-every", "20"),
                             capture_output=True, text=True, check=False, timeout=_PROCESS_TIMEOUT_S)
    assert resumed.returncode == 0, resumed.stderr
    assert "2 runs (0 already complete, 2 ran, 0 failed)" in resumed.stdout
    without_wall_time = [
        [{key: value for key, value in row.items() if key != "wall_time_s"} for row in read_csv(folder / "sweep.csv")]
        for folder in (tmp_path / "sweep", tmp_path / "reference")
    ]
    assert without_wall_time[0] == without_wall_time[1]
    assert _checkpoints_in(tmp_path / "sweep") == [] and not any((tmp_path / "sweep" / "runs").glob(".*"))


def test_a_sweep_worker_resumes_a_run_from_the_checkpoint_it_finds(tmp_path, monkeypatch) -> None:
    from fedrecsim import sweep

    tables = SCENARIOS["dpmf S1"]
    out = tmp_path / "runs" / "a-run"
    out.parent.mkdir()
    with pytest.raises(Interrupted):
        fedrecsim.run(tables, out=out, checkpoint_every=1, progress=InterruptAfter(3))
    resumed: list[Path] = []
    monkeypatch.setattr(sweep, "resume", lambda folder: resumed.append(folder) or fedrecsim.resume(folder))
    scenario_table = fedrecsim.parse_scenario(tables).to_table()
    assert sweep.execute(scenario_table, str(out), 1) == {"stored": True}
    assert resumed == [out]
    written = json.loads((out / "result.json").read_text())
    assert written["transcript_xxh3_128"] == fedrecsim.run(tables).transcript_xxh3_128


def test_a_sweep_refuses_checkpoints_it_cannot_keep(tmp_path, unresumable) -> None:
    from fedrecsim.sweep import load_study, run_sweep

    scenario = tmp_path / "swept.toml"
    scenario.write_text(_SWEPT)
    with pytest.raises(ConfigError, match=r"--checkpoint-every: needs the local engine: Dask workers do not share the sweep folder"):
        run_sweep(load_study(scenario), tmp_path / "sweep", dask="tcp://127.0.0.1:1", checkpoint_every=5)
    with pytest.raises(ConfigError, match=r"run.protocol: fedrecsim_checkpoint_test:UNRESUMABLE: this protocol cannot resume"):
        run_sweep(load_study(scenario, grid=['run.protocol="fcf","fedrecsim_checkpoint_test:UNRESUMABLE"']), tmp_path / "sweep", checkpoint_every=5)
    with pytest.raises(ConfigError, match=r"--checkpoint-every: 300 would save no checkpoint: .* the longest run here has 300 rounds \(use 1 to 299\)"):
        run_sweep(load_study(scenario, grid=["run.rounds=200,300"]), tmp_path / "sweep", checkpoint_every=300)
    assert not (tmp_path / "sweep").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["swept.toml"]


def test_a_checkpoint_due_while_a_user_is_not_at_rest_is_put_off_and_the_run_says_so(tmp_path, monkeypatch) -> None:
    """Stragglers left behind in a secure-aggregation stage are still waiting when a short round gap ends."""
    tables = copy.deepcopy(SCENARIOS["privirec-k, ideal secure aggregation: dropout, stragglers, an abort in round 3"])
    tables["run"]["round_gap_s"] = 1.0
    saves: list[int] = []
    monkeypatch.setattr(Checkpoints, "_write", lambda self, saved: saves.append(saved.round))
    result = fedrecsim.run(tables, out=tmp_path / "run", checkpoint_every=1)
    assert saves == []
    deferred = [warning for warning in result.result["warnings"] if "checkpoint(s) due at a round's end were put off" in warning]
    assert deferred and deferred[0].startswith(f"{result.result['rounds_completed']} checkpoint(s)")



def test_a_privirec_user_computing_its_power_input_at_a_checkpoint_sends_it_after_the_resume(tmp_path) -> None:
    """Heavy-tailed stragglers: a user is still computing A^(u)T A^(u) X when a round ends (and others are
    left behind in a stage, so later checkpoints are put off)."""
    tables = copy.deepcopy(SCENARIOS["privirec-k, ideal secure aggregation: dropout, stragglers, an abort in round 3"])
    tables["run"].update({"rounds": 5, "round_timeout_s": 300.0, "round_gap_s": 30.0})
    tables["availability"] = {"compute_median_s": 4.0, "compute_sigma": 1.5}
    tables["protocol"]["stage_timeout_s"] = 20.0
    uninterrupted = fedrecsim.run(tables)
    _, written = every_checkpoint(tables, tmp_path / "checkpointed")
    computing = [
        saved for saved in written
        if any(user["pending"] is not None and user["computing_until"] is not None for user in checkpoint_world(saved)["users"].values())
    ]
    assert computing
    for saved in computing:
        assert_same_run(resume_from(saved, tmp_path / f"resumed-{saved.round}"), uninterrupted)
