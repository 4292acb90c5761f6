"""LightGCN train.txt / test.txt (Gowalla, Yelp2018), a given held-out set (data.test_path) replacing the
split for any source, and fetching a data set published as plain files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
from test_data_fetch import Server, contents, home, server  # noqa: F401 -- fixtures

from fedrecsim.data import (
    DATASETS,
    FETCH_RECORD,
    Dataset,
    fetch,
    fetched_path,
    lightgcn_test_file,
    load,
    load_lightgcn,
    load_with_test,
    prepare_data,
)
from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.scenario import DataConfig

TRAIN = "0 0 1 2\n1 2 3\n\n3 1 \n"
TEST = "0 3\n1 0\n2 4\n"


def folder(root: Path, train: str = TRAIN, test: str | None = TEST) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.txt").write_text(train)
    if test is not None:
        (root / "test.txt").write_text(test)
    return root


def pairs(ratings) -> list[tuple[int, int]]:
    return list(zip(ratings.users.tolist(), ratings.items.tolist()))


def test_one_line_per_user_ids_as_dense_indices(tmp_path) -> None:
    ratings = load("lightgcn", folder(tmp_path))
    assert (ratings.n_users, ratings.n_items, len(ratings)) == (4, 4, 6)
    assert pairs(ratings) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 3), (3, 1)]
    assert ratings.values.tolist() == [1.0] * 6 and ratings.rating_range == (0.0, 1.0)
    assert ratings.user_ids is None and ratings.item_ids is None
    assert len(load_lightgcn(tmp_path / "test.txt")) == 3


def test_a_user_line_without_items(tmp_path) -> None:
    ratings = load_lightgcn(folder(tmp_path, "0 1\n5\n"))
    assert (ratings.n_users, ratings.n_items, len(ratings)) == (6, 2, 1)


@pytest.mark.parametrize("text, line, problem", [
    ("0 1\nu 1\n", 2, "user id 'u' is not an integer"),
    ("-1 1\n", 1, "user id -1 is not a non-negative integer"),
    ("0 1 x\n", 1, "item id 'x' is not an integer"),
    ("0 1 -3\n", 1, "item id -3 is not a non-negative integer"),
    ("0 1 2 1\n", 1, "item 1 is listed twice for user 0"),
    ("0 1\n1 2\n\n0 3\n", 4, "user 0 is listed again (first at line 1)"),
])
def test_a_malformed_line_is_named(tmp_path, text, line, problem) -> None:
    folder(tmp_path, text, None)
    with pytest.raises(DatasetError) as caught:
        load_lightgcn(tmp_path)
    assert (caught.value.path, caught.value.line, caught.value.problem) == (str(tmp_path / "train.txt"), line, problem)


@pytest.mark.parametrize("text, problem", [("\n", "no users in the file"), ("0\n1\n", "no user lists any item")])
def test_no_data(tmp_path, text, problem) -> None:
    folder(tmp_path, text, None)
    with pytest.raises(DatasetError) as caught:
        load_lightgcn(tmp_path / "train.txt")
    assert (caught.value.line, caught.value.problem) == (None, problem)


def test_a_folders_test_txt_is_its_held_out_set(tmp_path) -> None:
    assert lightgcn_test_file(folder(tmp_path)) == tmp_path / "test.txt"
    assert lightgcn_test_file(tmp_path / "train.txt") is None
    assert lightgcn_test_file(folder(tmp_path / "alone", test=None)) is None
    for source in ("lightgcn", "gowalla", "yelp2018"):
        train, test = load_with_test(source, tmp_path)
        # The test set's user 2 and item 4 widen both sets' index ranges alike.
        assert (train.n_users, train.n_items, test.n_users, test.n_items) == (4, 5, 4, 5)
        assert pairs(test) == [(0, 3), (1, 0), (2, 4)]
        assert len(train) == 6 and train.user_ids is None and test.item_ids is None


def test_a_file_names_the_training_data_alone_and_other_sources_have_no_default_test_set(tmp_path) -> None:
    folder(tmp_path)
    assert load_with_test("lightgcn", tmp_path / "train.txt")[1] is None
    (tmp_path / "users.dat").write_text("1 0\n")
    assert load_with_test("citeulike-a", tmp_path)[1] is None


def test_a_given_test_path_overrides_the_folders_test_txt(tmp_path) -> None:
    folder(tmp_path)
    other = tmp_path / "other.txt"
    other.write_text("3 0\n")
    train, test = load_with_test("lightgcn", tmp_path, other)
    assert pairs(test) == [(3, 0)] and (train.n_users, train.n_items) == (4, 4)


def test_relabelled_sources_meet_on_the_union_of_their_ids(tmp_path) -> None:
    (tmp_path / "ratings.txt").write_text("10 100 1\n20 200 2\n")
    held_out = tmp_path / "held-out.txt"
    held_out.write_text("15 200 4\n10 300 0.5\n")
    train, test = load_with_test("filmtrust", tmp_path, held_out)
    assert train.user_ids.tolist() == test.user_ids.tolist() == [10, 15, 20]
    assert train.item_ids.tolist() == test.item_ids.tolist() == [100, 200, 300]
    assert pairs(train) == [(0, 0), (2, 1)] and train.values.tolist() == [1.0, 2.0]
    assert pairs(test) == [(0, 2), (1, 1)] and test.values.tolist() == [0.5, 4.0]
    assert train.rating_range == test.rating_range == (0.5, 4.0)


def test_the_wider_scale_of_either_set_is_both_sets_scale(tmp_path) -> None:
    header = "userID\tartistID\tweight\n"
    (tmp_path / "user_artists.dat").write_text(header + "1\t1\t5\n")
    held_out = tmp_path / "held-out.dat"
    held_out.write_text(header + "1\t2\t9\n")
    train, test = load_with_test("lastfm", tmp_path, held_out)
    assert train.rating_range == test.rating_range == (0.0, 9.0)
    (tmp_path / "low.dat").write_text(header + "1\t2\t2\n")
    train, test = load_with_test("lastfm", tmp_path, tmp_path / "low.dat")
    assert train.rating_range == test.rating_range == (0.0, 5.0)


def test_a_held_out_pair_that_is_also_training_data_is_refused(tmp_path) -> None:
    folder(tmp_path, test="1 0\n3 4 1\n")
    with pytest.raises(DatasetError) as caught:
        load_with_test("gowalla", tmp_path)
    assert (caught.value.path, caught.value.problem) == (
        str(tmp_path / "test.txt"), "user 3 and item 1 are in the training data too"
    )
    (tmp_path / "ratings.txt").write_text("10 100 1\n")
    (tmp_path / "again.txt").write_text("10 100 2\n")
    with pytest.raises(DatasetError, match="user 10 and item 100 are in the training data too$"):
        load_with_test("filmtrust", tmp_path, tmp_path / "again.txt")


def spec(**keys: object) -> DataConfig:
    return dataclasses.replace(DataConfig(), **keys)


def test_prepare_data_takes_the_given_held_out_set_instead_of_splitting(tmp_path) -> None:
    folder(tmp_path)
    for seed in (0, 1):
        train, test = prepare_data(spec(source="gowalla", path=str(tmp_path), feedback="implicit"), seed)
        assert len(train) == 6 and pairs(test) == [(0, 3), (1, 0), (2, 4)]
    given = tmp_path / "given.txt"
    given.write_text("2 1\n")
    train, test = prepare_data(spec(source="lightgcn", path=str(tmp_path / "train.txt"), test_path=str(given)), 0)
    assert pairs(test) == [(2, 1)]


def test_a_given_held_out_set_is_binarized_with_the_data(tmp_path) -> None:
    (tmp_path / "ratings.txt").write_text("1 1 3\n2 2 0.5\n")
    (tmp_path / "test.txt").write_text("1 2 4\n")
    keys = dict(source="filmtrust", path=str(tmp_path), test_path=str(tmp_path / "test.txt"))
    train, test = prepare_data(spec(**keys, binarize=True), 0)
    assert train.values.tolist() == [1.0, 1.0] and test.values.tolist() == [1.0]
    assert train.rating_range == test.rating_range == (0.0, 1.0)
    train, test = prepare_data(spec(**keys), 0)
    assert test.values.tolist() == [4.0]


@pytest.mark.parametrize("key", ["min_user_interactions", "min_item_interactions", "subsample_users", "subsample_items"])
def test_thresholds_and_subsampling_are_refused_with_a_given_held_out_set(tmp_path, key) -> None:
    folder(tmp_path)
    with pytest.raises(ConfigError) as caught:
        prepare_data(spec(source="lightgcn", path=str(tmp_path), **{key: 1}), 0)
    assert caught.value.key_path == f"data.{key}"
    assert caught.value.problem == "cannot be combined with a given held-out set (data.test_path or a LightGCN test.txt)"


def test_synthetic_data_has_no_files_to_hold_out(tmp_path) -> None:
    with pytest.raises(ConfigError) as caught:
        prepare_data(spec(test_path=str(tmp_path / "t.txt")), 0)
    assert caught.value.key_path == "data.test_path"


@pytest.mark.parametrize("train_values, test_values", [([1.0], [0.0]), ([0.0], [1.0])])
def test_a_set_binarized_to_nothing_is_refused(tmp_path, train_values, test_values) -> None:
    for name, values in (("train.npz", train_values), ("test.npz", test_values)):
        scipy.sparse.save_npz(tmp_path / name, scipy.sparse.coo_matrix((values, ([0], [0])), shape=(1, 2)).tocsr())
    keys = dict(source="npz", path=str(tmp_path / "train.npz"), test_path=str(tmp_path / "test.npz"))
    with pytest.raises(DatasetError, match="in the training data too"):
        prepare_data(spec(**keys), 0)
    scipy.sparse.save_npz(
        tmp_path / "test.npz", scipy.sparse.coo_matrix((test_values, ([0], [1])), shape=(1, 2)).tocsr()
    )
    with pytest.raises(ConfigError) as caught:
        prepare_data(spec(**keys, binarize=True), 0)
    assert (caught.value.key_path, caught.value.problem) == (
        "data", "the training data or the given held-out set has no entries"
    )


def test_relative_test_paths_are_taken_from_the_scenario_files_folder(tmp_path) -> None:
    from fedrecsim.scenario import load_scenario

    (tmp_path / "s.toml").write_text(
        '[run]\nprotocol = "fcf"\n[data]\nsource = "lightgcn"\npath = "d/train.txt"\ntest_path = "d/test.txt"\n'
    )
    scenario = load_scenario(tmp_path / "s.toml")
    assert scenario.data.test_path == str(tmp_path / "d" / "test.txt")


# Fetching a data set published as plain files: all of them, or nothing.

FILES = {"train.txt": TRAIN.encode(), "test.txt": TEST.encode()}


def listing_digest(files: dict[str, bytes]) -> str:
    listing = "".join(f"{hashlib.sha256(body).hexdigest()}  {name}\n" for name, body in files.items())
    return hashlib.sha256(listing.encode()).hexdigest()


def serve_files(server: Server, files: dict[str, bytes] = FILES) -> str:
    for name, body in files.items():
        server.serve(f"/Data/gowalla/{name}", body)
    return server.url("/Data/gowalla")


def test_the_lightgcn_entries_are_plain_files_read_by_the_lightgcn_loader(tmp_path) -> None:
    for name in ("gowalla", "yelp2018"):
        entry = DATASETS[name]
        assert entry.files == ("train.txt", "test.txt") and entry.sha256 is None and entry.folder == name
        assert entry.url == f"https://raw.githubusercontent.com/kuandeng/LightGCN/master/Data/{name}"
        folder(tmp_path / name / entry.folder)
        assert fetched_path(name, tmp_path) == tmp_path / name / name
        train, test = load_with_test(name, fetched_path(name, tmp_path))
        assert (len(train), len(test)) == (6, 3)


def test_a_fetched_lightgcn_data_set_is_read_with_its_held_out_set(server, home) -> None:
    url = serve_files(server)
    digest = listing_digest(FILES)
    fetched = fetch("gowalla", accept_licence=True, url=url + "/", sha256=digest.upper())
    assert fetched.path == home / "gowalla" / "gowalla"
    assert (fetched.sha256, fetched.size, fetched.verified, fetched.downloaded) == (
        digest, len(TRAIN) + len(TEST), True, True
    )
    assert contents(home) == [
        "gowalla", f"gowalla/{FETCH_RECORD}", "gowalla/gowalla", "gowalla/gowalla/test.txt", "gowalla/gowalla/train.txt"
    ]
    assert (home / "gowalla" / "gowalla" / "test.txt").read_bytes() == FILES["test.txt"]
    assert json.loads((home / "gowalla" / FETCH_RECORD).read_text())["sha256"] == digest
    train, test = prepare_data(spec(source="gowalla", feedback="implicit"), 0)
    assert (len(train), len(test)) == (6, 3)


def test_without_a_published_digest_the_files_need_one_or_no_verify(server, home) -> None:
    url = serve_files(server)
    with pytest.raises(DatasetError, match="no SHA-256 of its archive is published"):
        fetch("yelp2018", accept_licence=True, url=url)
    assert contents(home) == []
    fetched = fetch("yelp2018", accept_licence=True, url=url, verify=False)
    assert (fetched.sha256, fetched.verified) == (listing_digest(FILES), False)
    assert load_lightgcn(fetched.path).n_users == 4


def test_a_mismatch_in_any_file_leaves_nothing(server, home) -> None:
    url = serve_files(server)
    wrong = listing_digest({"train.txt": FILES["train.txt"], "test.txt": b"0 1\n"})
    with pytest.raises(DatasetError) as caught:
        fetch("gowalla", accept_licence=True, url=url, sha256=wrong)
    assert caught.value.problem.startswith(f"SHA-256 mismatch: expected {wrong}, got {listing_digest(FILES)} (")
    assert caught.value.path == url
    assert contents(home) == []


def test_a_missing_or_cut_off_file_leaves_nothing(server, home) -> None:
    server.serve("/Data/gowalla/train.txt", FILES["train.txt"])
    url = server.url("/Data/gowalla")
    with pytest.raises(DatasetError, match="test.txt: the server answered HTTP 404"):
        fetch("gowalla", accept_licence=True, url=url, verify=False)
    assert contents(home) == []
    server.serve("/Data/gowalla/test.txt", FILES["test.txt"], declared=len(FILES["test.txt"]) + 10)
    with pytest.raises(DatasetError, match="test.txt: the download broke off"):
        fetch("gowalla", accept_licence=True, url=url, verify=False)
    assert contents(home) == []


def test_files_without_the_loaders_file_are_refused(server, home) -> None:
    url = serve_files(server, {"test.txt": FILES["test.txt"]})
    entry = dataclasses.replace(DATASETS["gowalla"], name="only-test", files=("test.txt",))
    assert isinstance(entry, Dataset)
    with pytest.raises(DatasetError) as caught:
        fetch(entry, accept_licence=True, url=url, verify=False)
    assert caught.value.problem == "the archive holds no gowalla/train.txt"
    assert contents(home) == []


def test_entries_at_an_archives_top_level_read_and_report_their_file(tmp_path) -> None:
    from fedrecsim.data import dataset_text

    entry = DATASETS["filmtrust"]
    assert entry.folder == ""
    (tmp_path / "filmtrust").mkdir()
    (tmp_path / "filmtrust" / "ratings.txt").write_text("1 1 1\n")
    assert fetched_path("filmtrust", tmp_path) == tmp_path / "filmtrust"
    assert "  reads        ratings.txt" in dataset_text("filmtrust", tmp_path).splitlines()
    text = dataset_text("gowalla", tmp_path).splitlines()
    assert "  download     https://raw.githubusercontent.com/kuandeng/LightGCN/master/Data/gowalla/ + train.txt, test.txt" in text
    assert "  reads        gowalla/train.txt" in text
    assert np.all(load("filmtrust", tmp_path / "filmtrust").values == 1.0)
