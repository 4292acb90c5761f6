"""The registry of public data sets our loaders read, and the local data folder they are fetched into.

Each `Dataset` names its official download address, the archive's SHA-256 and size as published by a
third party we cite (we never had the files in hand to hash them ourselves), its licence in one line
and where to read it in full, and where in the unpacked archive the loader finds its file. Only data
sets with a loader are registered: a scenario names them in ``data.source``.

``fedrecsim data fetch NAME --accept-licence`` (`fedrecsim.data.fetch`) puts ``NAME``'s unpacked
archive in ``<data home>/NAME/``; a scenario whose ``data.path`` is empty then reads it from there
(`resolve_path`). The data home is ``$FEDRECSIM_DATA`` when set, else the platform's cache folder:
``$XDG_CACHE_HOME/fedrecsim`` (default ``~/.cache/fedrecsim``) on Linux and other POSIX systems,
``~/Library/Caches/fedrecsim`` on macOS, ``%LOCALAPPDATA%\\fedrecsim\\Cache`` on Windows. The folder
``<data home>/NAME`` appears only complete (it is renamed into place after the download was verified
and unpacked), so its presence is the proof that a data set was fetched.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from fedrecsim.errors import ConfigError

DATA_HOME_ENV = "FEDRECSIM_DATA"
"""The environment variable that, when set and not empty, names the data home."""


@dataclass(frozen=True)
class Dataset:
    """One registered data set: where to get it, how to check it, on which terms, where its loader looks.

    Attributes:
        name: The registry key, which is also the ``data.source`` that reads it.
        title: A human name.
        url: The official download address of the archive (zip or tar).
        sha256: The archive's published SHA-256 (lower-case hex), or None where none is published:
            fetching such an entry needs an explicit digest or ``verify=False``.
        size: The archive's published size in bytes, or None.
        checksum_source: Where ``sha256`` and ``size`` were published.
        licence: The terms of use in one line.
        licence_url: Where the terms are written in full.
        homepage: The data set's page.
        folder: The folder inside the unpacked archive the loader reads (``data.path``); empty: the
            archive's top level.
        required: The file in ``folder`` the loader reads; an archive without it is refused.
        files: Not empty for a data set published as plain files rather than an archive: each is
            downloaded from ``url`` + ``/`` + its name into ``folder``. ``sha256`` and ``size`` are then
            those of the files' ``sha256sum`` listing (a ``HEX  NAME`` line per file, in this order) and
            of all files together, since one digest must cover them all.
    """

    name: str
    title: str
    url: str
    sha256: str | None
    size: int | None
    checksum_source: str
    licence: str
    licence_url: str
    homepage: str
    folder: str
    required: str
    files: tuple[str, ...] = ()


_GROUPLENS_TERMS = (
    "GroupLens research licence: research use only; no redistribution and no commercial or revenue-bearing "
    "use without GroupLens's permission; acknowledge the data set in publications (Harper & Konstan 2015); "
    "no endorsement by the University of Minnesota or GroupLens may be implied; no warranty"
)

# Checksums and sizes: tensorflow/datasets, tensorflow_datasets/url_checksums/movielens.txt at commit
# 1c076ac3c19c8ea83e1d1a75e0623c9a699e0d7c (its lines are "URL<TAB>SIZE<TAB>SHA256<TAB>FILE"); the same
# SHA-256 values are pinned by tensorflow/models' MovieLens-1M download code and by many projects that
# verify these archives.
_TFDS = (
    "tensorflow/datasets, tensorflow_datasets/url_checksums/movielens.txt "
    "(commit 1c076ac3c19c8ea83e1d1a75e0623c9a699e0d7c)"
)

_DATASETS = (
    Dataset(
        name="movielens-100k",
        title="MovieLens 100K (943 users, 1,682 movies, 100,000 ratings 1-5)",
        url="https://files.grouplens.org/datasets/movielens/ml-100k.zip",
        sha256="50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
        size=4_924_029,
        checksum_source=_TFDS,
        licence=_GROUPLENS_TERMS,
        licence_url="https://files.grouplens.org/datasets/movielens/ml-100k-README.txt",
        homepage="https://grouplens.org/datasets/movielens/100k/",
        folder="ml-100k",
        required="u.data",
    ),
    Dataset(
        name="movielens-1m",
        title="MovieLens 1M (6,040 users, 3,706 movies, 1,000,209 ratings 1-5)",
        url="https://files.grouplens.org/datasets/movielens/ml-1m.zip",
        sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
        size=5_917_549,
        checksum_source=_TFDS,
        licence=_GROUPLENS_TERMS,
        licence_url="https://files.grouplens.org/datasets/movielens/ml-1m-README.txt",
        homepage="https://grouplens.org/datasets/movielens/1m/",
        folder="ml-1m",
        required="ratings.dat",
    ),
)

_HETREC_LASTFM_TERMS = (
    "HetRec 2011 Last.fm data: non-commercial use only (commercial use needs Last.fm's permission); cite the "
    "Last.fm website and the HetRec 2011 workshop (Cantador, Brusilovsky & Kuflik, RecSys 2011); no warranty"
)

# Digests of the Last.fm, FilmTrust and citeulike-a archives: ISG-Siegen/OmniRec, which pins each
# archive's SHA-256 beside its address (sizes are not published there). The citeulike-a archive is
# GitHub's zip of a branch, which GitHub may rebuild with other bytes: a mismatch there most likely
# means a rebuilt archive (check the files, then fetch with --sha256 HEX or --no-verify).
_OMNIREC = "ISG-Siegen/OmniRec, src/omnirec/data_loaders/{} (commit {})"

# LightGCN's Gowalla and Yelp2018 are plain files in the authors' repository; nobody publishes their
# SHA-256 (reczoo/BARS lists MD5 sums of a re-hosted copy only), so fetching them needs --no-verify or
# a digest the user trusts.
_LIGHTGCN_DATA = "https://raw.githubusercontent.com/kuandeng/LightGCN/master/Data"
_LIGHTGCN_TERMS = (
    "{}; LightGCN's preprocessed split (He et al., SIGIR 2020) is redistributed by its authors without a "
    "licence of its own: research use, cite LightGCN and the original data set"
)

_DATASETS += (
    Dataset(
        name="lastfm",
        title="Last.fm hetrec-2011 (1,892 users, 17,632 artists, 92,834 play counts)",
        url="https://files.grouplens.org/datasets/hetrec2011/hetrec2011-lastfm-2k.zip",
        sha256="6738f48195667ff03caaab4d32ca9a3133d8cc026b7c3cdaf6ce1010e913c59c",
        size=None,
        checksum_source=_OMNIREC.format("hetrec_lastfm.py", "79cb11648d108a19116a2dcb5f0985d7b505462f"),
        licence=_HETREC_LASTFM_TERMS,
        licence_url="https://files.grouplens.org/datasets/hetrec2011/hetrec2011-lastfm-readme.txt",
        homepage="https://grouplens.org/datasets/hetrec-2011/",
        folder="",
        required="user_artists.dat",
    ),
    Dataset(
        name="filmtrust",
        title="FilmTrust (1,508 users, 2,071 movies, about 35,500 ratings 0.5-4)",
        url="https://guoguibing.github.io/librec/datasets/filmtrust.zip",
        sha256="de4a55cb4ae26f663d88e9ad1ba1fae2d0d6d7a7499e37dc5245bab470c2d13c",
        size=None,
        checksum_source=_OMNIREC.format("filmtrust.py", "dc55572bddc8c5fbd8d03a279a8957ecb5b166a2"),
        licence=(
            "no licence published: crawled from the FilmTrust site and shared by the LibRec authors for "
            "research; cite Guo, Zhang & Yorke-Smith (IJCAI 2013)"
        ),
        licence_url="https://guoguibing.github.io/librec/datasets.html",
        homepage="https://guoguibing.github.io/librec/datasets.html",
        folder="",
        required="ratings.txt",
    ),
    Dataset(
        name="citeulike-a",
        title="citeulike-a (5,551 users, 16,980 articles, 204,986 implicit entries)",
        url="https://github.com/js05212/citeulike-a/archive/refs/heads/master.zip",
        sha256="d47993abf270e0366536c94a9c31c512082b124ad6039b3779b519aa8ab4e96e",
        size=None,
        checksum_source=_OMNIREC.format("citeulike.py", "dc55572bddc8c5fbd8d03a279a8957ecb5b166a2"),
        licence=(
            "no licence published: research data of Wang & Blei (KDD 2011, collaborative topic regression) "
            "from CiteULike; cite that paper"
        ),
        licence_url="https://github.com/js05212/citeulike-a",
        homepage="https://github.com/js05212/citeulike-a",
        folder="citeulike-a-master",
        required="users.dat",
    ),
    Dataset(
        name="gowalla",
        title="Gowalla, LightGCN split (29,858 users, 40,981 places, 810,128 train + 217,242 test)",
        url=f"{_LIGHTGCN_DATA}/gowalla",
        sha256=None,
        size=None,
        checksum_source="none published",
        licence=_LIGHTGCN_TERMS.format(
            "Gowalla check-ins from SNAP (Cho, Myers & Leskovec, KDD 2011), published without a licence"
        ),
        licence_url="https://snap.stanford.edu/data/loc-gowalla.html",
        homepage="https://github.com/kuandeng/LightGCN",
        folder="gowalla",
        required="train.txt",
        files=("train.txt", "test.txt"),
    ),
    Dataset(
        name="yelp2018",
        title="Yelp2018, LightGCN split (31,668 users, 38,048 businesses, 1,237,259 train + 324,147 test)",
        url=f"{_LIGHTGCN_DATA}/yelp2018",
        sha256=None,
        size=None,
        checksum_source="none published",
        licence=_LIGHTGCN_TERMS.format(
            "Yelp Dataset Challenge 2018 data under Yelp's Dataset Terms of Use: academic, non-commercial "
            "use only, no redistribution"
        ),
        licence_url="https://www.yelp.com/dataset",
        homepage="https://github.com/kuandeng/LightGCN",
        folder="yelp2018",
        required="train.txt",
        files=("train.txt", "test.txt"),
    ),
)

DATASETS: Mapping[str, Dataset] = MappingProxyType({entry.name: entry for entry in _DATASETS})
"""Every registered data set by name (read-only)."""


def dataset(name: str | Dataset) -> Dataset:
    """The registered data set ``name`` (a `Dataset` is returned as it is, so every function taking a
    name also takes a description of an archive that is not registered).

    Raises:
        ConfigError: no data set of that name is registered (``data.source``; the message lists them).
    """
    if isinstance(name, Dataset):
        return name
    try:
        return DATASETS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            "data.source", f"no registered data set {name!r}; registered: {', '.join(DATASETS)}"
        ) from None


def data_home(environ: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """The folder data sets are fetched into (see the module's docstring); it need not exist yet.

    Args:
        environ: The environment to read (default ``os.environ``).
        platform: ``sys.platform``'s value to decide for (default the running one).
    """
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    chosen = environ.get(DATA_HOME_ENV, "")
    if chosen:
        return Path(chosen).expanduser()
    home = Path(environ.get("HOME") or Path.home())
    if platform == "win32":
        local = environ.get("LOCALAPPDATA", "")
        return (Path(local) if local else home / "AppData" / "Local") / "fedrecsim" / "Cache"
    if platform == "darwin":
        return home / "Library" / "Caches" / "fedrecsim"
    # The XDG base directory specification: a relative value is invalid and must be ignored.
    xdg = environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else home / ".cache") / "fedrecsim"


def install_folder(name: str | Dataset, home: str | Path | None = None) -> Path:
    """Where data set ``name`` is (or would be) unpacked: ``<home>/<name>``; ``home`` defaults to `data_home`."""
    return (data_home() if home is None else Path(home)) / dataset(name).name


def fetched_path(name: str | Dataset, home: str | Path | None = None) -> Path | None:
    """The folder the loader of data set ``name`` reads, if ``name`` was fetched into ``home``; else None."""
    entry = dataset(name)
    folder = install_folder(entry, home) / entry.folder
    return folder if (folder / entry.required).is_file() else None


def fetch_command(name: str) -> str:
    """The command line that fetches data set ``name`` into the data home."""
    return f"fedrecsim data fetch {name} --accept-licence"


def resolve_path(source: str, path: str | Path) -> str:
    """``path`` if given; for an empty one and a registered ``source``, its fetched folder in the data home.

    Sources that are not registered (``synthetic``, ``npz``) get ``path`` back unchanged, so their own
    checks report an empty one.

    Raises:
        ConfigError: ``path`` is empty and the registered ``source`` has not been fetched (``data.path``;
            the message gives the exact fetch command).
    """
    if str(path) or source not in DATASETS:
        return str(path)
    found = fetched_path(source)
    if found is None:
        raise ConfigError(
            "data.path",
            f"empty, and data set {source!r} has not been fetched into {install_folder(source)}; "
            f"fetch it with `{fetch_command(source)}` (it shows the licence first), or set data.path to your copy",
        )
    return str(found)


def registry_text(home: str | Path | None = None) -> str:
    """``fedrecsim data list``: one line per data set (name, size, fetched or not, title), then the data home."""
    home = data_home() if home is None else Path(home)
    rows = [("name", "size", "fetched", "title")]
    for name, entry in DATASETS.items():
        fetched = "yes" if fetched_path(name, home) is not None else "no"
        rows.append((name, _megabytes(entry.size), fetched, entry.title))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    lines = [
        f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}" for row in rows
    ]
    lines.append(f"data home: {home} (set {DATA_HOME_ENV} to use another folder)")
    return "\n".join(lines)


def dataset_text(name: str | Dataset, home: str | Path | None = None) -> str:
    """``fedrecsim data info NAME``: everything the registry knows about ``name`` and whether it was fetched."""
    entry = dataset(name)
    home = data_home() if home is None else Path(home)
    found = fetched_path(entry, home)
    size = "unknown" if entry.size is None else f"{entry.size:,} bytes ({_megabytes(entry.size)})"
    digest = (
        "none published: fetch needs --sha256 HEX or --no-verify"
        if entry.sha256 is None
        else f"{entry.sha256}\n{'':15}published in {entry.checksum_source}"
    )
    status = (
        f"yes, in {found} (a scenario with data.source = {entry.name!r} and no data.path reads it)"
        if found is not None
        else f"no; fetch it with `{fetch_command(entry.name)}` into {install_folder(entry, home)}"
    )
    rows = (
        ("data.source", entry.name),
        ("homepage", entry.homepage),
        ("download", entry.url if not entry.files else f"{entry.url}/ + {', '.join(entry.files)}"),
        ("size", size),
        ("sha256", digest),
        ("licence", f"{entry.licence}\n{'':15}full terms: {entry.licence_url}"),
        ("reads", f"{entry.folder}/{entry.required}".lstrip("/")),
        ("fetched", status),
    )
    return "\n".join([f"{entry.name}: {entry.title}"] + [f"  {label:<13}{value}" for label, value in rows])


def _megabytes(size: int | None) -> str:
    return "?" if size is None else f"{size / 1e6:.1f} MB"


__all__ = [
    "DATASETS",
    "DATA_HOME_ENV",
    "Dataset",
    "data_home",
    "dataset",
    "dataset_text",
    "fetch_command",
    "fetched_path",
    "install_folder",
    "registry_text",
    "resolve_path",
]
