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
        folder: The folder inside the unpacked archive the loader reads (``data.path``).
        required: The file in ``folder`` the loader reads; an archive without it is refused.
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
        ("download", entry.url),
        ("size", size),
        ("sha256", digest),
        ("licence", f"{entry.licence}\n{'':15}full terms: {entry.licence_url}"),
        ("reads", f"{entry.folder}/{entry.required}"),
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
