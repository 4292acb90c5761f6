"""The runner: result.json follows the contract, the folder is atomic, failures leave nothing."""

from __future__ import annotations

import csv
import json
import math
import sys
import types
from dataclasses import dataclass

import pytest
import trio

import fedrecsim
from fedrecsim.errors import DatasetError, WireError
from fedrecsim.network.wire import encode
from fedrecsim.sim import SERVER, Outcome, Party, ProtocolSpec, Role, message, param

CONTRACT_KEYS = {
    "fedrecsim_version", "scenario", "seed", "protocol", "rounds_completed", "virtual_time_s", "wall_time_s",
    "transcript_xxh3_128", "metrics", "ledger", "invariants", "privacy", "format", "warnings", "data", "paper_figures",
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


# Protocols of the tests' own, reached through run.protocol = "fedrecsim_runner_test_protocols:NAME".
MIB = 1024 * 1024


@message("runner_test.blob")
@dataclass(frozen=True)
class Blob:
    payload: bytes


@dataclass(frozen=True)
class SizedConfig:
    size: int = param(MIB, ge=1, doc="the exact encoded size of the one message sent")


async def _send_one_message_of_exact_size(ctx):
    """The server sends user:0 one message whose encoded envelope is exactly ``size`` bytes."""
    user = Party(Role.USER, 0)
    ctx.network.attach(SERVER)
    ctx.network.attach(user)
    probe = 100_000  # long enough that the bytes header has its final (bin 32) length
    overhead = len(encode(SERVER, user, trio.current_time(), Blob(b"x" * probe), max_bytes=2 * ctx.config.size)) - probe
    sent = ctx.network.send(SERVER, user, Blob(b"x" * (ctx.config.size - overhead)))
    await ctx.network.sleep(1.0)
    return Outcome(1, [{"round": 1, "sent_bytes": sent}], {"sent_bytes": sent})


@dataclass(frozen=True)
class NoConfig:
    pass


async def _two_tasks_fail(ctx):
    async def fail(error):
        raise error

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fail, ValueError("first party failed"))
        nursery.start_soon(fail, KeyError("second party failed"))
    return Outcome(0, [], {})


async def _nan_metric(ctx):
    return Outcome(1, [{"round": 1, "loss": math.nan}], {"loss": math.nan})


@pytest.fixture
def own_protocols(monkeypatch, tiny_fcf):
    module = types.ModuleType("fedrecsim_runner_test_protocols")
    module.SIZED = ProtocolSpec("sized", SizedConfig, _send_one_message_of_exact_size)
    module.TWO_FAILURES = ProtocolSpec("two_failures", NoConfig, _two_tasks_fail)
    module.NAN_METRIC = ProtocolSpec("nan_metric", NoConfig, _nan_metric)
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def scenario(name, **protocol_keys):
        tiny_fcf["run"]["protocol"] = f"{module.__name__}:{name}"
        tiny_fcf["protocol"] = dict(protocol_keys)
        return tiny_fcf

    return scenario


def test_max_message_mb_1_allows_exactly_one_mebibyte(own_protocols) -> None:
    scenario = own_protocols("SIZED", size=MIB)
    scenario["network"]["max_message_mb"] = 1
    result = fedrecsim.run(scenario)
    assert result.metrics["sent_bytes"] == MIB
    assert result.result["ledger"]["parties"]["user:0"]["recv_bytes"] == MIB


def test_max_message_mb_1_refuses_one_byte_more(own_protocols) -> None:
    scenario = own_protocols("SIZED", size=MIB + 1)
    scenario["network"]["max_message_mb"] = 1
    with pytest.raises(WireError, match=f"{MIB + 1} bytes exceeds the limit of {MIB}"):
        fedrecsim.run(scenario)


def test_several_task_failures_reach_the_caller_grouped(own_protocols, tmp_path) -> None:
    with pytest.raises(BaseExceptionGroup) as raised:
        fedrecsim.run(own_protocols("TWO_FAILURES"), out=tmp_path / "run")
    leaves = {str(error) for error in _leaves(raised.value)}
    assert leaves == {"first party failed", "'second party failed'"}
    assert list(tmp_path.iterdir()) == []


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    return [leaf for error in group.exceptions for leaf in (_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])]


@pytest.fixture
def failing_write(monkeypatch):
    """The disk fills up while the result folder is being written: after result.json, before ledger.csv."""

    def disk_full(self, path):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("fedrecsim.network.ledger.Ledger.write_csv", disk_full)


def test_a_failed_write_leaves_no_staging_folder(tiny_fcf, failing_write, tmp_path) -> None:
    with pytest.raises(OSError, match="No space left"):
        fedrecsim.run(tiny_fcf, out=tmp_path / "deeper" / "run")
    assert list(tmp_path.iterdir()) == []


async def test_a_failed_write_in_run_async_leaves_no_staging_folder(tiny_fcf, failing_write, tmp_path, autojump_clock) -> None:
    with pytest.raises(OSError, match="No space left"):
        await fedrecsim.run_async(tiny_fcf, out=tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_a_nan_metric_is_written_as_null_and_named_in_the_warnings(own_protocols, tmp_path) -> None:
    result = fedrecsim.run(own_protocols("NAN_METRIC"), out=tmp_path / "run")
    document = json.loads((tmp_path / "run" / "result.json").read_text())
    assert document["metrics"]["final"]["loss"] is None and document["metrics"]["rounds"][0]["loss"] is None
    assert document["warnings"] == ["not finite, written as null: metrics.final.loss, metrics.rounds[0].loss"]
    assert result.result == document


def test_the_progress_callback_receives_each_completed_round_of_the_total(tiny_fcf) -> None:
    calls = []
    fedrecsim.run(tiny_fcf, progress=lambda completed, total: calls.append((completed, total)))
    assert calls == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
