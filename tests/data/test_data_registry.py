"""The data set registry: what it lists, where the data home is, and how an empty data.path is resolved."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

from fedrecsim.data import (
    DATA_HOME_ENV,
    DATASETS,
    SOURCES,
    Dataset,
    data_home,
    dataset,
    dataset_text,
    fetch_command,
    fetched_path,
    install_folder,
    load,
    registry_text,
    resolve_path,
)
from fedrecsim.data.registry import _megabytes
from fedrecsim.errors import ConfigError


def test_the_registry_holds_exactly_the_data_sets_a_loader_reads() -> None:
    # npz and lightgcn are formats, not data sets.
    assert list(DATASETS) == ["movielens-100k", "movielens-1m", "lastfm", "filmtrust", "citeulike-a", "gowalla", "yelp2018"]
    assert set(DATASETS) == set(SOURCES) - {"npz", "lightgcn"}
    for name, entry in DATASETS.items():
        assert entry.name == name
        assert all(url.startswith("https://") for url in (entry.url, entry.licence_url, entry.homepage))
        assert entry.licence and entry.required
        if entry.sha256 is None:  # LightGCN's plain files: nobody publishes a digest of them
            assert entry.files == ("train.txt", "test.txt") and entry.checksum_source == "none published"
        else:
            assert re.fullmatch(r"[0-9a-f]{64}", entry.sha256) and not entry.files
    for name in ("movielens-100k", "movielens-1m"):
        entry = DATASETS[name]
        assert entry.size and entry.size > 0
        assert "no redistribution" in entry.licence and "tensorflow/datasets" in entry.checksum_source


def test_the_published_checksums_and_sizes() -> None:
    """As published in tensorflow/datasets' url_checksums/movielens.txt (see the registry's comment)."""
    ml100k, ml1m = DATASETS["movielens-100k"], DATASETS["movielens-1m"]
    assert (ml100k.url, ml100k.size, ml100k.sha256) == (
        "https://files.grouplens.org/datasets/movielens/ml-100k.zip",
        4_924_029,
        "50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
    )
    assert (ml1m.url, ml1m.size, ml1m.sha256) == (
        "https://files.grouplens.org/datasets/movielens/ml-1m.zip",
        5_917_549,
        "a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
    )


def test_the_loader_reads_the_folder_an_entry_names(tmp_path: Path) -> None:
    lines = {
        "movielens-100k": "1\t2\t5\t0\n",
        "movielens-1m": "1::2::5::0\n",
        "lastfm": "userID\tartistID\tweight\n1\t2\t5\n",
        "filmtrust": "1 2 3.5\n",
        "citeulike-a": "1 2\n",
        "gowalla": "0 2\n",
        "yelp2018": "0 2\n",
    }
    assert set(lines) == set(DATASETS)
    for name, line in lines.items():
        entry = DATASETS[name]
        folder = tmp_path / entry.name / entry.folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / entry.required).write_text(line)
        assert fetched_path(entry.name, tmp_path) == folder
        assert len(load(entry.name, folder)) == 1


def test_the_registry_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        DATASETS["mine"] = DATASETS["movielens-100k"]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        DATASETS["movielens-100k"].sha256 = None  # type: ignore[misc]


def test_dataset_by_name_or_as_given() -> None:
    assert dataset("movielens-1m") is DATASETS["movielens-1m"]
    mine = dataclasses.replace(DATASETS["movielens-1m"], name="mine")
    assert dataset(mine) is mine
    for unknown in ("netflix", ["movielens-1m"]):
        with pytest.raises(ConfigError) as caught:
            dataset(unknown)  # type: ignore[arg-type]
        assert caught.value.key_path == "data.source"
        assert caught.value.problem == (
            f"no registered data set {unknown!r}; registered: movielens-100k, movielens-1m, lastfm, filmtrust, "
            "citeulike-a, gowalla, yelp2018"
        )


@pytest.mark.parametrize("environ, platform, expected", [
    ({DATA_HOME_ENV: "/data/sets", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "linux", "/data/sets"),
    ({DATA_HOME_ENV: "~/sets", "HOME": "/h"}, "linux", "/elsewhere/sets"),  # expanded as the shell would
    ({DATA_HOME_ENV: "", "HOME": "/h"}, "linux", "/h/.cache/fedrecsim"),
    ({"XDG_CACHE_HOME": "/xdg", "HOME": "/h"}, "linux", "/xdg/fedrecsim"),
    ({"XDG_CACHE_HOME": "relative", "HOME": "/h"}, "linux", "/h/.cache/fedrecsim"),
    ({"XDG_CACHE_HOME": "/xdg", "HOME": "/h"}, "freebsd14", "/xdg/fedrecsim"),
    ({"XDG_CACHE_HOME": "/xdg", "HOME": "/h"}, "darwin", "/h/Library/Caches/fedrecsim"),
    ({"LOCALAPPDATA": "/l", "HOME": "/h"}, "win32", "/l/fedrecsim/Cache"),
    ({"LOCALAPPDATA": "", "HOME": "/h"}, "win32", "/h/AppData/Local/fedrecsim/Cache"),
    ({"HOME": "/h"}, "win32", "/h/AppData/Local/fedrecsim/Cache"),
])
def test_the_data_home(environ, platform, expected, monkeypatch) -> None:
    monkeypatch.setenv("HOME", "/elsewhere")
    assert data_home(environ, platform) == Path(expected)


def test_the_data_home_defaults_to_this_process(monkeypatch) -> None:
    monkeypatch.setenv(DATA_HOME_ENV, "/from/env")
    assert data_home() == Path("/from/env")
    monkeypatch.delenv(DATA_HOME_ENV)
    monkeypatch.setenv("HOME", "/from/home")
    monkeypatch.setenv("XDG_CACHE_HOME", "/from/xdg")
    assert data_home(platform="linux") == Path("/from/xdg/fedrecsim")
    assert data_home({}, "linux") == Path.home() / ".cache" / "fedrecsim"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert data_home({"HOME": "/h"}) == Path("/h/Library/Caches/fedrecsim")


def test_install_folder_and_fetched_path(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(DATA_HOME_ENV, str(tmp_path))
    entry = DATASETS["movielens-100k"]
    assert install_folder("movielens-100k") == tmp_path / "movielens-100k"
    assert install_folder(entry, "/other") == Path("/other/movielens-100k")
    assert fetched_path("movielens-100k") is None
    (tmp_path / "movielens-100k" / "ml-100k").mkdir(parents=True)
    assert fetched_path("movielens-100k") is None  # the folder alone is not the data set
    (tmp_path / "movielens-100k" / "ml-100k" / "u.data").mkdir()
    assert fetched_path("movielens-100k") is None  # nor a folder named like its file
    (tmp_path / "movielens-100k" / "ml-100k" / "u.data").rmdir()
    (tmp_path / "movielens-100k" / "ml-100k" / "u.data").write_text("")
    assert fetched_path("movielens-100k") == tmp_path / "movielens-100k" / "ml-100k"
    assert fetched_path(entry, tmp_path / "nowhere") is None


def test_fetch_command() -> None:
    assert fetch_command("movielens-1m") == "fedrecsim data fetch movielens-1m --accept-licence"


def test_resolve_path(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(DATA_HOME_ENV, str(tmp_path))
    assert resolve_path("movielens-100k", "mine/u.data") == "mine/u.data"
    assert resolve_path("movielens-100k", Path("mine")) == "mine"
    assert resolve_path("npz", "") == ""
    assert resolve_path("synthetic", "") == ""
    with pytest.raises(ConfigError) as caught:
        resolve_path("movielens-1m", "")
    assert caught.value.key_path == "data.path"
    assert caught.value.problem == (
        f"empty, and data set 'movielens-1m' has not been fetched into {tmp_path / 'movielens-1m'}; fetch it with "
        "`fedrecsim data fetch movielens-1m --accept-licence` (it shows the licence first), or set data.path to your copy"
    )
    (tmp_path / "movielens-1m" / "ml-1m").mkdir(parents=True)
    (tmp_path / "movielens-1m" / "ml-1m" / "ratings.dat").write_text("1::1::5::0\n")
    assert resolve_path("movielens-1m", "") == str(tmp_path / "movielens-1m" / "ml-1m")


def test_registry_text(tmp_path) -> None:
    (tmp_path / "movielens-1m" / "ml-1m").mkdir(parents=True)
    (tmp_path / "movielens-1m" / "ml-1m" / "ratings.dat").write_text("")
    assert registry_text(tmp_path).splitlines() == [
        "name              size  fetched  title",
        "movielens-100k  4.9 MB  no       MovieLens 100K (943 users, 1,682 movies, 100,000 ratings 1-5)",
        "movielens-1m    5.9 MB  yes      MovieLens 1M (6,040 users, 3,706 movies, 1,000,209 ratings 1-5)",
        "lastfm               ?  no       Last.fm hetrec-2011 (1,892 users, 17,632 artists, 92,834 play counts)",
        "filmtrust            ?  no       FilmTrust (1,508 users, 2,071 movies, about 35,500 ratings 0.5-4)",
        "citeulike-a          ?  no       citeulike-a (5,551 users, 16,980 articles, 204,986 implicit entries)",
        "gowalla              ?  no       Gowalla, LightGCN split (29,858 users, 40,981 places, 810,128 train + 217,242 test)",
        "yelp2018             ?  no       Yelp2018, LightGCN split (31,668 users, 38,048 businesses, 1,237,259 train + "
        "324,147 test)",
        f"data home: {tmp_path} (set FEDRECSIM_DATA to use another folder)",
    ]


def test_registry_text_defaults_to_the_data_home(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(DATA_HOME_ENV, str(tmp_path))
    assert registry_text().splitlines()[-1] == f"data home: {tmp_path} (set FEDRECSIM_DATA to use another folder)"


def test_dataset_text(tmp_path) -> None:
    entry = DATASETS["movielens-100k"]
    assert dataset_text("movielens-100k", tmp_path).splitlines() == [
        "movielens-100k: MovieLens 100K (943 users, 1,682 movies, 100,000 ratings 1-5)",
        "  data.source  movielens-100k",
        "  homepage     https://grouplens.org/datasets/movielens/100k/",
        "  download     https://files.grouplens.org/datasets/movielens/ml-100k.zip",
        "  size         4,924,029 bytes (4.9 MB)",
        "  sha256       50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
        f"               published in {entry.checksum_source}",
        f"  licence      {entry.licence}",
        "               full terms: https://files.grouplens.org/datasets/movielens/ml-100k-README.txt",
        "  reads        ml-100k/u.data",
        "  fetched      no; fetch it with `fedrecsim data fetch movielens-100k --accept-licence` into "
        f"{tmp_path / 'movielens-100k'}",
    ]
    (tmp_path / "movielens-100k" / "ml-100k").mkdir(parents=True)
    (tmp_path / "movielens-100k" / "ml-100k" / "u.data").write_text("")
    assert dataset_text("movielens-100k", tmp_path).splitlines()[-1] == (
        f"  fetched      yes, in {tmp_path / 'movielens-100k' / 'ml-100k'} "
        "(a scenario with data.source = 'movielens-100k' and no data.path reads it)"
    )


def test_dataset_text_of_an_entry_without_published_digest_or_size(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(DATA_HOME_ENV, str(tmp_path))
    entry = dataclasses.replace(DATASETS["movielens-1m"], sha256=None, size=None)
    lines = dataset_text(entry).splitlines()
    assert lines[4:6] == [
        "  size         unknown",
        "  sha256       none published: fetch needs --sha256 HEX or --no-verify",
    ]
    assert lines[-1].endswith(f"into {tmp_path / 'movielens-1m'}")


def test_sizes_in_megabytes() -> None:
    assert (_megabytes(1_050_000), _megabytes(999), _megabytes(None)) == ("1.1 MB", "0.0 MB", "?")


def test_a_dataset_is_a_plain_frozen_record() -> None:
    fields = [field.name for field in dataclasses.fields(Dataset)]
    assert fields == [
        "name", "title", "url", "sha256", "size", "checksum_source", "licence", "licence_url", "homepage", "folder",
        "required", "files",
    ]


def test_the_digests_pinned_by_omnirec() -> None:
    """As ISG-Siegen/OmniRec pins them beside the same addresses (see the registry's comment)."""
    assert {name: (DATASETS[name].url, DATASETS[name].sha256) for name in ("lastfm", "filmtrust", "citeulike-a")} == {
        "lastfm": (
            "https://files.grouplens.org/datasets/hetrec2011/hetrec2011-lastfm-2k.zip",
            "6738f48195667ff03caaab4d32ca9a3133d8cc026b7c3cdaf6ce1010e913c59c",
        ),
        "filmtrust": (
            "https://guoguibing.github.io/librec/datasets/filmtrust.zip",
            "de4a55cb4ae26f663d88e9ad1ba1fae2d0d6d7a7499e37dc5245bab470c2d13c",
        ),
        "citeulike-a": (
            "https://github.com/js05212/citeulike-a/archive/refs/heads/master.zip",
            "d47993abf270e0366536c94a9c31c512082b124ad6039b3779b519aa8ab4e96e",
        ),
    }
    for name in ("lastfm", "filmtrust", "citeulike-a"):
        assert "ISG-Siegen/OmniRec" in DATASETS[name].checksum_source and DATASETS[name].size is None
