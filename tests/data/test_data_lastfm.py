"""Last.fm hetrec-2011 user_artists.dat: a header, then tab-separated user, artist and play count."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrecsim.data import LASTFM_HEADER, load, load_lastfm
from fedrecsim.errors import DatasetError

HEADER = "userID\tartistID\tweight\n"


def write(folder: Path, text: str) -> Path:
    path = folder / "user_artists.dat"
    path.write_text(text)
    return path


def test_play_counts_on_dense_indices_in_ascending_id_order(tmp_path) -> None:
    write(tmp_path, HEADER + "7\t51\t13883\n2\t52\t11690\n\n2\t51\t3\n")
    ratings = load("lastfm", tmp_path)
    assert LASTFM_HEADER == ("userID", "artistID", "weight")
    assert (ratings.n_users, ratings.n_items, len(ratings)) == (2, 2, 3)
    assert ratings.user_ids.tolist() == [2, 7] and ratings.item_ids.tolist() == [51, 52]
    assert ratings.users.tolist() == [0, 0, 1] and ratings.items.tolist() == [0, 1, 0]
    assert ratings.values.tolist() == [3.0, 11690.0, 13883.0]
    assert ratings.rating_range == (0.0, 13883.0)
    binary = ratings.binarize()
    assert np.array_equal(binary.values, np.ones(3)) and binary.rating_range == (0.0, 1.0)


def test_the_file_itself_and_a_header_with_trailing_spaces(tmp_path) -> None:
    path = write(tmp_path, "userID \tartistID\tweight \r\n1\t1\t1\r\n")
    assert len(load_lastfm(path)) == 1
    assert load_lastfm(str(path)).values.tolist() == [1.0]


@pytest.mark.parametrize("text, line, problem", [
    ("", 1, "expected the header 'userID\\tartistID\\tweight', got ''"),
    ("\n\n", 1, "expected the header 'userID\\tartistID\\tweight', got ''"),
    ("\nuser\tartist\tweight\n", 2, "expected the header 'userID\\tartistID\\tweight', got 'user\\tartist\\tweight'"),
    ("1\t2\t3\n", 1, "expected the header 'userID\\tartistID\\tweight', got '1\\t2\\t3'"),
    (HEADER + "1\t2\n", 2, "expected 3 tab-separated fields (userID artistID weight), got 2"),
    (HEADER + "1 2 3\n", 2, "expected 3 tab-separated fields (userID artistID weight), got 1"),
    (HEADER + "1\t2\t3\t4\n", 2, "expected 3 tab-separated fields (userID artistID weight), got 4"),
    (HEADER + "1\t2\t3\nx\t2\t3\n", 3, "userID 'x' is not an integer"),
    (HEADER + "1\t2.5\t3\n", 2, "artistID '2.5' is not an integer"),
    (HEADER + "1\t2\t0\n", 2, "weight 0 is not a positive integer"),
    (HEADER + "0\t2\t1\n", 2, "userID 0 is not a positive integer"),
    (HEADER + "1\t-2\t1\n", 2, "artistID -2 is not a positive integer"),
    (HEADER + f"1\t{2**62}\t1\n", 2, f"artistID {2**62} is not a positive integer"),
    (HEADER + "1\t2\t3\n4\t5\t6\n1\t2\t9\n", 4, "user 1 and item 2 again (first at line 2)"),
])
def test_a_malformed_line_is_named(tmp_path, text, line, problem) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DatasetError) as caught:
        load_lastfm(tmp_path)
    assert (caught.value.path, caught.value.line, caught.value.problem) == (str(path), line, problem)


def test_a_header_alone_is_no_data(tmp_path) -> None:
    path = write(tmp_path, HEADER)
    with pytest.raises(DatasetError) as caught:
        load_lastfm(path)
    assert (caught.value.line, caught.value.problem) == (None, "no user-artist pairs in the file")


def test_the_largest_id_that_still_fits(tmp_path) -> None:
    write(tmp_path, HEADER + f"1\t{2**62 - 1}\t1\n")
    assert load_lastfm(tmp_path).item_ids.tolist() == [2**62 - 1]


def test_a_folder_without_the_file(tmp_path) -> None:
    with pytest.raises(DatasetError, match="the folder has no user_artists.dat"):
        load_lastfm(tmp_path)
