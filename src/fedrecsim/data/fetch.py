"""`fetch`: download a registered data set into the data home, verify it, unpack it, all or nothing.

The steps, each inside the data home so that the last one is an atomic rename on one file system:
make a hidden temporary folder (``.NAME-*.unpack``) and file (``.NAME-*.download``), download into the
file while hashing it, refuse a download shorter than its ``Content-Length``, compare the SHA-256 with
the expected one, unpack into the folder, check that the loader's file is there, and rename the folder
to ``<data home>/NAME``. Whatever fails -- an unreachable host, a broken-off download, a checksum
mismatch, an archive that does not unpack -- raises `DatasetError` naming the address and the reason,
after the temporary file and folder were removed: the data home holds either the complete data set or
nothing of this attempt; the data home itself, and the folders above it, are removed again when this
attempt created them (they are empty then). (A fetch killed outright leaves its hidden temporary paths
behind; they are never read, and can be deleted.)

A data set published as plain files (`Dataset.files`, LightGCN's ``train.txt`` and ``test.txt``) is
fetched the same way, file after file into the hidden folder, which is renamed into place only when
all arrived; its digest is the SHA-256 of their ``sha256sum`` listing, so that one digest checks them all.

The expected SHA-256 is the registry's, or ``sha256=`` (``--sha256 HEX``) where the caller knows better
(a registry entry without a published digest needs it, or ``verify=False``). ``url=`` (``--url``) fetches
the same archive from a mirror or a local ``file://`` copy -- and is how the tests serve their own
archive -- the checksum still guarding what is installed.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256 as sha256_hasher
from pathlib import Path
from typing import BinaryIO, TextIO

from fedrecsim.data.registry import Dataset, data_home, dataset, fetched_path, install_folder
from fedrecsim.errors import ConfigError, DatasetError

ProgressCallback = Callable[[int, "int | None"], None]
"""Called as ``progress(bytes_so_far, total_bytes_or_None)`` while a download runs."""

FETCH_RECORD = "fedrecsim-dataset.json"
"""The file in ``<data home>/NAME`` recording what was fetched: name, url, sha256, size, verified."""

_CHUNK = 1 << 16
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Fetched:
    """What `fetch` installed (or found installed).

    Attributes:
        name: The data set.
        path: The folder its loader reads (what ``data.path`` would say).
        sha256: The archive's SHA-256 as downloaded (for one found installed: as recorded then).
        size: The archive's size in bytes (likewise).
        verified: Whether ``sha256`` was checked against an expected digest.
        downloaded: False when the data set was already there and nothing was downloaded.
    """

    name: str
    path: Path
    sha256: str
    size: int
    verified: bool
    downloaded: bool


def fetch(
    name: str | Dataset,
    *,
    accept_licence: bool = False,
    home: str | Path | None = None,
    url: str | None = None,
    sha256: str | None = None,
    verify: bool = True,
    progress: ProgressCallback | None = None,
    timeout_s: float = 60.0,
) -> Fetched:
    """Download, verify and unpack data set ``name`` into ``<home>/<name>``; nothing if it is there already.

    Args:
        name: A registered data set (`fedrecsim.data.registry.DATASETS`), or a `Dataset` describing
            another archive (it is installed in ``<home>/<its name>``).
        accept_licence: Must be true: the caller accepts the data set's licence (`Dataset.licence`).
        home: The data home (default `data_home`: ``$FEDRECSIM_DATA`` or the platform's cache folder).
        url: Download from here instead of the registry's address (a mirror, a ``file://`` copy).
        sha256: The expected SHA-256 (64 hex digits) instead of the registry's.
        verify: False installs the download without comparing digests (its digest is still returned).
        progress: Called with the bytes received so far and the total when the server announced it.
        timeout_s: How long to wait for the server to answer or send the next bytes.

    Raises:
        ConfigError: ``name`` is not registered (``data.source``) or ``sha256`` is not 64 hex digits.
        DatasetError: the licence was not accepted; there is no digest to verify against; the download
            failed, was cut short, or does not match the digest; the archive cannot be unpacked or lacks
            the loader's file; ``<home>/<name>`` exists without the loader's file.
    """
    entry = dataset(name)
    if not accept_licence:
        raise DatasetError(
            entry.name,
            f"not fetched: its licence must be accepted first ({entry.licence_url}); "
            "pass --accept-licence (accept_licence=True) to accept it",
        )
    expected = _expected_digest(entry, sha256, verify)
    root = data_home() if home is None else Path(home)
    found = _installed(entry, root)
    if found is not None:
        return found
    created: list[Path] = []
    try:
        created = _make_folders(root)
        unpacked = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", suffix=".unpack", dir=root))
    except OSError as error:
        _remove_folders(created)  # what _make_folders created before mkdtemp failed
        raise DatasetError(root, f"cannot write in the data folder: {_reason(error)}") from error
    source = entry.url if url is None else url
    installed = False
    try:
        digest, size = _download_and_unpack(entry, source, expected, unpacked, progress, timeout_s)
        record = {"name": entry.name, "url": source, "sha256": digest, "size": size, "verified": expected is not None}
        (unpacked / FETCH_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        target = install_folder(entry, root)
        try:
            unpacked.rename(target)
        except OSError as error:
            # Another fetch of the same data set may have finished first: then keep its copy, discard ours.
            other = _installed(entry, root)
            if other is None:
                raise DatasetError(target, f"cannot move the data set into place: {_reason(error)}") from error
            installed = True
            return other
        installed = True
        return Fetched(entry.name, target / entry.folder, digest, size, expected is not None, True)
    finally:
        # Once renamed into place the temporary folder no longer exists, and this removes nothing.
        shutil.rmtree(unpacked, ignore_errors=True)
        if not installed:
            _remove_folders(created)


def _make_folders(root: Path) -> list[Path]:
    """Create ``root`` and its missing parents; the ones created, outermost first."""
    missing = []
    probe = root
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    created: list[Path] = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:  # made meanwhile by someone else: not ours to remove
            continue
        except OSError:
            _remove_folders(created)
            raise
        created.append(folder)
    return created


def _remove_folders(created: list[Path]) -> None:
    """Remove the folders `_make_folders` created, innermost first, each only while empty (``rmdir``)."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            break


def _download_and_unpack(
    entry: Dataset,
    source: str,
    expected: str | None,
    unpacked: Path,
    progress: ProgressCallback | None,
    timeout_s: float,
) -> tuple[str, int]:
    """Download ``source`` beside ``unpacked``, check its digest, unpack it there; its SHA-256 and size."""
    if entry.files:
        digest, size = _download_files(entry, source, unpacked / entry.folder, progress, timeout_s)
        _check_digest(source, expected, digest, size)
    else:
        digest, size = _download_archive(entry, source, expected, unpacked, progress, timeout_s)
    if not (unpacked / entry.folder / entry.required).is_file():
        raise DatasetError(source, f"the archive holds no {_reads(entry)}")
    return digest, size


def _download_files(
    entry: Dataset, source: str, into: Path, progress: ProgressCallback | None, timeout_s: float
) -> tuple[str, int]:
    """Download each of ``entry.files`` from ``source/NAME`` into ``into``; their listing's SHA-256, total size."""
    into.mkdir(parents=True, exist_ok=True)
    listing = []
    total = 0
    for name in entry.files:
        with open(into / name, "wb") as sink:
            digest, size = _download(f"{source.rstrip('/')}/{name}", sink, progress, timeout_s)
        listing.append(f"{digest}  {name}\n")
        total += size
    return sha256_hasher("".join(listing).encode("utf-8")).hexdigest(), total


def _reads(entry: Dataset) -> str:
    """The loader's file inside the installed folder, as a relative path."""
    return f"{entry.folder}/{entry.required}".lstrip("/")


def _check_digest(source: str, expected: str | None, digest: str, size: int) -> None:
    if expected is not None and digest != expected:
        raise DatasetError(
            source,
            f"SHA-256 mismatch: expected {expected}, got {digest} ({size:,} bytes); the download was discarded",
        )


def _download_archive(
    entry: Dataset,
    source: str,
    expected: str | None,
    unpacked: Path,
    progress: ProgressCallback | None,
    timeout_s: float,
) -> tuple[str, int]:
    handle, download_name = tempfile.mkstemp(prefix=f".{entry.name}-", suffix=".download", dir=unpacked.parent)
    download = Path(download_name)
    try:
        with os.fdopen(handle, "wb") as sink:
            digest, size = _download(source, sink, progress, timeout_s)
        _check_digest(source, expected, digest, size)
        _unpack(source, download, unpacked)
    finally:
        download.unlink()
    return digest, size


def _expected_digest(entry: Dataset, sha256: str | None, verify: bool) -> str | None:
    """The digest the download must have, or None for ``verify=False``."""
    if sha256 is not None:
        given = sha256.strip().lower()
        if not _HEX_DIGEST.fullmatch(given):
            raise ConfigError("sha256", f"expected 64 hexadecimal digits, got {sha256!r}")
        sha256 = given
    if not verify:
        return None
    expected = sha256 or entry.sha256
    if expected is None:
        raise DatasetError(
            entry.name,
            "no SHA-256 of its archive is published, so the download cannot be verified; give the digest you "
            "trust with --sha256 HEX (sha256=), or fetch it unverified with --no-verify (verify=False), which "
            "prints the digest of what was downloaded",
        )
    return expected


def _installed(entry: Dataset, root: Path) -> Fetched | None:
    """The data set as installed in ``root``; None if absent; an error if its folder is not ours."""
    target = install_folder(entry, root)
    folder = fetched_path(entry, root)
    if folder is None:
        if target.exists() or target.is_symlink():
            raise DatasetError(
                target, f"exists but holds no {_reads(entry)}; move it away to fetch {entry.name}"
            )
        return None
    try:
        record = json.loads((target / FETCH_RECORD).read_text(encoding="utf-8"))
        digest, size, verified = str(record["sha256"]), int(record["size"]), bool(record["verified"])
    except (OSError, ValueError, KeyError, TypeError):
        # Put there by hand (or the record was edited): usable, but we cannot say what it is.
        digest, size, verified = "", 0, False
    return Fetched(entry.name, folder, digest, size, verified, False)


def _download(url: str, sink: BinaryIO, progress: ProgressCallback | None, timeout_s: float) -> tuple[str, int]:
    """Copy ``url`` into ``sink``; its SHA-256 and size. Refuses fewer bytes than ``Content-Length``."""
    hasher = sha256_hasher()
    received = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            total = _content_length(response.headers.get("Content-Length"))
            while chunk := response.read(_CHUNK):
                sink.write(chunk)
                hasher.update(chunk)
                received += len(chunk)
                if progress is not None:
                    progress(received, total)
    except urllib.error.HTTPError as error:
        raise DatasetError(url, f"the server answered HTTP {error.code} {error.reason}") from error
    except urllib.error.URLError as error:
        raise DatasetError(url, f"cannot download: {_reason(error.reason)}") from error
    except http.client.IncompleteRead as error:
        raise DatasetError(url, f"the download broke off after {received:,} bytes") from error
    except TimeoutError as error:
        raise DatasetError(url, f"no data for {timeout_s:g} s after {received:,} bytes; try again later") from error
    except (OSError, http.client.HTTPException) as error:
        raise DatasetError(url, f"the download broke off after {received:,} bytes: {_reason(error)}") from error
    except ValueError as error:  # urllib's "unknown url type"
        raise DatasetError(url, f"not a URL urllib can open: {error}") from error
    if total is not None and received != total:
        raise DatasetError(url, f"the download broke off after {received:,} of {total:,} bytes")
    return hasher.hexdigest(), received


def _content_length(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() else None


def _reason(reason: object) -> str:
    """An error's words for a one-line message: an OS error's ``strerror`` without its number and path."""
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason)


def _unpack(url: str, archive: Path, into: Path) -> None:
    """Unpack a zip or (compressed) tar archive into ``into``, refusing members that would land outside it."""
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as bundle:
                # ZipFile.extractall drops absolute roots and ".." from member names, so nothing escapes.
                bundle.extractall(into)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as bundle:
                bundle.extractall(into, filter="data")
        else:
            raise DatasetError(url, "the download is neither a zip nor a tar archive")
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as error:
        raise DatasetError(url, f"cannot unpack the archive: {_reason(error)}") from error


class DownloadProgress:
    """A one-line byte counter for a terminal: ``[####....] 1.2 / 4.9 MB  0.8s``, at most ten draws a second.

    Called like a `ProgressCallback`; `close` ends its line. Draw it only on a terminal. ``clock`` gives
    the seconds it shows (tests pass their own).
    """

    def __init__(
        self, stream: TextIO, redraw_every_s: float = 0.1, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.stream = stream
        self.redraw_every_s = redraw_every_s
        self.clock = clock
        self.started = clock()
        self.last_drawn_s: float | None = None

    def __call__(self, received: int, total: int | None) -> None:
        elapsed = self.clock() - self.started
        done = total is not None and received >= total
        if self.last_drawn_s is not None and elapsed - self.last_drawn_s < self.redraw_every_s and not done:
            return
        self.last_drawn_s = elapsed
        if total:
            filled = min(30, 30 * received // total)
            shown = f"[{'#' * filled}{'.' * (30 - filled)}] {received / 1e6:.1f} / {total / 1e6:.1f} MB"
        else:
            shown = f"{received / 1e6:.1f} MB"
        self.stream.write(f"\r{shown}  {elapsed:.1f}s")
        self.stream.flush()

    def close(self) -> None:
        """End the drawn line, if any, so what follows starts on its own."""
        if self.last_drawn_s is not None:
            self.stream.write("\n")
            self.stream.flush()
            self.last_drawn_s = None


def licence_text(name: str) -> str:
    """The lines ``fedrecsim data fetch`` shows before it downloads: the licence and where to read it."""
    entry = dataset(name)
    return f"{entry.name} ({entry.title}) comes under this licence:\n  {entry.licence}\n  full terms: {entry.licence_url}"


__all__ = ["FETCH_RECORD", "DownloadProgress", "Fetched", "ProgressCallback", "fetch", "licence_text"]
