"""The runner: result.json follows the contract, the folder is atomic, failures leave nothing."""

from __future__ import annotations

import csv
import json

import pytest

import fedrecsim
from fedrecsim.errors import DatasetError

CONTRACT_KEYS = {
    "fedrecsim_version", "scenario", "seed", "protocol", "rounds_completed", "virtual_time_s", "wall_time_s",
    "transcript_sha256", "metrics", "ledger", "invariants", "privacy", "format", "warnings", "data", "paper_figures",
}


def test_result_folder_follows_the_contract(tiny_fcf, tmp_path) -> None:
    out = tmp_path / "run"
    result = fedrecsim.run(tiny_fcf, out=out, transcript=True)
    document = json.loads((out / "result.json").read_text())
    assert set(document) == CONTRACT_KEYS
    assert document["rounds_completed"] == 5 and document["protocol"] == "fcf" and document["seed"] == 3
    assert document["scenario"]["run"]["rounds"] == 5
    assert set(document["metrics"]["final"]) >= {"train_rmse", "train_mae", "test_rmse", "test_mae"}
    assert [row["round"] for row in document["metrics"]["rounds"]] == [1, 2, 3, 4, 5]
    ledger = document["ledger"]
    assert set(ledger) == {"parties", "roles", "kinds", "per_round", "withheld"}
    assert ledger["roles"]["user"]["parties"] == 40
    assert set(ledger["parties"]["server:0"]) == {"sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs", "dropped_msgs"}
    assert ledger["kinds"]["fcf.item_vectors"]["msgs"] == 5 * 40
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert len(rows) == 5 and float(rows[-1]["test_rmse"]) == pytest.approx(document["metrics"]["final"]["test_rmse"])
    ledger_rows = list(csv.DictReader(open(out / "ledger.csv")))
    assert sum(int(row["sent_bytes"]) for row in ledger_rows) == sum(
        counters["sent_bytes"] for counters in ledger["roles"].values()
    )
    transcript = list(csv.DictReader(open(out / "transcript.csv")))
    assert sum(int(row["bytes"]) for row in transcript if row["status"] == "delivered") == sum(
        counters["recv_bytes"] for counters in ledger["roles"].values()
    )
    assert result.path == out.resolve()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_rerun_replaces_the_folder_whole(tiny_fcf, tmp_path) -> None:
    out = tmp_path / "run"
    fedrecsim.run(tiny_fcf, out=out)
    tiny_fcf["run"]["rounds"] = 2
    fedrecsim.run(tiny_fcf, out=out, overwrite=True)
    assert json.loads((out / "result.json").read_text())["rounds_completed"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_failed_run_leaves_no_folder(tiny_fcf, tmp_path) -> None:
    tiny_fcf["data"] = {"source": "movielens-100k", "path": str(tmp_path / "missing" / "u.data")}
    with pytest.raises(DatasetError):
        fedrecsim.run(tiny_fcf, out=tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_time_is_virtual(tiny_fcf) -> None:
    tiny_fcf["network"] = {"latency": {"model": "constant", "seconds": 3600.0}}
    tiny_fcf["run"].update({"round_gap_s": 7200.0, "round_timeout_s": 86400.0})
    result = fedrecsim.run(tiny_fcf)
    # Six two-hour gaps (the joins land in the first) and five rounds of two one-hour hops each.
    assert result.result["virtual_time_s"] == pytest.approx(6 * 7200 + 5 * 2 * 3600)
    assert all(row["participants"] == 40 for row in result.rounds)
    assert result.result["wall_time_s"] < 30


def test_an_error_raised_inside_the_protocol_reaches_the_caller_as_itself(tiny_fcf, tmp_path) -> None:
    tiny_fcf["data"].update({"feedback": "implicit", "split": "leave_one_out"})
    tiny_fcf["protocol"]["feedback"] = "implicit"
    # 60 items cannot supply 99 unseen negatives per user: the protocol refuses, from inside the run.
    with pytest.raises(fedrecsim.ConfigError, match="data.items"):
        fedrecsim.run(tiny_fcf, out=tmp_path / "run")
    assert list(tmp_path.iterdir()) == []
