"""citeulike-a users.dat: line u lists user u's articles as 'count item item ...' (0-based ids)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrecsim.data import IMPLICIT_RANGE, load, load_citeulike
from fedrecsim.errors import DatasetError


def write(folder: Path, text: str) -> Path:
    path = folder / "users.dat"
    path.write_text(text)
    return path


def test_implicit_entries_the_line_number_being_the_user(tmp_path) -> None:
    write(tmp_path, "2 5 0\n0\n1 3\n")
    ratings = load("citeulike-a", tmp_path)
    assert IMPLICIT_RANGE == (0.0, 1.0) and ratings.rating_range == (0.0, 1.0)
    assert (ratings.n_users, ratings.n_items, len(ratings)) == (3, 6, 3)
    assert ratings.user_ids is None and ratings.item_ids is None
    assert list(zip(ratings.users.tolist(), ratings.items.tolist())) == [(0, 0), (0, 5), (2, 3)]
    assert ratings.values.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("text, line, problem", [
    ("1 1\n\n1 2\n", 2, "a blank line: line u must list user u's items as 'count item item ...'"),
    ("1 1\n2 1\n", 2, "the line says 2 items but lists 1"),
    ("1 1 2\n", 1, "the line says 1 items but lists 2"),
    ("x 1\n", 1, "item count 'x' is not an integer"),
    ("-1\n", 1, "item count -1 is not a non-negative integer"),
    ("2 1 b\n", 1, "item id 'b' is not an integer"),
    ("2 1 -1\n", 1, "item id -1 is not a non-negative integer"),
    ("1 0\n3 4 7 4\n", 2, "item 4 is listed twice for user 1"),
])
def test_a_malformed_line_is_named(tmp_path, text, line, problem) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DatasetError) as caught:
        load_citeulike(path)
    assert (caught.value.path, caught.value.line, caught.value.problem) == (str(path), line, problem)


@pytest.mark.parametrize("text, problem", [("", "no users in the file"), ("0\n0\n", "no user lists any item")])
def test_no_data(tmp_path, text, problem) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DatasetError) as caught:
        load_citeulike(tmp_path)
    assert (caught.value.path, caught.value.line, caught.value.problem) == (str(path), None, problem)
