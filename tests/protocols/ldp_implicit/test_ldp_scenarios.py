"""The Minto et al. study scripts run as a user would run them, and say what they measured."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fedrecsim
from fedrecsim.network.party import Party, Role
from fedrecsim.network.wire import encode
from fedrecsim.protocols.ldp_implicit.messages import Model, Reports
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

ROOT = Path(__file__).resolve().parents[3]


def _script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scenarios" / name), *args],
        capture_output=True, text=True, check=False, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )


@pytest.mark.timeout(300)
def test_the_quick_tradeoff_study_prints_its_grid_from_a_sweep(tmp_path: Path) -> None:
    out = tmp_path / "tradeoff"
    completed = _script("minto_tradeoff.py", "--quick", "--workers", "2", "--out", str(out))
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert lines[0].startswith("HR@10, 150 users x 200 items, 4 epochs") and "random 0.100" in lines[0]
    assert lines[1].split() == ["eps", "\\", "k", "1", "100"]
    assert [line.split()[0] for line in lines[2:]] == ["0.5", "10"]
    with open(out / "sweep.csv", newline="") as handle:
        cells = list(csv.DictReader(handle))
    grid = [(float(cell["protocol.epsilon"]), int(cell["protocol.k"])) for cell in cells]
    assert grid == [(0.5, 1), (0.5, 100), (10.0, 1), (10.0, 100)]
    for cell in cells:
        assert cell["status"] == "complete" and 0.0 <= float(cell["hr@10.final"]) <= 1.0
        assert float(cell["privacy.epsilon_per_user_total"]) == pytest.approx(
            4 * float(cell["protocol.epsilon"]) * int(cell["protocol.k"])
        )
    # Every cell trains from the same data and initial V: the baseline is one number.
    assert len({cell["hr@10_mf_np.final"] for cell in cells}) == 1 and float(cells[0]["hr@10_mf_np.final"]) > 0.1


@pytest.mark.timeout(300)
def test_the_comm_cost_study_reports_exact_message_sizes(tmp_path: Path) -> None:
    completed = _script("minto_comm_cost.py", "--quick", "--out", str(tmp_path / "comm"))
    assert completed.returncode == 0, completed.stderr
    line = completed.stdout.strip()
    fields = dict(part.rstrip(":").split("=", 1) for part in line.split() if "=" in part)
    assert fields["items"] == "300" and fields["k"] == "100" and fields["users"] == "30"
    # Users 0..29 have one-byte indices on the wire, so every user's messages have the same size.
    model = len(encode(Party(Role.PROXY, 0), Party(Role.USER, 1), 1.0, Model(1, np.zeros((300, 5)))))
    reports = len(encode(Party(Role.USER, 1), Party(Role.PROXY, 0), 1.0,
                         Reports.pack(1, np.arange(100), np.ones(100, dtype=np.int8))))
    assert fields["download_per_user_epoch"] == f"{model:,}"
    assert fields["upload_per_user_epoch"] == f"{reports:,}"
    assert "(paper ~4k = 400 B)" in line
    # 30 users' 3,000 reports leave the proxy in one batch (batch_size 10,000).
    assert f"proxy_to_server_per_epoch={fields['proxy_to_server_per_epoch']} B in 1 batch (" in line


@pytest.mark.parametrize("name", ["minto_ldp.toml", "minto_comm_cost.toml"])
def test_the_scenario_files_train_at_a_tiny_size_with_min_users_scaled_down(name: str) -> None:
    """At 30 users the files' min_users (10,000 and 200) could never fill a pool, so nothing would be
    released; scaled to the 30 users, every epoch is one pool of all of them."""
    overrides = ["run.rounds=2", "data.users=30", "data.items=120", "data.ratings=900", "protocol.min_users=30"]
    result = fedrecsim.run(parse_scenario(apply_overrides(read_tables(ROOT / "scenarios" / name), overrides)))
    k = result.result["scenario"]["protocol"]["k"]
    assert all(row["reports"] == 30 * k and row["anonymity_set"] == 30 for row in result.rounds)
    assert all(row["reports_dropped"] == 0 for row in result.rounds)
    assert all(invariant["violations"] == 0 for invariant in result.result["invariants"])


def test_a_threshold_no_pool_can_reach_is_a_warning_and_the_baseline_sits_beside_hr() -> None:
    tables = read_tables(ROOT / "scenarios" / "minto_ldp.toml")
    overrides = ["run.rounds=1", "data.users=30", "data.items=120", "data.ratings=900"]
    starved = fedrecsim.run(parse_scenario(apply_overrides(tables, [*overrides, "protocol.min_users=31"])))
    assert starved.result["privacy"]["pools"]["releases"] == 0
    assert ["protocol.min_users = 31" in warning for warning in starved.result["warnings"]] == [True]
    fed = fedrecsim.run(parse_scenario(apply_overrides(read_tables(ROOT / "scenarios" / "minto_ldp.toml"),
                                                       [*overrides, "protocol.min_users=10"])))
    assert fed.result["warnings"] == []
    assert fed.result["metrics"]["baselines"]["hr@10"] == "hr@10_mf_np" and "hr@10_mf_np" in fed.metrics
