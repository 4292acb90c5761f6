"""The runner: result.json follows the contract, the folder is atomic, failures leave nothing."""

from __future__ import annotations

import csv
import json
import math
import sys
import types
from dataclasses import dataclass

import numpy as np
import pytest
import trio

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.errors import DatasetError, Interrupted, OutputError, WireError
from fedrecsim.network.wire import encode
from fedrecsim.scenario import parse_scenario
from fedrecsim.sim import (
    SERVER, InvariantMonitor, Outcome, PaperFigure, Party, ProtocolSpec, Role, message, param,
)

CONTRACT_KEYS = {
    "fedrecsim_version", "scenario", "seed", "protocol", "rounds_completed", "virtual_time_s", "wall_time_s",
    "transcript_xxh3_128", "metrics", "ledger", "invariants", "privacy", "format", "warnings", "data", "paper_figures",
    "distributions", "structure_xxh3_128", "platform", "timing",
}


def test_result_folder_follows_the_contract(tiny_fcf, tmp_path) -> None:
    out = tmp_path / "run"
    result = fedrecsim.run(tiny_fcf, out=out, transcript=True)
    document = json.loads((out / "result.json").read_text())
    assert set(document) == CONTRACT_KEYS
    assert document["timing"] == {}  # fcf times no part of its run
    assert document["rounds_completed"] == 5 and document["protocol"] == "fcf" and document["seed"] == 3
    assert document["scenario"]["run"]["rounds"] == 5
    assert set(document["metrics"]["final"]) >= {"train_rmse", "train_mae", "test_rmse", "test_mae"}
    assert [row["round"] for row in document["metrics"]["rounds"]] == [1, 2, 3, 4, 5]
    ledger = document["ledger"]
    assert set(ledger) == {
        "parties", "roles", "kinds", "per_round", "rounds_by_role", "setup_parties", "closing_parties", "withheld", "faults",
    }
    assert ledger["roles"]["user"]["parties"] == 40
    assert set(ledger["parties"]["server:0"]) == {"sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs", "dropped_msgs"}
    assert ledger["kinds"]["fcf.item_vectors"]["msgs"] == 5 * 40
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [row["round"] for row in rows] == ["0", "1", "2", "3", "4", "5"] and float(rows[-1]["test_rmse"]) == pytest.approx(document["metrics"]["final"]["test_rmse"])
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


async def _interrupted_at_start(ctx):
    raise KeyboardInterrupt


async def _interrupted_after_two_rounds(ctx):
    """Two rounds complete, then a Ctrl-C lands in one task while another fails: the errors come grouped."""
    ctx.progress(1)
    ctx.progress(2)

    async def fail(error):
        raise error

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fail, KeyboardInterrupt())
        nursery.start_soon(fail, ValueError("a party failed as well"))
    return Outcome(2, [], {})


@pytest.fixture
def own_protocols(monkeypatch, tiny_fcf):
    module = types.ModuleType("fedrecsim_runner_test_protocols")
    module.SIZED = ProtocolSpec("sized", SizedConfig, _send_one_message_of_exact_size)
    module.TWO_FAILURES = ProtocolSpec("two_failures", NoConfig, _two_tasks_fail)
    module.NAN_METRIC = ProtocolSpec("nan_metric", NoConfig, _nan_metric)
    module.INTERRUPTED_AT_START = ProtocolSpec("interrupted_at_start", NoConfig, _interrupted_at_start)
    module.INTERRUPTED_AFTER_TWO = ProtocolSpec("interrupted_after_two", NoConfig, _interrupted_after_two_rounds)
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def scenario(name, *, outcome=None, **protocol_keys):
        """The tiny scenario on protocol ``name``; with ``outcome``, a protocol that just returns it."""
        if outcome is not None:

            async def returning(ctx):
                return outcome

            setattr(module, name, ProtocolSpec(name.lower(), NoConfig, returning))
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
    with pytest.raises(BaseException) as raised:  # an Interrupted escaping must fail this test, not stop pytest
        fedrecsim.run(own_protocols("TWO_FAILURES"), out=tmp_path / "run")
    assert isinstance(raised.value, BaseExceptionGroup) and not isinstance(raised.value, KeyboardInterrupt)
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


def test_the_data_section_gives_the_shape_of_the_split(tiny_fcf) -> None:
    result = fedrecsim.run(tiny_fcf)
    train, test = prepare_data(parse_scenario(tiny_fcf).data, 3)
    assert result.result["data"] == {
        "users": train.n_users, "items": train.n_items, "train_entries": len(train), "test_entries": len(test),
    }
    assert result.result["data"]["users"] == 40 and result.result["data"]["items"] == 60
    assert len(train) + len(test) == 1200 and len(test) > 0


def test_a_scenario_file_can_be_run_by_its_path_as_str_or_path(tiny_fcf, tmp_path) -> None:
    path = tmp_path / "from-file.toml"
    path.write_text(
        '[run]\nprotocol = "fcf"\nname = "from-file"\nseed = 3\nrounds = 2\n'
        '[data]\nsource = "synthetic"\nusers = 40\nitems = 60\nratings = 1200\n'
        '[network.latency]\nmodel = "constant"\nseconds = 0.0\n'
        '[availability]\nmodel = "always"\n[protocol]\nd = 8\n'
    )
    tiny_fcf["run"].update({"name": "from-file", "rounds": 2})
    expected = fedrecsim.run(parse_scenario(tiny_fcf))
    for given in (path, str(path)):
        result = fedrecsim.run(given)
        assert result.result["scenario"]["run"]["name"] == "from-file" and result.result["rounds_completed"] == 2
        assert result.transcript_xxh3_128 == expected.transcript_xxh3_128


def test_anything_but_a_scenario_a_table_or_a_path_is_a_config_error() -> None:
    with pytest.raises(fedrecsim.ConfigError, match=r"^expected a Scenario, a table or a path, got int$") as raised:
        fedrecsim.run(42)
    assert raised.value.key_path == ""


def test_run_refuses_an_existing_folder_and_records_no_transcript_unless_asked(tiny_fcf, tmp_path) -> None:
    out = tmp_path / "run"
    tiny_fcf["run"]["rounds"] = 2
    first = fedrecsim.run(tiny_fcf, out=out)
    assert first.ledger.transcript is None
    assert sorted(p.name for p in out.iterdir()) == ["ledger.csv", "metrics.csv", "result.json"]
    tiny_fcf["run"]["rounds"] = 1
    with pytest.raises(OutputError, match="already exists"):
        fedrecsim.run(tiny_fcf, out=out)
    assert json.loads((out / "result.json").read_text())["rounds_completed"] == 2


async def test_run_async_has_runs_defaults_and_passes_its_options_on(tiny_fcf, tmp_path, autojump_clock) -> None:
    out = tmp_path / "run"
    tiny_fcf["run"]["rounds"] = 2
    calls = []
    first = await fedrecsim.run_async(tiny_fcf, out=out, progress=lambda completed, total: calls.append((completed, total)))
    assert calls == [(1, 2), (2, 2)]
    assert first.ledger.transcript is None
    assert sorted(p.name for p in out.iterdir()) == ["ledger.csv", "metrics.csv", "result.json"]
    with pytest.raises(OutputError, match="already exists"):
        await fedrecsim.run_async(tiny_fcf, out=out)
    second = await fedrecsim.run_async(tiny_fcf, out=out, overwrite=True, transcript=True)
    assert second.path == out.resolve()
    transcript = list(csv.DictReader(open(out / "transcript.csv")))
    assert len(transcript) == sum(second.ledger.party(party)["sent_msgs"] for party in second.ledger.parties())


async def test_run_async_measures_virtual_time_from_its_own_start(tiny_fcf, autojump_clock) -> None:
    tiny_fcf["network"] = {"latency": {"model": "constant", "seconds": 3600.0}}
    tiny_fcf["run"].update({"round_gap_s": 7200.0, "round_timeout_s": 86400.0, "rounds": 2})
    await trio.sleep(1000.0)  # the loop's clock no longer stands at 0
    result = await fedrecsim.run_async(tiny_fcf)
    # Three two-hour gaps (the joins land in the first) and two rounds of two one-hour hops each.
    assert result.result["virtual_time_s"] == pytest.approx(3 * 7200 + 2 * 2 * 3600)


def test_delivery_times_are_rounded_up_to_the_scenarios_resolution(tiny_fcf) -> None:
    tiny_fcf["network"] = {"latency": {"model": "constant", "seconds": 0.3}, "resolution_s": 1.0}
    tiny_fcf["run"].update({"round_gap_s": 7200.0, "round_timeout_s": 86400.0, "rounds": 2})
    result = fedrecsim.run(tiny_fcf)
    # Every 0.3 s hop takes a whole second: three gaps and two rounds of two hops.
    assert result.result["virtual_time_s"] == pytest.approx(3 * 7200 + 2 * 2 * 1.0)


def test_record_views_keeps_what_each_named_party_received_and_only_theirs(tiny_fcf) -> None:
    user = Party(Role.USER, 0)
    tiny_fcf["run"]["rounds"] = 2
    result = fedrecsim.run(tiny_fcf, record_views=[SERVER, user])
    assert set(result.views) == {SERVER, user}
    parties = result.result["ledger"]["parties"]
    assert len(result.views[SERVER]) == parties["server:0"]["recv_msgs"] > 0
    assert len(result.views[user]) == parties["user:0"]["recv_msgs"] > 0
    assert [envelope.kind for envelope in result.views[user]].count("fcf.item_vectors") == 2
    assert result.outcome.rounds_completed == 2 and result.outcome.state
    assert fedrecsim.run(tiny_fcf).views == {}


@pytest.mark.parametrize("model", ["dropout", "compute_median_s"])
def test_dropout_and_stragglers_are_simulated_for_a_protocol_whose_users_consult_them(tiny_fcf, model) -> None:
    tiny_fcf["run"].update({"round_gap_s": 100.0, "round_timeout_s": 1000.0, "rounds": 3})
    steady = fedrecsim.run(tiny_fcf)
    tiny_fcf["availability"][model] = {"dropout": 0.3, "compute_median_s": 5.0}[model]
    result = fedrecsim.run(tiny_fcf)
    assert result.result["warnings"] == []
    assert all(row["participants"] == 40 for row in steady.rounds)
    if model == "dropout":
        assert any(row["participants"] < 40 for row in result.rounds)  # some users crashed mid-round
    else:
        assert all(row["participants"] == 40 for row in result.rounds)
        # Each round waits for its slowest user's compute time (the median is 5 s, so the slowest of 40 more).
        assert result.result["virtual_time_s"] > steady.result["virtual_time_s"] + 3 * 5.0


def test_availability_models_no_user_consulted_are_named_in_the_warnings(own_protocols) -> None:
    scenario = own_protocols("QUIET", outcome=Outcome(1, [{"round": 1}], {}, warnings=["the protocol's own"]))
    scenario["availability"].update({"dropout": 0.25, "compute_median_s": 0.5})
    assert fedrecsim.run(scenario).result["warnings"] == [
        "availability.dropout = 0.25 was not simulated: "
        "no user of this protocol asked whether it crashes (User.crashes_in)",
        "availability.compute_median_s = 0.5 (stragglers) was not simulated: "
        "no user of this protocol spent its compute time (User.compute)",
        "the protocol's own",
    ]


def test_numpy_scalars_are_written_as_plain_json_numbers(own_protocols, tmp_path) -> None:
    outcome = Outcome(
        1,
        [{"round": 1, "loss": np.float32(0.25)}],
        {"loss": np.float32(0.25), "count": np.int64(7), "bad": np.float32("nan")},
        privacy={"per_round": (np.float64(0.5), 0.5)},
    )
    result = fedrecsim.run(own_protocols("NUMPY", outcome=outcome), out=tmp_path / "run")
    document = json.loads((tmp_path / "run" / "result.json").read_text())
    assert document == result.result
    final = result.result["metrics"]["final"]
    assert final == {"loss": 0.25, "count": 7, "bad": None}
    assert type(final["loss"]) is float and type(final["count"]) is int
    assert result.rounds == [{"round": 1, "loss": 0.25}] and type(result.rounds[0]["loss"]) is float
    assert result.result["privacy"] == {"per_round": [0.5, 0.5]}
    assert document["warnings"] == ["not finite, written as null: metrics.final.bad"]


NO_POPULATION = {
    "population": "", "population_size": 0, "population_samples": 0, "measured_max": None, "heaviest": None, "heaviest_label": "",
}


def test_privacy_paper_figures_and_baselines_are_reported_with_nulls_named(own_protocols) -> None:
    outcome = Outcome(
        1,
        [{"round": 1}],
        {"err": 0.5, "baseline_err": 0.4},
        privacy={"mechanism": "laplace", "epsilon": math.inf},
        baselines={"err": "baseline_err"},
        paper_figures=[PaperFigure("download", "<= 12 KB", math.nan, "B", "ring 32"), PaperFigure("upload", "1 KB", 3.0)],
    )
    document = fedrecsim.run(own_protocols("REPORTS", outcome=outcome)).result
    assert document["metrics"]["baselines"] == {"err": "baseline_err"}
    assert document["privacy"] == {"mechanism": "laplace", "epsilon": None}
    assert document["paper_figures"] == [
        {"quantity": "download", "paper": "<= 12 KB", "measured": None, "unit": "B", "setting": "ring 32", **NO_POPULATION},
        {"quantity": "upload", "paper": "1 KB", "measured": 3.0, "unit": "B", "setting": "", **NO_POPULATION},
    ]
    assert document["warnings"] == ["not finite, written as null: privacy.epsilon, paper_figures[0].measured"]


@pytest.mark.parametrize(
    ("count", "named"),
    [
        (5, "metrics.final.m0, metrics.final.m1, metrics.final.m2, metrics.final.m3, metrics.final.m4"),
        (6, "metrics.final.m0, metrics.final.m1, metrics.final.m2, metrics.final.m3, metrics.final.m4 and 1 more"),
        (8, "metrics.final.m0, metrics.final.m1, metrics.final.m2, metrics.final.m3, metrics.final.m4 and 3 more"),
    ],
)
def test_the_warning_names_the_first_five_null_values_and_counts_the_rest(own_protocols, count, named) -> None:
    outcome = Outcome(1, [], {f"m{index}": math.nan for index in range(count)})
    document = fedrecsim.run(own_protocols("MANY_NANS", outcome=outcome)).result
    assert document["warnings"] == [f"not finite, written as null: {named}"]


class _RatioMonitor(InvariantMonitor):
    """A monitor whose report carries a float outside the documented fields, here not a number."""

    def report(self):
        return {**super().report(), "ratio": math.nan}


def test_result_json_is_strict_json_a_stray_nan_fails_the_write_and_leaves_nothing(own_protocols, tmp_path) -> None:
    outcome = Outcome(1, [{"round": 1}], {}, invariants=[_RatioMonitor("ratio", "a ratio")])
    with pytest.raises(ValueError, match="not JSON compliant"):
        fedrecsim.run(own_protocols("RATIO", outcome=outcome), out=tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_result_json_is_indented_by_two_spaces_and_ends_with_a_newline(tiny_fcf, tmp_path) -> None:
    tiny_fcf["run"]["rounds"] = 1
    fedrecsim.run(tiny_fcf, out=tmp_path / "run")
    text = (tmp_path / "run" / "result.json").read_text()
    assert text.startswith('{\n  "format": "fedrecsim-result/1",\n  "fedrecsim_version": ')
    assert '\n  "metrics": {\n    "final": {\n      "' in text
    assert text.endswith("]\n}\n")


def test_an_interrupt_before_the_first_round_is_reported_as_interrupted_after_0_rounds(own_protocols, tmp_path) -> None:
    # Caught as any KeyboardInterrupt, so that a plain one escaping fails this test instead of stopping pytest.
    with pytest.raises(KeyboardInterrupt) as raised:
        fedrecsim.run(own_protocols("INTERRUPTED_AT_START"), out=tmp_path / "run")
    assert type(raised.value) is Interrupted and str(raised.value) == "interrupted after 0 of 5 rounds"
    assert (raised.value.completed, raised.value.total) == (0, 5)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_among_other_failures_is_reported_with_the_rounds_completed(own_protocols, tmp_path) -> None:
    with pytest.raises(BaseException) as raised:  # whatever escapes; it must be the one Interrupted
        fedrecsim.run(own_protocols("INTERRUPTED_AFTER_TWO"), out=tmp_path / "run")
    assert type(raised.value) is Interrupted and str(raised.value) == "interrupted after 2 of 5 rounds"
    assert (raised.value.completed, raised.value.total) == (2, 5)
    assert list(tmp_path.iterdir()) == []


def test_progress_true_draws_the_bar_on_stderr_and_false_draws_nothing(tiny_fcf, monkeypatch, capsys) -> None:
    tiny_fcf["run"]["rounds"] = 2
    fedrecsim.run(tiny_fcf, progress=False)
    fedrecsim.run(tiny_fcf, progress=None)
    assert capsys.readouterr().err == ""
    ticks = iter(range(0, 1000, 2))  # the bar draws after a second: each reading of its timer is 2 s later
    monkeypatch.setattr("fedrecsim.progress.time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    fedrecsim.run(tiny_fcf, progress=True)
    err = capsys.readouterr().err
    assert "] 1/2 rounds" in err and err.endswith("s\n")
    assert f"\r[{'#' * 30}] 2/2 rounds" in err


def test_repr_shows_name_protocol_rounds_three_metrics_and_the_fingerprint(tiny_fcf, own_protocols) -> None:
    tiny_fcf["run"]["rounds"] = 2
    result = fedrecsim.run(tiny_fcf)
    (a, va), (b, vb), (c, vc), *more = result.result["metrics"]["final"].items()
    assert more  # a fourth metric exists and is left out
    fingerprint = result.ledger.transcript_xxh3_128[:12]
    assert repr(result) == (
        f"<RunResult 'tiny' fcf, 2 rounds, {a}={va:.4g}, {b}={vb:.4g}, {c}={vc:.4g}, transcript {fingerprint}>"
    )
    empty = fedrecsim.run(own_protocols("EMPTY", outcome=Outcome(0, [], {})))
    assert repr(empty) == (
        f"<RunResult 'tiny' fedrecsim_runner_test_protocols:EMPTY, 0 rounds, "
        f"transcript {empty.ledger.transcript_xxh3_128[:12]}>"
    )


def test_the_scenarios_party_faults_and_slow_parties_reach_the_network(tiny_fcf) -> None:
    """user:1 crashes on its first message (its join) and user:2's messages take 50 s: neither is a member
    when round 1 selects; without the faults all 40 take part."""
    tiny_fcf["run"]["round_timeout_s"] = 5.0
    assert fedrecsim.run(tiny_fcf).result["metrics"]["rounds"][0]["participants"] == 40
    tiny_fcf["faults"] = {"crash": [{"party": "user:1"}], "slow": [{"party": "user:2", "delay_s": 50.0}]}
    result = fedrecsim.run(tiny_fcf).result
    assert result["metrics"]["rounds"][0]["participants"] == 38
    assert "user:1" not in result["ledger"]["parties"] and result["warnings"] == []


@dataclass(frozen=True)
class ForeverConfig:
    pass


async def _never_finishes(ctx):
    await trio.sleep_forever()


def test_a_run_that_never_finishes_stops_ten_minutes_before_its_horizon(monkeypatch, tiny_fcf) -> None:
    module = types.ModuleType("fedrecsim_runner_forever")
    module.FOREVER = ProtocolSpec("forever", ForeverConfig, _never_finishes)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    tiny_fcf["run"].update(protocol=f"{module.__name__}:FOREVER", rounds=2, round_gap_s=1.0, round_timeout_s=9.0)
    tiny_fcf["protocol"] = {}
    budget = (2 + 2) * (1.0 + 9.0) * 4 + 3600.0 - 600.0  # horizon_s less the margin
    with pytest.raises(fedrecsim.PartyTimeout, match=rf"^the run did not finish within its virtual-time budget of {budget:g} s "
                                                     r"\(run\.max_virtual_s\): stopped in round 0 of 2$"):
        fedrecsim.run(tiny_fcf)


def test_distributions_are_written_and_their_non_finite_values_named(own_protocols, tmp_path) -> None:
    outcome = Outcome(1, [], {}, distributions={"error": {"of": "rating error", "unit": "stars", "values": [0.5, math.inf]}})
    result = fedrecsim.run(own_protocols("DISTRIBUTED", outcome=outcome), out=tmp_path / "run")
    assert result.result["distributions"] == {"error": {"of": "rating error", "unit": "stars", "values": [0.5, None]}}
    assert result.result["warnings"] == ["not finite, written as null: distributions.error.values[1]"]
