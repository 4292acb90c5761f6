"""MovieLens readers: dense remapping, file-or-folder, and errors that name the file and the line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrecsim.data import load_movielens_1m, load_movielens_100k
from fedrecsim.errors import DatasetError

U_DATA = "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n196\t51\t2\t880606923\n"


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_u_data_is_remapped_densely_in_sorted_id_order(tmp_path: Path) -> None:
    r = load_movielens_100k(write(tmp_path, "u.data", U_DATA))
    assert (r.n_users, r.n_items, len(r)) == (3, 4, 4)
    assert r.user_ids.tolist() == [22, 186, 196]
    assert r.item_ids.tolist() == [51, 242, 302, 377]
    triples = {(int(r.user_ids[u]), int(r.item_ids[i]), v) for u, i, v in zip(r.users, r.items, r.values)}
    assert triples == {(196, 242, 3.0), (186, 302, 3.0), (22, 377, 1.0), (196, 51, 2.0)}
    assert r.rating_range == (1.0, 5.0)


def test_the_folder_is_accepted_too(tmp_path: Path) -> None:
    folder = tmp_path / "ml-100k"
    folder.mkdir()
    write(folder, "u.data", U_DATA)
    assert len(load_movielens_100k(folder)) == 4
    assert len(load_movielens_100k(str(folder))) == 4


def test_ratings_dat_uses_double_colons(tmp_path: Path) -> None:
    path = write(tmp_path, "ratings.dat", "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n")
    r = load_movielens_1m(path)
    assert r.user_ids.tolist() == [1, 2] and r.item_ids.tolist() == [661, 1193]
    assert r.values.tolist() == [3.0, 5.0, 4.0]
    folder = tmp_path / "ml-1m"
    folder.mkdir()
    write(folder, "ratings.dat", path.read_text())
    assert len(load_movielens_1m(folder)) == 3


def test_blank_lines_crlf_and_non_integer_ratings_are_read(tmp_path: Path) -> None:
    text = "1\t1\t4.5\t5\r\n\r\n2\t1\t3\t6\r\n"
    r = load_movielens_100k(write(tmp_path, "u.data", text))
    assert r.values.tolist() == [4.5, 3.0]


def test_fast_and_line_by_line_parsing_agree(tmp_path: Path) -> None:
    # A trailing space on one line is fine for both parsers; "4.0" forces the line-by-line path.
    rng = np.random.default_rng(0)
    rows = [(u, i, int(rng.integers(1, 6)), 800_000_000 + u) for u in range(1, 30) for i in range(1, 30, 3)]
    fast = "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows)
    slow = fast + "99\t1\t4.0\t1 \n"
    a = load_movielens_100k(write(tmp_path, "a.data", fast + "99\t1\t4\t1\n"))
    b = load_movielens_100k(write(tmp_path, "b.data", slow))
    assert np.array_equal(a.users, b.users) and np.array_equal(a.items, b.items) and np.array_equal(a.values, b.values)


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("7\t8\t3", "expected 4 tab-separated fields"),
        ("7\t8\t3\t4\t5", "expected 4 tab-separated fields"),
        ("x\t8\t3\t4", "user id 'x' is not an integer"),
        ("7\t8.5\t3\t4", "item id '8.5' is not an integer"),
        ("0\t8\t3\t4", "user id 0 is not a positive integer"),
        ("7\t-2\t3\t4", "item id -2 is not a positive integer"),
        ("7\t8\tgood\t4", "rating 'good' is not a number"),
        ("7\t8\t6\t4", r"rating 6 is outside \[1, 5\]"),
        ("7\t8\t0.5\t4", r"rating 0.5 is outside \[1, 5\]"),
        ("7\t8\tnan\t4", "rating nan is outside"),
        ("7\t8\t3\tyesterday", "timestamp 'yesterday' is not an integer"),
        ("196\t242\t5\t4", r"user 196 rated item 242 again \(first at line 1\)"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path: Path, bad_line: str, message: str) -> None:
    # The bad row is line 6: four good lines, a blank line (counted, skipped), then the bad one.
    path = write(tmp_path, "u.data", U_DATA + "\n" + bad_line + "\n1\t1\t1\t1\n")
    with pytest.raises(DatasetError, match=message) as caught:
        load_movielens_100k(path)
    assert caught.value.line == 6
    assert caught.value.path == str(path)
    assert f"{path}:6:" in str(caught.value)


def test_ratings_dat_errors_name_the_line_too(tmp_path: Path) -> None:
    path = write(tmp_path, "ratings.dat", "1::2::3::4\n1::2::3\n")
    with pytest.raises(DatasetError, match="expected 4 '::'-separated fields") as caught:
        load_movielens_1m(path)
    assert caught.value.line == 2
    path = write(tmp_path, "tabs.dat", "1::2::3::4\n1\t3\t3\t4\n")
    with pytest.raises(DatasetError) as caught:
        load_movielens_1m(path)
    assert caught.value.line == 2


def test_missing_and_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such file or folder"):
        load_movielens_100k(tmp_path / "nowhere")
    with pytest.raises(DatasetError, match="the folder has no u.data"):
        load_movielens_100k(tmp_path)
    with pytest.raises(DatasetError, match="no ratings"):
        load_movielens_100k(write(tmp_path, "u.data", "\n  \n"))
    with pytest.raises(DatasetError, match="not UTF-8") as caught:
        load_movielens_100k(write(tmp_path, "u.data", b"1\t1\t1\t1\n2\t\xff\t1\t1\n"))
    assert caught.value.line == 2
