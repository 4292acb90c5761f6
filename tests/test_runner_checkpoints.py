"""The runner's side of checkpoints (issue 18): `run(..., checkpoint_every=N, out=DIR)` and `resume(DIR)` --
what they refuse, what an interrupted, failed or completed run leaves, what a resumed run checks and
reports. tests/test_checkpoint.py resumes fourteen scenarios under faults; tests/test_checkpoint_file.py
tests the checkpoint file itself.
"""

from __future__ import annotations

import json
import pickle
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import fedrecsim
from fedrecsim.checkpoint import CHECKPOINT_FILE, Checkpoints, load, work_folder
from fedrecsim.errors import CheckpointError, ConfigError, Interrupted, OutputError
from fedrecsim.network.party import SERVER
from fedrecsim.protocols import ProtocolSpec
from fedrecsim.protocols.runtime import Outcome
from fedrecsim.testing import InterruptAfter, assert_same_run

_LOGNORMAL = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}

CHURN = {
    "run": {"protocol": "fcf", "seed": 3, "rounds": 6, "round_timeout_s": 5.0},
    "data": {"users": 20, "items": 30, "ratings": 300},
    "network": {"latency": _LOGNORMAL, "loss": 0.05},
    "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.6, "dropout": 0.1},
    "faults": {"byzantine": [{"party": "user:4", "corrupt": "shape"}], "slow": [{"party": "user:4", "delay_s": 8.0}]},
    "protocol": {"d": 3, "max_users": 12},
}
DPMF_S1 = {
    "run": {"protocol": "dpmf", "seed": 6, "rounds": 5}, "data": {"users": 20, "items": 30, "ratings": 300},
    "network": {"latency": _LOGNORMAL}, "protocol": {"scenario": "S1", "d": 3, "epsilon": 1.0},
}
RESUMABLE = "dpmf, fcf, fedvae, ldp_implicit, privirec, prototypes, secagg"


# --------------------------------------------------------------------------- interrupted, failed, completed


def test_an_interrupted_run_keeps_its_last_checkpoint_and_resume_completes_it(tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(CHURN, out=out, checkpoint_every=2, transcript=True, progress=InterruptAfter(5))
    assert sorted(path.name for path in tmp_path.iterdir()) == [work_folder(out).name]
    assert sorted(path.name for path in work_folder(out).iterdir()) == [CHECKPOINT_FILE]
    assert load(work_folder(out)).round == 4
    resumed = fedrecsim.resume(out)
    uninterrupted = fedrecsim.run(CHURN, transcript=True, out=tmp_path / "uninterrupted")
    assert_same_run(resumed, uninterrupted)
    assert (out / "transcript.csv").read_bytes() == (tmp_path / "uninterrupted" / "transcript.csv").read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run", "uninterrupted"]
    assert sorted(path.name for path in out.iterdir()) == ["ledger.csv", "metrics.csv", "result.json", "transcript.csv"]
    assert resumed.path == out


def test_a_resumed_run_interrupted_again_resumes_again_with_the_first_runs_settings(tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(CHURN, out=out, checkpoint_every=1, transcript=True, progress=InterruptAfter(2))
    with pytest.raises(Interrupted):
        fedrecsim.resume(out, progress=InterruptAfter(4))
    saved = load(work_folder(out))
    assert (saved.round, saved.scenario, saved.transcript, saved.every) == (3, fedrecsim.parse_scenario(CHURN), True, 1)
    resumed = fedrecsim.resume(out)
    uninterrupted = fedrecsim.run(CHURN, transcript=True, out=tmp_path / "uninterrupted")
    assert resumed.result["transcript_xxh3_128"] == uninterrupted.result["transcript_xxh3_128"]
    assert (out / "transcript.csv").read_bytes() == (tmp_path / "uninterrupted" / "transcript.csv").read_bytes()


def test_a_failed_run_removes_its_checkpoints(tmp_path) -> None:
    tables = {**CHURN, "run": {**CHURN["run"], "max_virtual_s": 12.0}}
    with pytest.raises(fedrecsim.PartyTimeout):
        fedrecsim.run(tables, out=tmp_path / "run", checkpoint_every=1)
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_interval_the_run_never_reaches_is_refused_before_it_starts(tmp_path, monkeypatch) -> None:
    """A checkpoint is saved at the end of a round before the last: an interval of at least the run's rounds
    would save none, silently, so it is refused and nothing is written."""
    saves: list[int] = []
    monkeypatch.setattr(Checkpoints, "_write", lambda self, saved: saves.append(saved.round))
    with pytest.raises(ConfigError, match=r"^--checkpoint-every: 5 would save no checkpoint: .* has 5 rounds \(use 1 to 4\)$"):
        fedrecsim.run(DPMF_S1, out=tmp_path / "run", checkpoint_every=5)
    assert saves == [] and list(tmp_path.iterdir()) == []
    fedrecsim.run(DPMF_S1, out=tmp_path / "again", checkpoint_every=4)
    assert saves == [4]


def test_a_run_stopped_before_its_first_checkpoint_leaves_nothing(tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(DPMF_S1, out=out, checkpoint_every=3, progress=InterruptAfter(2))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(fedrecsim.DatasetError):
        fedrecsim.run({"run": {"protocol": "fcf"}, "data": {"source": "filmtrust", "path": str(tmp_path / "missing.txt")}},
                      out=out, checkpoint_every=1)
    assert list(tmp_path.iterdir()) == []


def test_resume_removes_the_empty_staging_folders_a_killed_run_left_and_nothing_else(tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(DPMF_S1, out=out, checkpoint_every=1, progress=InterruptAfter(2))
    (tmp_path / ".run.partial-a1").mkdir()
    (tmp_path / ".run.partial-b2").mkdir()
    (tmp_path / ".run.partial-b2" / "notes.txt").write_text("someone's")
    (tmp_path / ".other.partial-c3").mkdir()
    fedrecsim.resume(out)
    assert sorted(path.name for path in tmp_path.iterdir()) == [".other.partial-c3", ".run.partial-b2", "run"]
    assert (tmp_path / ".run.partial-b2" / "notes.txt").read_text() == "someone's"


def test_resume_replaces_an_existing_result_folder_only_when_told_to(tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(DPMF_S1, out=out, checkpoint_every=1, progress=InterruptAfter(2))
    fedrecsim.run(DPMF_S1, out=tmp_path / "elsewhere")
    (tmp_path / "elsewhere").rename(out)  # a result of fedrecsim's where the resumed run goes
    with pytest.raises(OutputError, match=rf"^{out}: already exists"):
        fedrecsim.resume(out)
    assert (work_folder(out) / CHECKPOINT_FILE).exists()
    fedrecsim.resume(out, overwrite=True)
    assert json.loads((out / "result.json").read_text())["rounds_completed"] == 5
    assert not work_folder(out).exists()


def test_a_resumed_run_measures_its_wall_time_from_the_first_start(tmp_path, monkeypatch) -> None:
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(DPMF_S1, out=out, checkpoint_every=1, progress=InterruptAfter(2))
    saved = load(work_folder(out))
    (work_folder(out) / CHECKPOINT_FILE).write_bytes(pickle.dumps(type(saved)(**{**vars(saved), "wall_s": 500.0})))
    before = time.perf_counter()
    resumed = fedrecsim.resume(out)
    assert 500.0 < resumed.result["wall_time_s"] < 500.0 + (time.perf_counter() - before)


def test_a_runs_wall_time_is_the_time_it_took() -> None:
    before = time.perf_counter()
    result = fedrecsim.run(DPMF_S1)
    assert 0 < result.result["wall_time_s"] < time.perf_counter() - before


# --------------------------------------------------------------------------- what is refused


def test_checkpoints_need_a_result_folder_and_a_resumable_protocol(tmp_path, unresumable) -> None:
    with pytest.raises(ConfigError, match=r"^--checkpoint-every: needs --out DIR \(out=\.\.\.\): the checkpoints are kept "
                                          r"beside the result folder$"):
        fedrecsim.run(DPMF_S1, checkpoint_every=2)
    with pytest.raises(ConfigError, match=r"^run.protocol: fedrecsim_checkpoint_test:UNRESUMABLE: this protocol cannot resume "
                                          r"from checkpoints \(its ProtocolSpec is not resumable: docs/writing-a-protocol.md\); "
                                          rf"these can: {RESUMABLE}$"):
        fedrecsim.run(unresumable, out=tmp_path / "run", checkpoint_every=2)
    fedrecsim.run(unresumable, out=tmp_path / "without")  # no checkpoints asked: it runs
    assert sorted(path.name for path in tmp_path.iterdir()) == ["without"]


@pytest.mark.parametrize("every", [-1, True, 1.5, "2"])
def test_the_interval_is_a_whole_number_of_rounds(tmp_path, every: Any) -> None:
    with pytest.raises(ConfigError, match=rf"^--checkpoint-every: must be a number of rounds >= 1, got {every!r}$"):
        fedrecsim.run(DPMF_S1, out=tmp_path / "run", checkpoint_every=every)
    assert list(tmp_path.iterdir()) == []


def test_a_new_run_refuses_an_interrupted_runs_checkpoints_and_touches_nothing(tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(DPMF_S1, out=out, checkpoint_every=1, progress=InterruptAfter(3))
    kept = (work_folder(out) / CHECKPOINT_FILE).read_bytes()
    with pytest.raises(OutputError, match=rf"^{work_folder(out)}: holds the checkpoints of an interrupted run of {out}: "
                                          rf"resume it \(fedrecsim run --resume {out}\) or remove this folder$"):
        fedrecsim.run(DPMF_S1, out=out, checkpoint_every=1)
    assert (work_folder(out) / CHECKPOINT_FILE).read_bytes() == kept
    assert sorted(path.name for path in tmp_path.iterdir()) == [work_folder(out).name]


def test_resume_refuses_what_is_not_a_checkpoint_of_this_run(tmp_path) -> None:
    out = tmp_path / "run"
    path = work_folder(out) / CHECKPOINT_FILE
    with pytest.raises(CheckpointError, match=rf"^{path}: no checkpoint here"):
        fedrecsim.resume(out)
    work_folder(out).mkdir()
    path.write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match=rf"^{path}: does not read as a fedrecsim checkpoint"):
        fedrecsim.resume(out)
    path.write_bytes(pickle.dumps({"format": "something else"}))
    with pytest.raises(CheckpointError, match=rf"^{path}: is not a fedrecsim-checkpoint/1 checkpoint$"):
        fedrecsim.resume(str(out))
    assert sorted(path.name for path in tmp_path.iterdir()) == [work_folder(out).name]


def test_resume_refuses_a_checkpoint_of_another_version(tmp_path, monkeypatch) -> None:
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(DPMF_S1, out=out, checkpoint_every=1, progress=InterruptAfter(2))
    monkeypatch.setattr("fedrecsim.checkpoint.__version__", "0.0.0-other")
    with pytest.raises(CheckpointError, match=r"was written by fedrecsim 0.1.0; this is 0.0.0-other, which cannot resume it$"):
        fedrecsim.resume(out)


def test_resume_refuses_data_that_changed_since_the_checkpoint_and_keeps_it(tmp_path) -> None:
    ratings = tmp_path / "ratings.txt"  # FilmTrust's format: "user item rating", ratings 0.5 to 4
    rng = np.random.default_rng(1)
    pairs = sorted({(int(u), int(i)) for u, i in zip(rng.integers(1, 21, 400), rng.integers(1, 31, 400))})
    ratings.write_text("".join(f"{u} {i} {1 + (u + i) % 3}\n" for u, i in pairs))
    tables = {"run": {"protocol": "fcf", "rounds": 4}, "data": {"source": "filmtrust", "path": str(ratings)}, "protocol": {"d": 3}}
    out = tmp_path / "run"
    with pytest.raises(Interrupted):
        fedrecsim.run(tables, out=out, checkpoint_every=1, progress=InterruptAfter(2))
    original = ratings.read_text()
    ratings.write_text(original.replace(" 3\n", " 2\n", 1))
    with pytest.raises(CheckpointError, match=rf"^{work_folder(out)}: the run's data differ from those the checkpoint was "
                                              r"taken on \(a data file changed\?\)$"):
        fedrecsim.resume(out)
    assert (work_folder(out) / CHECKPOINT_FILE).exists() and not out.exists()
    ratings.write_text(original)  # put back: the resume goes through
    assert fedrecsim.resume(out).result["rounds_completed"] == 4


# --------------------------------------------------------------------------- checkpoints put off


@dataclass(frozen=True)
class NoConfig:
    pass


async def _restless_third_party(ctx: Any) -> Outcome:
    """Three rounds whose ends find a third party away from its resume point."""
    away = SimpleNamespace(party=SERVER, at_rest=lambda: False)
    for round_index in range(1, ctx.rounds + 1):
        ctx.progress(round_index)
        await ctx.end_round(round_index, None, {}, {}, resting=(away,))
    return Outcome(ctx.rounds, [], {})


def test_checkpoints_put_off_are_counted_in_the_warnings(tmp_path, monkeypatch, tiny_fcf) -> None:
    import sys
    import types

    module = types.ModuleType("fedrecsim_restless_test")
    module.RESTLESS = ProtocolSpec("restless", NoConfig, _restless_third_party, resumable=True)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    tiny_fcf["run"].update(protocol=f"{module.__name__}:RESTLESS", rounds=3)
    tiny_fcf["protocol"] = {}
    result = fedrecsim.run(tiny_fcf, out=tmp_path / "run", checkpoint_every=1)
    assert result.result["warnings"] == [
        "2 checkpoint(s) due at a round's end were put off to a later one: some party was not at a resume point then "
        "(e.g. a user still in a secure-aggregation stage it was left behind in); a longer run.round_gap_s lets such "
        "waits end within the gap"
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]
    assert "put off" not in " ".join(fedrecsim.run(tiny_fcf).result["warnings"])  # none asked, none put off
