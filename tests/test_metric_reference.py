"""The metric reference: every metric of every built-in protocol declared, printed and documented, and the
numbers a user reads beside a result (clipped errors, trivial predictors, warnings) as result.json and the
CLI show them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim.cli import main
from fedrecsim.metric_reference import REGENERATE_COMMAND, describe, metrics_text, reference_markdown, undeclared, value_range
from fedrecsim.protocols import built_in_protocols, protocol_spec

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
TINY = {"run": {"rounds": 2}, "data": {"users": 30, "items": 120, "ratings": 900}}

# Every built-in protocol at a tiny size, and the variants that report other metrics.
RUNS = {
    "fcf explicit": ("fcf_static.toml", {}),
    "fcf implicit": ("fcf_static.toml", {"protocol": {"feedback": "implicit"}, "data": {"feedback": "implicit", "split": "leave_one_out", "items": 300}}),
    "dpmf S1": ("hua_s1.toml", {}),
    "dpmf S2": ("hua_s2.toml", {}),
    "dpmf S3": ("hua_s3_dropout.toml", {}),
    "dpmf naive": ("hua_s2.toml", {"protocol": {"variant": "naive"}}),
    "ldp_implicit": ("minto_ldp.toml", {"protocol": {"min_users": 10}}),
    "fedvae": ("fedvae_byzantine.toml", {}),
    "privirec": ("privirec_small.toml", {}),
    "prototypes": ("ribero_synthetic.toml", {}),
    "secagg": ("secagg_small.toml", {}),
}


def _tables(file: str, extra: dict) -> dict:
    from fedrecsim.scenario import read_tables

    tables = read_tables(SCENARIOS / file)
    for overrides in (TINY, extra):
        for table, values in overrides.items():
            tables.setdefault(table, {}).update(values)
    return tables


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    return {name: fedrecsim.run(_tables(file, extra)).result for name, (file, extra) in RUNS.items()}


def test_the_runs_cover_every_built_in_protocol():
    assert {name.split()[0] for name in RUNS} == set(built_in_protocols())


@pytest.mark.parametrize("run", sorted(RUNS))
def test_every_metric_a_run_reports_is_declared(run, results):
    """A key of metrics.final or metrics.rounds the protocol does not declare fails here."""
    result = results[run]
    metrics = protocol_spec(result["protocol"]).metrics
    final = set(result["metrics"]["final"])
    per_round = {name for row in result["metrics"]["rounds"] for name in row} - {"round"}
    assert final and not undeclared(metrics, final | per_round), undeclared(metrics, final | per_round)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_every_reported_value_is_inside_its_declared_support(run, results):
    result = results[run]
    rows = [result["metrics"]["final"], *result["metrics"]["rounds"]]
    outside = [
        (name, value) for row in rows for name, value in row.items()
        if name != "round" and value is not None and not value_range(name)[0] <= value <= value_range(name)[1]
    ]
    assert not outside


def test_each_name_has_one_support_in_every_protocol():
    """value_range is per name: two protocols may not declare one name with different supports."""
    for name in built_in_protocols():
        for info in protocol_spec(name).metrics:
            for other in built_in_protocols():
                same = next((o for o in protocol_spec(other).metrics if o.name == info.name), None)
                assert same is None or (same.low, same.high) == (info.low, info.high), (name, other, info.name)


def test_value_range_of_declared_metrics():
    assert value_range("hr@10") == (0.0, 1.0)
    assert value_range("map@10_kmeans") == (0.0, 1.0)
    assert value_range("mean_rank") == (0.0, 1.0)
    assert value_range("tp_sent_b") == (0.0, math.inf)
    assert value_range("rho_short") == (0.0, 1.0)
    assert value_range("test_rmse_clipped") == (0.0, math.inf)
    assert value_range("err_increase") == (-math.inf, math.inf)
    assert value_range("no_such_metric") == (-math.inf, math.inf)
    assert describe("eta_skipped").unit == "items"


def test_committed_metrics_reference_is_what_the_generator_writes():
    committed = (ROOT / "docs" / "metrics-reference.md").read_text(encoding="utf-8")
    assert committed == reference_markdown(), f"docs/metrics-reference.md is stale; regenerate: {REGENERATE_COMMAND}"


def test_the_regenerate_command_prints_the_reference_and_nothing_on_stderr():
    done = subprocess.run([sys.executable, "-m", "fedrecsim.metric_reference"], check=True, capture_output=True)
    assert done.stdout.decode("utf-8") == reference_markdown()
    assert done.stderr == b""


def test_fedrecsim_metrics_prints_meaning_unit_and_support(capsys):
    assert main(["metrics", "dpmf"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in ("rho_short", "rho_scale_min", "items_updated", "eta_skipped", "tp_sent_b"):
        (line,) = [position for position, text in enumerate(lines) if text.startswith(f"  {name}: ")]
        assert lines[line + 1].strip(), name
    assert "  tp_sent_b: bytes, >= 0" in lines
    assert "  rho_short: fraction, [0, 1]" in lines
    assert metrics_text("dpmf") in metrics_text()


def test_fedrecsim_metrics_refuses_an_unknown_protocol(capsys):
    assert main(["metrics", "nope"]) == 2
    assert "run.protocol" in capsys.readouterr().err


def test_hua_s1_reports_clipped_and_trivial_errors_and_says_why_it_is_worse(results, tmp_path, capsys):
    """The S1 run at eps = 0.1: the raw errors are huge, the clipped ones stay within the scale's width,
    and the summary names the noise against the signal."""
    final = results["dpmf S1"]["metrics"]["final"]
    for split in ("train", "test"):
        assert final[f"{split}_rmse_clipped"] <= min(final[f"{split}_rmse"], 4.0)
        assert final[f"{split}_mae_clipped"] <= min(final[f"{split}_mae"], 4.0)
    assert final["test_rmse_mean_predictor"] < final["test_rmse_clipped"]
    worse = {entry["metric"]: entry for entry in results["dpmf S1"]["metrics"]["worse_than_trivial"]}
    assert {"test_rmse", "test_rmse_clipped", "err_mean"} <= set(worse)
    assert "noise" in worse["test_rmse"]["reason"] and "eps = 0.1" in worse["test_rmse"]["reason"]
    assert main(["run", str(SCENARIOS / "hua_s1.toml"), "--set", "data.users=30", "--set", "data.items=120",
                 "--set", "data.ratings=900", "--set", "run.rounds=2", "--out", str(tmp_path / "s1"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "clipped" in out and "trivial predictor" in out
    assert "WORSE THAN THE TRIVIAL PREDICTOR on err_mean" in out and "why: the noise eta_j" in out


def test_clipping_never_raises_an_error_and_takes_the_declared_scale(results):
    """Predictions clipped to [1, 5] (the data's declared scale): no clipped error exceeds the raw one, and
    none exceeds the scale's width."""
    for run in ("fcf explicit", "dpmf S1", "dpmf S2", "dpmf S3"):
        final = results[run]["metrics"]["final"]
        for name in ("train_rmse", "train_mae", "test_rmse", "test_mae"):
            assert final[f"{name}_clipped"] <= final[name] + 1e-12 and final[f"{name}_clipped"] <= 4.0


def test_a_random_ranking_is_the_trivial_predictor_of_hit_rates(results):
    for run in ("fcf implicit", "ldp_implicit"):
        metrics = results[run]["metrics"]
        negatives = metrics["final"].get("eval_negatives", 99)
        assert metrics["final"]["hr@10_random"] == pytest.approx(10 / (negatives + 1))
        assert metrics["trivial"]["hr@10"] == "hr@10_random"


def test_a_model_better_than_its_trivial_predictor_is_not_listed():
    """Metamorphic: the same fcf run, trained long enough, drops train_rmse below the mean predictor's and
    off the list, while a 1-round run has it on."""
    short = fedrecsim.run(_tables("fcf_static.toml", {"run": {"rounds": 1}})).result["metrics"]
    long = fedrecsim.run(_tables("fcf_static.toml", {"run": {"rounds": 100}, "protocol": {"gamma": 0.125}})).result["metrics"]
    assert "train_rmse" in {entry["metric"] for entry in short["worse_than_trivial"]}
    assert long["final"]["train_rmse"] < long["final"]["train_rmse_mean_predictor"]
    assert "train_rmse" not in {entry["metric"] for entry in long["worse_than_trivial"]}


def test_a_run_nobody_answers_warns_on_the_console_and_in_result_json(tmp_path, capsys):
    out = tmp_path / "silent"
    code = main([
        "run", str(SCENARIOS / "fcf_static.toml"), "--set", "data.users=30", "--set", "data.items=120",
        "--set", "data.ratings=900", "--set", "run.rounds=2", "--set", "run.round_timeout_s=0.0001",
        "--set", 'network.latency={model="constant",seconds=0.5}', "--out", str(out), "--quiet",
    ])
    assert code == 0
    printed = capsys.readouterr().out
    warnings = json.loads((out / "result.json").read_text())["warnings"]
    assert any("nobody answered in any of the 2 rounds" in warning and "round_timeout_s" in warning for warning in warnings)
    assert "WARNING: nobody answered in any of the 2 rounds" in printed


def test_a_run_someone_answers_has_no_such_warning(results):
    assert not any("nobody answered" in warning for result in results.values() for warning in result["warnings"])


def test_the_silo_protocol_summary_says_what_a_silo_only_run_has(tmp_path, capsys):
    assert main([
        "run", str(SCENARIOS / "ribero_synthetic.toml"), "--set", "data.users=30", "--set", "data.items=120",
        "--set", "data.ratings=900", "--set", "protocol.baselines=false", "--out", str(tmp_path / "r"), "--quiet",
    ]) == 0
    printed = capsys.readouterr().out
    assert "0 of them ever online" not in printed
    assert "parties: 10 silos and the server; the silos hold the 30 users of the data (users per silo: min 3, mean 3, max 3)" in printed


def test_the_random_ranking_expectation_is_what_random_scores_average_to():
    """Exact expectation against the mean over 400 random scorings (seeded), within 4 standard errors."""
    import numpy as np

    from fedrecsim.data.metrics import ndcg_at_k, random_ranking_expectation, recall_at_k
    from fedrecsim.data.ratings import Ratings

    rng = np.random.default_rng(5)
    train_pairs = {(u, i) for u in range(12) for i in rng.choice(30, size=1 + u % 7, replace=False)}
    test_pairs = {(u, i) for u in range(0, 12, 2) for i in rng.choice(30, size=1 + u % 4, replace=False)} - train_pairs
    train = Ratings(*(np.array(column) for column in zip(*sorted(train_pairs))), np.ones(len(train_pairs)), 12, 30, (0.0, 1.0))
    test = Ratings(*(np.array(column) for column in zip(*sorted(test_pairs))), np.ones(len(test_pairs)), 12, 30, (0.0, 1.0))
    expected = random_ranking_expectation(test, train, (3, 10))
    draws = [{**ndcg_at_k(rng.random((12, 30)), test, train, (3, 10)), **recall_at_k(rng.random((12, 30)), test, train, (3, 10))}
             for _ in range(400)]
    for name in ("ndcg@3", "ndcg@10", "recall@3", "recall@10"):
        values = np.array([draw[name] for draw in draws])
        assert abs(values.mean() - expected[f"{name}_random"]) <= 4 * values.std() / np.sqrt(values.size), name


def test_full_ranking_protocols_pair_their_metrics_with_a_random_ranking(results):
    for run, cutoff in (("fedvae", 100), ("privirec", 20)):
        metrics = results[run]["metrics"]
        assert metrics["trivial"][f"ndcg@{cutoff}"] == f"ndcg@{cutoff}_random"
        assert 0.0 < metrics["final"][f"ndcg@{cutoff}_random"] < 1.0


def test_the_chance_ranking_metrics_are_what_random_scores_average_to():
    """prototypes' mean_rank and MAP@k under random scores, against their exact expectation (400 seeded
    scorings, within 4 standard errors)."""
    import numpy as np

    from fedrecsim.data.ranking import chance_ranking_metrics, ranking_metrics
    from fedrecsim.data.ratings import Ratings

    rng = np.random.default_rng(9)
    train_pairs = {(u, i) for u in range(10) for i in rng.choice(25, size=2 + u % 5, replace=False)}
    test_pairs = sorted({(u, i) for u in range(10) for i in rng.choice(25, size=1 + u % 3, replace=False)} - train_pairs)
    train = Ratings(*(np.array(c) for c in zip(*sorted(train_pairs))), np.ones(len(train_pairs)), 10, 25, (0.0, 5.0))
    values = 1.0 + np.arange(len(test_pairs)) % 4
    test = Ratings(*(np.array(c) for c in zip(*test_pairs)), values, 10, 25, (0.0, 5.0))
    expected = chance_ranking_metrics(train, test, 5)
    draws = [ranking_metrics(lambda users: rng.random((users.size, 25)), train, test, 5) for _ in range(400)]
    for name in ("mean_rank", "map@5"):
        observed = np.array([draw[name] for draw in draws])
        assert abs(observed.mean() - expected[f"{name}_chance"]) <= 4 * observed.std() / np.sqrt(observed.size), name
