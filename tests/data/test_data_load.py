"""`load` dispatches on the scenario's source name and refuses what it does not know."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

from fedrecsim.data import SOURCES, load
from fedrecsim.errors import ConfigError


def test_sources(tmp_path: Path) -> None:
    assert SOURCES == (
        "citeulike-a", "filmtrust", "gowalla", "lastfm", "lightgcn", "movielens-100k", "movielens-1m", "npz", "yelp2018"
    )
    (tmp_path / "u.data").write_text("1\t1\t5\t0\n")
    (tmp_path / "ratings.dat").write_text("1::1::5::0\n2::1::4::0\n")
    scipy.sparse.save_npz(tmp_path / "m.npz", scipy.sparse.csr_matrix(np.eye(3)))
    assert len(load("movielens-100k", tmp_path)) == 1
    assert len(load("movielens-1m", str(tmp_path))) == 2
    assert load("npz", tmp_path / "m.npz", rating_range=(0.0, 1.0)).rating_range == (0.0, 1.0)


def test_unknown_source_lists_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match="allowed: citeulike-a, filmtrust, gowalla, lastfm, lightgcn, movielens-100k, movielens-1m, npz, yelp2018$") as caught:
        load("netflix", "x")
    assert caught.value.key_path == "data.source"


def test_unknown_option_and_empty_path() -> None:
    with pytest.raises(ConfigError) as caught:
        load("movielens-100k", "x", rating_range=(1, 5))
    assert caught.value.key_path == "data.rating_range" and "allowed: none" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        load("npz", "")
    assert caught.value.key_path == "data.path"
