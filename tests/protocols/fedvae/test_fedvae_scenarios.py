"""The FedVAE scenario files and the decay study, as a user runs them, at a tiny size."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fedrecsim
from fedrecsim.protocols.fedvae import protocol as fedvae_protocol
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

ROOT = Path(__file__).resolve().parents[3]
TINY = ["run.rounds=2", "data.users=40", "data.items=60", "data.ratings=800", "data.test_fraction=0.2",
        "protocol.hidden=32", "protocol.latent=8"]


def run_file(name: str, *overrides: str) -> fedrecsim.RunResult:
    return fedrecsim.run(parse_scenario(apply_overrides(read_tables(ROOT / "scenarios" / name), [*TINY, *overrides])))


@pytest.mark.timeout(300)
def test_the_decay_study_prints_ndcg_per_epoch_for_each_gamma_beside_mult_vae(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scenarios" / "fedvae_decay.py"), "--quick", "--out", str(tmp_path / "decay")],
        capture_output=True, text=True, check=False, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert lines[0].startswith("FedVAE NDCG@100 per epoch: ") and "delta = 0.9" in lines[0] and "R = 20" in lines[0]
    assert "SecureFilter = Multi-Krum keeping n - f with f = floor(0.1 n)" in lines[0]
    assert lines[1].split() == ["epoch", "gamma=0", "gamma=1", "gamma=3", "gamma=5", "Mult-VAE"]
    rows = [line.split() for line in lines[2:4]]
    assert [row[0] for row in rows] == ["1", "2"]
    assert all(0.0 < float(value) <= 1.0 for row in rows for value in row[1:])
    assert re.fullmatch(r"first epoch at 95% of Mult-VAE's last NDCG@100 \(0\.\d{4} -> 0\.\d{4}\): "
                        r"gamma=0: .+, gamma=1: .+, gamma=3: .+, gamma=5: .+", lines[4]), lines[4]


def test_the_decay_study_filters_as_the_protocol_docstring_says_multi_krum_keeping_n_minus_f() -> None:
    spec = importlib.util.spec_from_file_location("fedvae_decay", ROOT / "scenarios" / "fedvae_decay.py")
    assert spec is not None and spec.loader is not None
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    scenario = parse_scenario(apply_overrides(read_tables(study.SCENARIO), [*study.SIZES["quick"], *study.FILTER]))
    assert (scenario.protocol.secure_filter, scenario.protocol.krum_m, scenario.protocol.krum_f) == ("krum", 0, 0.1)
    assert "The decay study (``scenarios/fedvae_decay.py``) runs Multi-Krum keeping n - f" in " ".join(
        fedvae_protocol.__doc__.split()
    )
    # The file itself keeps Krum's single choice, for its byzantine users.
    assert parse_scenario(read_tables(study.SCENARIO)).protocol.krum_m == 1


def test_the_comm_cost_file_shows_what_sparse_first_layer_rows_save() -> None:
    dense = run_file("fedvae_comm_cost.toml")
    sparse = run_file("fedvae_comm_cost.toml", "protocol.sparse=true")
    per_message = {}
    for name, result in (("dense", dense), ("sparse", sparse)):
        kinds = result.result["ledger"]["kinds"]
        upload = kinds["fedvae.sparse_gradient" if name == "sparse" else "fedvae.gradient"]
        per_message[name] = upload["bytes"] / upload["msgs"]
        assert kinds["fedvae.model"]["msgs"] == upload["msgs"]
    # 60 items x 32 hidden of W1 out of 5,412 parameters: the sparse upload keeps a few of W1's 60 rows.
    assert per_message["sparse"] < 0.7 * per_message["dense"]
    assert np.array_equal(dense.outcome.state["omega"], sparse.outcome.state["omega"])


def test_the_byzantine_file_attacks_with_a_tenth_of_the_users_and_krum_keeps_them_out() -> None:
    krum = run_file("fedvae_byzantine.toml", "run.rounds=4")
    assert len(krum.outcome.state["attackers"]) == 3  # 10 % of the 32 training users (8 of 40 held out), rounded
    assert all(row["byzantine_kept"] == 0 for row in krum.rounds)
    averaging = run_file("fedvae_byzantine.toml", "run.rounds=4", 'protocol.secure_filter="none"')
    assert sum(row["byzantine_kept"] for row in averaging.rounds) == sum(row["byzantine_sampled"] for row in averaging.rounds) > 0
