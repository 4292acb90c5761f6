"""Ribero et al.'s protocol end to end: exactly two rounds, the bytes of Table 1, the privacy report,
silo partitions (zip codes, uniform, Dirichlet) and the errors a user can act on."""

from __future__ import annotations

from pathlib import Path

import msgpack
import numpy as np
import pytest

import fedrecsim
from fedrecsim.data.silos import NON_NUMERIC_ZIP_SILO, dirichlet_partition, uniform_partition
from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.prototypes.messages import ItemFactors, Prototypes
from fedrecsim.scenario import parse_scenario
from fedrecsim.testing import wire_size

USERS, ITEMS, K, RANK, SILOS = 60, 40, 4, 3, 3


def _tables(**protocol: object) -> dict:
    return {
        "run": {"protocol": "prototypes", "seed": 3, "rounds": 2},
        "data": {"source": "synthetic", "feedback": "counts", "users": USERS, "items": ITEMS, "ratings": 1200,
                 "rank": 3, "split": "users", "test_fraction": 0.2, "test_entries": 5, "silos": SILOS},
        "network": {"latency": {"model": "constant", "seconds": 0.05}},
        "protocol": {"k": K, "rank": RANK, "support": 10, "nmf_iterations": 30, "baselines": False, **protocol},
    }


def _framed(message_bytes_when_empty: int, payload_values: int, ndim: int = 2) -> int:
    """The wire size of a message whose one float64 array holds ``payload_values`` values.

    The framing is what the empty message (a 0 x 0 array) occupies; the array's bytes add ``8 *
    payload_values``, and msgpack's ext length prefix grows with the payload (ext8 -> ext16 -> ext32).
    """
    header = 2 + 4 * ndim  # dtype code and ndim, then one uint32 per dimension (wire.py's array header)
    empty_ext = len(msgpack.packb(msgpack.ExtType(1, b"\0" * header)))
    full_ext = len(msgpack.packb(msgpack.ExtType(1, b"\0" * (header + 8 * payload_values))))
    return message_bytes_when_empty - empty_ext + full_ext


def test_exactly_two_rounds_and_the_bytes_per_silo_are_k_n_up_and_l_n_down() -> None:
    result = fedrecsim.run(parse_scenario(_tables()))
    per_round = result.result["ledger"]["per_round"]
    assert [row["round"] for row in per_round if row["bytes"]] == [1, 2]
    assert [row["msgs"] for row in per_round if row["bytes"]] == [SILOS, SILOS]
    assert result.result["rounds_completed"] == 2
    silo, kinds = Party(Role.SILO, 0), result.result["ledger"]["kinds"]
    assert set(kinds) == {"prototypes.prototypes", "prototypes.item_factors"}
    up = _framed(wire_size(silo, SERVER, Prototypes(np.zeros((0, 0)))), K * ITEMS)
    down = _framed(wire_size(SERVER, silo, ItemFactors(np.zeros((0, 0)))), RANK * ITEMS)
    for index in range(SILOS):
        counters = result.result["ledger"]["parties"][f"silo:{index}"]
        assert (counters["sent_bytes"], counters["recv_bytes"]) == (up, down)
        assert (counters["sent_msgs"], counters["recv_msgs"]) == (1, 1)
    server = result.result["ledger"]["parties"]["server:0"]
    assert (server["recv_bytes"], server["sent_bytes"]) == (SILOS * up, SILOS * down)


def test_the_privacy_report_splits_epsilon_exactly_and_metrics_are_reported() -> None:
    result = fedrecsim.run(parse_scenario(_tables(epsilon=0.5)))
    privacy = result.result["privacy"]
    assert privacy["epsilon"] == 0.5 and privacy["delta"] == 0.0
    assert sum(privacy["split"].values()) == pytest.approx(0.5, rel=1e-12)
    assert privacy["split_total"] == pytest.approx(0.5)
    final = result.result["metrics"]["final"]
    assert {"test_rmse", "mean_rank", "map@10"} <= set(final)
    assert 0.0 <= final["mean_rank"] <= 1.0
    assert result.result["invariants"][0]["violations"] == 0


def test_the_same_seed_gives_the_same_transcript_and_metrics() -> None:
    first = fedrecsim.run(parse_scenario(_tables()))
    second = fedrecsim.run(parse_scenario(_tables()))
    hashes = [key for key in first.result if key.startswith("transcript_")]
    assert hashes and all(first.result[key] == second.result[key] for key in hashes)
    assert first.result["metrics"] == second.result["metrics"]


def test_baselines_are_reported_with_their_suffixes_and_paired_with_kmeans() -> None:
    result = fedrecsim.run(parse_scenario(_tables(baselines=True)))
    final = result.result["metrics"]["final"]
    for suffix in ("full", "local", "kmeans", "exemplars", "random"):
        for metric in ("test_rmse", "mean_rank", "map@10"):
            assert f"{metric}_{suffix}" in final
    assert result.outcome.baselines == {
        "test_rmse": "test_rmse_kmeans", "mean_rank": "mean_rank_kmeans", "map@10": "map@10_kmeans"
    }


def test_rounds_other_than_two_are_refused_naming_the_key() -> None:
    tables = _tables()
    tables["run"]["rounds"] = 5
    with pytest.raises(ConfigError, match="run.rounds"):
        fedrecsim.run(parse_scenario(tables))


def test_a_zip_partition_of_data_without_zip_codes_is_a_config_error_naming_the_key() -> None:
    tables = _tables()
    tables["data"]["silo_partition"] = "zip"
    with pytest.raises(ConfigError, match="data.silo_partition"):
        fedrecsim.run(parse_scenario(tables))


def write_movielens_100k(folder: Path, zips: list[str], items: int = 30, per_user: int = 12, seed: int = 0) -> Path:
    """A tiny ml-100k folder: u.data (tab-separated ratings) and u.user (pipe-separated, zip last)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for user in range(1, len(zips) + 1):
        for item in rng.choice(items, size=per_user, replace=False) + 1:
            lines.append(f"{user}\t{item}\t{int(rng.integers(1, 6))}\t88125{user:04d}")
    (folder / "u.data").write_text("\n".join(lines) + "\n")
    (folder / "u.user").write_text(
        "".join(f"{user}|30|M|engineer|{code}\n" for user, code in enumerate(zips, 1))
    )
    return folder


def test_zip_silos_follow_the_first_digit_and_non_numeric_zips_get_their_own(tmp_path: Path) -> None:
    zips = ["02139", "10001", "T8H1N", "19104", "02115", "V3N4P"] * 5
    folder = write_movielens_100k(tmp_path / "ml", zips)
    tables = _tables(k=2)
    tables["data"] = {"source": "movielens-100k", "path": str(folder), "silo_partition": "zip",
                      "split": "users", "test_fraction": 0.2}
    result = fedrecsim.run(parse_scenario(tables))
    silos = {party.index: users for party, users in result.outcome.state["silo_users"].items()}
    assert sorted(silos) == [0, 1, NON_NUMERIC_ZIP_SILO]
    # Dense user u is MovieLens id u + 1 (ids run 1..n here).
    expected = {0: [0, 4], 1: [1, 3], NON_NUMERIC_ZIP_SILO: [2, 5]}
    for label, positions in expected.items():
        assert sorted(set(silos[label] % 6)) == positions


def test_a_user_missing_from_u_user_is_a_dataset_error(tmp_path: Path) -> None:
    folder = write_movielens_100k(tmp_path / "ml", ["02139"] * 8)
    (folder / "u.user").write_text("1|30|M|engineer|02139\n")
    tables = _tables()
    tables["data"] = {"source": "movielens-100k", "path": str(folder), "silo_partition": "zip"}
    with pytest.raises(DatasetError, match="user 2"):
        fedrecsim.run(parse_scenario(tables))


def test_uniform_parts_differ_by_at_most_one_and_dirichlet_skews_sizes() -> None:
    rng = np.random.default_rng(0)
    sizes = np.bincount(uniform_partition(rng, 103, 10), minlength=10)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 103
    skewed = np.bincount(dirichlet_partition(rng, 10_000, 10, 0.1), minlength=10)
    even = np.bincount(dirichlet_partition(rng, 10_000, 10, 1000.0), minlength=10)
    assert skewed.std() > 5 * even.std()


def test_the_epsilon_k_study_runs_quick(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[3] / "scenarios" / "ribero_epsilon_k.py"
    completed = subprocess.run([sys.executable, str(script), "--quick", "--out", str(tmp_path / "study"), "--workers", "1"],
                               capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    summary = (tmp_path / "study" / "summary.csv").read_text().splitlines()
    assert len(summary) == 1 + 4  # epsilon {0.1, 10000} x k {2, 4}
    tables = completed.stdout.split("\n\n")
    assert [table.splitlines()[0] for table in tables] == ["k = 2", "k = 4"]
    for table in tables:
        first_cells = [row.split()[0] for row in table.splitlines()[2:] if not row.startswith("-")]
        assert first_cells == ["0.1", "10000", "kmeans", "exemplars", "full", "local", "random"]