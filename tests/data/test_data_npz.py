"""The scipy sparse .npz reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

from fedrecsim.data import load_npz
from fedrecsim.errors import ConfigError, DatasetError


def save(path: Path, matrix: scipy.sparse.spmatrix) -> Path:
    scipy.sparse.save_npz(path, matrix)
    return path


def test_csr_round_trip(tmp_path: Path) -> None:
    dense = np.array([[0.0, 4.0, 0.0], [1.0, 0.0, 5.0], [0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
    r = load_npz(save(tmp_path / "m.npz", scipy.sparse.csr_matrix(dense)))
    assert (r.n_users, r.n_items) == (4, 3)
    rebuilt = np.zeros_like(dense)
    rebuilt[r.users, r.items] = r.values
    assert np.array_equal(rebuilt, dense)
    assert r.rating_range == (1.0, 5.0)
    assert r.user_ids is None and r.item_ids is None


def test_explicit_range_and_other_formats(tmp_path: Path) -> None:
    coo = scipy.sparse.coo_matrix((np.array([True, True]), (np.array([0, 1]), np.array([1, 0]))), shape=(2, 2))
    r = load_npz(save(tmp_path / "b.npz", coo), rating_range=(0, 1))
    assert r.values.tolist() == [1.0, 1.0] and r.rating_range == (0.0, 1.0)


def test_stored_zero_is_a_rating(tmp_path: Path) -> None:
    coo = scipy.sparse.coo_matrix((np.array([0.0, 3.0]), (np.array([0, 1]), np.array([0, 0]))), shape=(2, 1))
    r = load_npz(save(tmp_path / "z.npz", coo))
    assert len(r) == 2 and r.rating_range == (0.0, 3.0)


@pytest.mark.parametrize(
    ("matrix", "options", "message"),
    [
        (scipy.sparse.csr_matrix(np.array([[np.inf, 1.0]])), {}, r"entry \(row 0, column 0\) is inf"),
        (scipy.sparse.csr_matrix(np.array([[0.0, 7.0]])), {"rating_range": (1, 5)}, r"= 7 is outside \[1, 5\]"),
        (scipy.sparse.csr_matrix((3, 2)), {}, "no stored entries"),
        (scipy.sparse.csr_matrix((0, 2)), {}, "shape"),
        (
            scipy.sparse.coo_matrix((np.array([1.0, 2.0]), (np.array([1, 1]), np.array([0, 0]))), shape=(2, 2)),
            {},
            r"cell \(row 1, column 0\) is stored more than once",
        ),
        (scipy.sparse.csr_matrix(np.array([[1 + 1j]])), {}, "real numbers"),
    ],
)
def test_bad_matrices(tmp_path: Path, matrix: scipy.sparse.spmatrix, options: dict, message: str) -> None:
    path = save(tmp_path / "bad.npz", matrix)
    with pytest.raises(DatasetError, match=message) as caught:
        load_npz(path, **options)
    assert caught.value.path == str(path)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such file"):
        load_npz(tmp_path / "missing.npz")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip at all")
    with pytest.raises(DatasetError, match="save_npz"):
        load_npz(garbage)
    dense = tmp_path / "dense.npz"
    np.savez(dense, a=np.ones(3))
    with pytest.raises(DatasetError, match="save_npz"):
        load_npz(dense)


def test_bad_rating_range_is_a_config_error(tmp_path: Path) -> None:
    path = save(tmp_path / "m.npz", scipy.sparse.csr_matrix(np.eye(2)))
    with pytest.raises(ConfigError, match="data.rating_range"):
        load_npz(path, rating_range=(5, 1))
