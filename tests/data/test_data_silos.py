"""Silo partitions: uniform parts of (nearly) equal size, Dirichlet shares that skew the sizes, and zip
code silos by first digit from tiny MovieLens user files written here (non-numeric zips to silo 10),
with the errors a user can act on."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fedrecsim.data.ratings import Ratings
from fedrecsim.data.silos import (
    NON_NUMERIC_ZIP_SILO,
    SILO_STREAM_ID,
    dirichlet_partition,
    silo_assignment,
    uniform_partition,
    zip_partition,
)
from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.seeding import Stream, generator


@dataclass
class Spec:
    source: str = "synthetic"
    path: str = ""
    silo_partition: str = "uniform"
    silos: int = 10
    silo_alpha: float = 1.0


def users_only(n_users: int, user_ids: list[int] | None = None) -> Ratings:
    """Ratings with one entry per user (only the users matter to a partition)."""
    users = np.arange(n_users, dtype=np.int64)
    ids = None if user_ids is None else np.array(user_ids, dtype=np.int64)
    return Ratings(users, np.zeros(n_users, dtype=np.int64), np.ones(n_users), n_users, 1, (1.0, 5.0), user_ids=ids)


# ------------------------------------------------------------------ uniform and Dirichlet


@pytest.mark.parametrize(("n_users", "silos"), [(103, 10), (100, 10), (7, 3), (3, 5), (1, 1)])
def test_uniform_sizes_differ_by_at_most_one(n_users, silos) -> None:
    labels = uniform_partition(np.random.default_rng(0), n_users, silos)
    assert labels.dtype == np.int64 and labels.shape == (n_users,)
    sizes = np.bincount(labels, minlength=silos)
    assert sizes.size == silos and sizes.sum() == n_users
    assert set(sizes.tolist()) <= {n_users // silos, n_users // silos + 1}


def test_uniform_is_a_random_partition() -> None:
    first = uniform_partition(np.random.default_rng(1), 60, 3)
    second = uniform_partition(np.random.default_rng(2), 60, 3)
    assert not np.array_equal(first, second)
    # Not the round-robin assignment nor blocks: user 0's silo-mates are spread over all indices.
    assert not np.array_equal(first, np.arange(60) % 3)
    # Each user is equally likely to land in each silo: over 600 draws, user 0 is in silo 0 about 1/3.
    rng = np.random.default_rng(3)
    share = np.mean([uniform_partition(rng, 6, 3)[0] == 0 for _ in range(600)])
    assert share == pytest.approx(1 / 3, abs=0.08)  # binomial sd 0.019; 0.08 is over 4 of them


def test_dirichlet_labels_lie_in_range_and_small_alpha_skews_the_sizes() -> None:
    rng = np.random.default_rng(4)
    skewed = dirichlet_partition(rng, 10_000, 10, 0.1)
    even = dirichlet_partition(rng, 10_000, 10, 1000.0)
    for labels in (skewed, even):
        assert labels.dtype == np.int64 and labels.min() >= 0 and labels.max() < 10
    skewed_sizes = np.bincount(skewed, minlength=10)
    even_sizes = np.bincount(even, minlength=10)
    # alpha = 1000: shares 0.1 +- 0.003, so sizes 1000 +- ~43 (multinomial and share noise).
    assert np.abs(even_sizes - 1000).max() < 200
    # alpha = 0.1: a few silos hold most users (sizes 3540, 2393, 1878, ... here).
    assert skewed_sizes.max() > 2500 and skewed_sizes.std() > 5 * even_sizes.std()


def test_dirichlet_users_are_drawn_independently_from_the_shares() -> None:
    # Over many draws of the shares, every silo is equally likely for a user (symmetric Dirichlet).
    rng = np.random.default_rng(5)
    first = np.array([dirichlet_partition(rng, 1, 4, 0.5)[0] for _ in range(2000)])
    assert np.abs(np.bincount(first, minlength=4) / 2000 - 0.25).max() < 0.04  # sd 0.0097


def test_silo_assignment_draws_random_partitions_from_the_silo_stream() -> None:
    ratings = users_only(50)
    labels = silo_assignment(Spec(silos=4), ratings, 17)
    expected = uniform_partition(generator(17, Stream.DATA, SILO_STREAM_ID), 50, 4)
    np.testing.assert_array_equal(labels, expected)
    assert SILO_STREAM_ID == 3
    labels = silo_assignment(Spec(silo_partition="dirichlet", silos=5, silo_alpha=0.3), ratings, 17)
    expected = dirichlet_partition(generator(17, Stream.DATA, 3), 50, 5, 0.3)
    np.testing.assert_array_equal(labels, expected)
    assert not np.array_equal(silo_assignment(Spec(silos=4), ratings, 18), silo_assignment(Spec(silos=4), ratings, 17))


def test_an_unknown_partition_is_refused_naming_the_key_and_the_choices() -> None:
    message = "data.silo_partition: got 'zipcode'; allowed: 'uniform', 'dirichlet', 'zip'"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        silo_assignment(Spec(silo_partition="zipcode"), users_only(3), 0)


def test_a_zip_partition_of_a_source_without_zip_codes_names_the_key_and_the_sources() -> None:
    message = (
        "data.silo_partition: 'zip' partitions users by zip code, and source 'synthetic' has no zip codes "
        "(only movielens-100k, movielens-1m do); use 'uniform' or 'dirichlet'"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        silo_assignment(Spec(silo_partition="zip"), users_only(3), 0)


# ------------------------------------------------------------------ zip codes


def write_100k(folder: Path, lines: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "u.data").write_text("1\t1\t5\t0\n")
    (folder / "u.user").write_text("".join(line + "\n" for line in lines))
    return folder


def test_zip_silos_follow_the_first_digit_and_anything_else_goes_to_silo_ten(tmp_path: Path) -> None:
    zips = ["02139", "10001", "T8H1N", "99504", "55414", "", " 4", "5-", "X2A4Y"]
    folder = write_100k(tmp_path / "ml", [f"{user}|30|M|engineer|{code}" for user, code in enumerate(zips, 1)])
    labels = silo_assignment(Spec(source="movielens-100k", path=str(folder), silo_partition="zip"), users_only(9), 0)
    # " 4" is stripped to "4"; "" and letters are non-numeric.
    np.testing.assert_array_equal(labels, [0, 1, NON_NUMERIC_ZIP_SILO, 9, 5, NON_NUMERIC_ZIP_SILO, 4, 5, NON_NUMERIC_ZIP_SILO])
    assert NON_NUMERIC_ZIP_SILO == 10 and labels.dtype == np.int64


def test_zip_path_may_be_the_ratings_file_and_users_are_matched_by_original_id(tmp_path: Path) -> None:
    folder = write_100k(tmp_path / "ml", ["", "7|20|F|writer|70000", "3|20|F|writer|30000", "  ", "12|1|M|x|12345"])
    ratings = users_only(3, user_ids=[12, 3, 7])
    labels = zip_partition("movielens-100k", folder / "u.data", ratings)  # a file: its folder is read
    np.testing.assert_array_equal(labels, [1, 3, 7])
    np.testing.assert_array_equal(zip_partition("movielens-100k", folder, ratings), [1, 3, 7])


def test_movielens_1m_users_dat_is_read_with_its_double_colon_separator(tmp_path: Path) -> None:
    folder = tmp_path / "ml-1m"
    folder.mkdir()
    (folder / "users.dat").write_text("1::F::1::10::48067\n2::M::56::16::70072\n3::M::25::15::V5A3C\n")
    spec = Spec(source="movielens-1m", path=str(folder), silo_partition="zip")
    np.testing.assert_array_equal(silo_assignment(spec, users_only(3), 0), [4, 7, NON_NUMERIC_ZIP_SILO])


def test_a_missing_user_file_is_a_dataset_error_naming_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    message = f"{folder / 'u.user'}: cannot read the user file a zip partition needs: No such file or directory"
    with pytest.raises(DatasetError, match=f"^{re.escape(message)}$"):
        zip_partition("movielens-100k", folder, users_only(2))


def test_bytes_that_are_not_utf8_are_replaced_not_fatal(tmp_path: Path) -> None:
    folder = tmp_path / "ml"
    folder.mkdir()
    (folder / "u.user").write_bytes(b"1|30|M|\xe9tudiant|02139\n2|25|F|caf\xe9|T8H1N\n")
    np.testing.assert_array_equal(zip_partition("movielens-100k", folder, users_only(2)), [0, NON_NUMERIC_ZIP_SILO])


def test_a_line_with_too_few_fields_is_a_dataset_error_naming_the_line(tmp_path: Path) -> None:
    folder = write_100k(tmp_path / "ml", ["1|30|M|engineer|02139", "2|30|M|engineer"])
    message = f"{folder / 'u.user'}:2: expected at least 5 '|'-separated fields"
    with pytest.raises(DatasetError, match=f"^{re.escape(message)}$"):
        zip_partition("movielens-100k", folder, users_only(2))


def test_a_user_id_that_is_not_an_integer_is_a_dataset_error_naming_the_line(tmp_path: Path) -> None:
    folder = write_100k(tmp_path / "ml", ["1|30|M|engineer|02139", "\n", "two|30|M|engineer|02139"])
    message = f"{folder / 'u.user'}:4: user id 'two' is not an integer"
    with pytest.raises(DatasetError, match=f"^{re.escape(message)}$"):
        zip_partition("movielens-100k", folder, users_only(2))


def test_a_user_of_the_ratings_missing_from_the_file_is_a_dataset_error(tmp_path: Path) -> None:
    folder = write_100k(tmp_path / "ml", ["1|30|M|engineer|02139", "3|30|M|engineer|02139"])
    message = f"{folder / 'u.user'}: user 2 of the ratings has no line here"
    with pytest.raises(DatasetError, match=f"^{re.escape(message)}$"):
        zip_partition("movielens-100k", folder, users_only(3))
