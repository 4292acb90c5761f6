"""FilmTrust ratings.txt: user, item and a rating 0.5-4.0 in steps of 0.5, separated by white space."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrecsim.data import FILMTRUST_RATING_RANGE, load, load_filmtrust
from fedrecsim.errors import DatasetError


def write(folder: Path, text: str) -> Path:
    path = folder / "ratings.txt"
    path.write_text(text)
    return path


def test_explicit_ratings_on_dense_indices(tmp_path) -> None:
    write(tmp_path, "1 1 2.0\n1  3\t4\n\n5 1 0.5\n")
    ratings = load("filmtrust", tmp_path)
    assert FILMTRUST_RATING_RANGE == (0.5, 4.0) and ratings.rating_range == (0.5, 4.0)
    assert (ratings.n_users, ratings.n_items, len(ratings)) == (2, 2, 3)
    assert ratings.user_ids.tolist() == [1, 5] and ratings.item_ids.tolist() == [1, 3]
    assert list(zip(ratings.users.tolist(), ratings.items.tolist(), ratings.values.tolist())) == [
        (0, 0, 2.0), (0, 1, 4.0), (1, 0, 0.5)
    ]


def test_a_pair_rated_again_keeps_the_later_rating(tmp_path) -> None:
    write(tmp_path, "1 1 2.0\n2 2 1\n1 1 3.5\n")
    ratings = load_filmtrust(tmp_path / "ratings.txt")
    assert len(ratings) == 2
    assert ratings.user_ratings(0)[1].tolist() == [3.5]


@pytest.mark.parametrize("text, line, problem", [
    ("1 1\n", 1, "expected 3 fields (user item rating), got 2"),
    ("1 1 1 1\n", 1, "expected 3 fields (user item rating), got 4"),
    ("1 1 1\na 1 1\n", 2, "user id 'a' is not an integer"),
    ("1 0 1\n", 1, "item id 0 is not a positive integer"),
    ("0 1 1\n", 1, "user id 0 is not a positive integer"),
    ("1 1 good\n", 1, "rating 'good' is not a number"),
    ("1 1 0\n", 1, "rating 0 is not a multiple of 0.5 in [0.5, 4]"),
    ("1 1 4.5\n", 1, "rating 4.5 is not a multiple of 0.5 in [0.5, 4]"),
    ("1 1 1.25\n", 1, "rating 1.25 is not a multiple of 0.5 in [0.5, 4]"),
    ("1 1 nan\n", 1, "rating nan is not a multiple of 0.5 in [0.5, 4]"),
])
def test_a_malformed_line_is_named(tmp_path, text, line, problem) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DatasetError) as caught:
        load_filmtrust(path)
    assert (caught.value.path, caught.value.line, caught.value.problem) == (str(path), line, problem)


def test_the_ends_of_the_scale_are_ratings(tmp_path) -> None:
    write(tmp_path, "1 1 0.5\n1 2 4.0\n")
    assert load_filmtrust(tmp_path).values.tolist() == [0.5, 4.0]


def test_an_empty_file(tmp_path) -> None:
    write(tmp_path, "\n \n")
    with pytest.raises(DatasetError, match="no ratings in the file$"):
        load_filmtrust(tmp_path)
