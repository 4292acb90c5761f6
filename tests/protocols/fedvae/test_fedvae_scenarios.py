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
    assert "SecureFilter keeps n - f by default (``krum_m = 0``: Multi-Krum)" in " ".join(fedvae_protocol.__doc__.split())


def test_the_scenario_files_filter_with_multi_krum_keeping_n_minus_f_as_the_protocol_does_by_default() -> None:
    for name in ("fedvae_ml1m_shape.toml", "fedvae_byzantine.toml"):
        protocol = parse_scenario(read_tables(ROOT / "scenarios" / name)).protocol
        assert (protocol.secure_filter, protocol.krum_m, protocol.krum_f) == ("krum", 0, 0.1), name
    for name in ("fedvae_ml1m_shape.toml", "fedvae_byzantine.toml"):
        # At the tiny size every one of the 32 training users is sampled (R >= 32): f = floor(3.2) = 3, 29 kept.
        rows = run_file(name, "run.rounds=2").rounds
        assert [(row["gradients"], row["krum_f"], row["kept"]) for row in rows] == [(32, 3, 29)] * 2, name


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


def load_study(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scenarios" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_rows(lines: list[str]) -> list[list[float]]:
    return [[float(value) for value in line.split()] for line in lines if re.fullmatch(r"\s*\d+(\s+[01]\.\d{4}){7}", line)]


def test_the_convergence_study_prints_fedvae_beside_mult_vae_and_multi_krum_holds_where_plain_averaging_falls(tmp_path) -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scenarios" / "fedvae_convergence.py"), "--quick", "--out", str(tmp_path / "study")],
        capture_output=True, text=True, check=False, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert lines[0].startswith("FedVAE vs centralized Mult-VAE, NDCG@100 of the held-out users per epoch: ")
    assert "48 training users x 80 items, R = 20 (3 rounds an epoch)" in lines[0] and "5 attackers (10%)" in lines[0]
    assert lines[2].split() == ["epoch", "Mult-VAE", "Multi-Krum", "Krum", "none", "Multi-Krum", "Krum", "none"]
    rows = table_rows(lines)
    assert [row[0] for row in rows] == [1, 2, 3] and lines[3:6] == lines[3:3 + len(rows)]
    _, multvae, clean_multi, clean_krum, clean_none, attacked_multi, attacked_krum, attacked_none = rows[-1]
    # Under attack, plain averaging does worse than Multi-Krum, and Multi-Krum keeps 90 % of its attack-free NDCG@100.
    assert attacked_none < attacked_multi and attacked_multi >= 0.9 * clean_multi
    assert re.fullmatch(r"first epoch at 95% of Mult-VAE's last NDCG@100 \(0\.\d{4} -> 0\.\d{4}\), no attackers: "
                        r"Multi-Krum: .+, Krum: .+, none: .+", lines[6]), lines[6]
    assert lines[7].startswith("Meaning: after 3 epochs FedVAE with Multi-Krum is at ") and lines[7].endswith(
        "the filter is what holds the model."
    )
    # The printed numbers are the runs': the attack-free Multi-Krum column and Mult-VAE's are those of the
    # scenario file run at the quick size with the protocol's default filter.
    study = load_study("fedvae_convergence")
    overrides = [*study.base_overrides("quick", None, []), "run.rounds=9", "protocol.byzantine_fraction=0"]
    direct = fedrecsim.run(fedrecsim.load_scenario(study.SCENARIO, overrides)).result["metrics"]["final"]
    assert (round(direct["ndcg@100"], 4), round(direct["ndcg@100_multvae"], 4)) == (clean_multi, multvae)


def test_the_convergence_study_reads_the_real_movielens_1m_with_the_papers_preparation(tmp_path, capsys) -> None:
    rng = np.random.default_rng(0)
    lines = []
    for user in range(1, 81):
        for movie in rng.choice(np.arange(1, 101), size=30, replace=False):
            lines.append(f"{user}::{movie}::{rng.integers(1, 6)}::978300760")
    (tmp_path / "ratings.dat").write_text("\n".join(lines) + "\n")
    study = load_study("fedvae_convergence")
    assert study.main(["--quick", "--epochs", "1", "--data", str(tmp_path), "--out", str(tmp_path / "study")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert f"MovieLens-1M from {tmp_path} (ratings >= 4, binarized, users with >= 5)" in printed[0]
    assert len(table_rows(printed)) == 1
    assert study.run_script(study.main, ["--quick", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "other")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and ": error: " in error[0] and "missing" in error[0]
    assert not (tmp_path / "other").exists()
