"""Result folders: where a run's files go, checked before the run, written atomically after it.

The one rule: fedrecsim never removes or overwrites anything it did not create.

- `prepare_output` runs before the simulation. It refuses an existing target (a file, a folder, a
  symlink, even an empty folder) unless ``overwrite`` is set, and then accepts only a folder that holds a
  fedrecsim result -- a ``result.json`` carrying `RESULT_FORMAT` and nothing but the files a run writes
  (`RESULT_FILES`). It creates the missing parent folders and a hidden staging folder beside the target,
  so an unwritable location fails now, not after an hour of simulation.
- `OutputTarget.commit` moves the complete staging folder into place with one rename. A replaced result
  is first renamed aside, then its files are deleted by name and its folder removed with ``rmdir``, which
  cannot remove anything else.
- `OutputTarget.abandon` (a failed or interrupted run) removes the staging folder and the parent folders
  `prepare_output` created, and nothing else.
- With ``numbered`` (the default location ``results/<name>``), an existing target is not refused: the
  run goes to the first free ``<name>-2``, ``<name>-3``, ... instead.
- A run killed outright (SIGKILL, a power cut) leaves its staging folder ``.<name>.partial-<pid>-<n>``
  behind. Each staging folder holds an owner marker (`STAGING_MARKER`: host, boot and process id), and
  `prepare_output` removes the staging folders of the same target whose owner is dead -- same host, and
  the process gone or the machine rebooted since -- when they hold nothing but the marker and the files
  a run writes. A folder without the marker, of a live or unknown owner, or with anything else in it is
  left alone. A target whose staging folder's owner is alive -- another process of this host running
  into it now -- is refused (`refuse_live_run`): a second run, or a ``--resume`` of its checkpoints, would
  race it for the folder and for the checkpoints it removes when it completes.

Folders and files are created with the user's umask, like any file they would create themselves.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import threadpoolctl

from .errors import OutputError

RESULT_FORMAT = "fedrecsim-result/1"
RESULT_FILES = frozenset({"result.json", "metrics.csv", "ledger.csv", "transcript.csv"})
#: The file in a staging folder naming its owner: ``<host> <boot id> <pid>``; removed before the commit.
STAGING_MARKER = ".fedrecsim-staging"
_STAGING_NAME = re.compile(r"\.(?P<name>.+)\.partial-(?P<pid>[0-9]+)-[0-9]+")


def platform_record() -> dict[str, Any]:
    """The ``platform`` of ``result.json``: what a run's floats depend on besides its scenario and seed.

    Two runs of one scenario and seed have the same ``transcript_xxh3_128`` (the content hash) when these
    agree -- the CPU architecture, Python, numpy and the SIMD paths numpy found, and each BLAS library
    loaded with its version and the kernel it chose for this CPU (``OPENBLAS_CORETYPE`` overrides it) --
    and the same ``structure_xxh3_128`` on any platform (README, "Determinism").

    Cost: finding the loaded BLAS libraries means reading the process's memory map and asking each
    library its version and kernel (milliseconds; an audit runs thousands of runs in one process), and
    none of it changes while the library stays loaded, so it is done once (`_blas_libraries`). A BLAS
    library's thread count can change at run time (``threadpoolctl.threadpool_limits``), so ``threads``
    is asked of the library on every call.
    """
    return {
        **_fixed_platform(),
        "blas": [
            {
                "library": library.internal_api,
                "version": library.version,
                "kernel": getattr(library, "architecture", None),
                "threads": library.num_threads,
                "file": os.path.basename(library.filepath or ""),
            }
            for library in _blas_libraries()
        ],
    }


@functools.cache
def _fixed_platform() -> dict[str, Any]:
    """The part of `platform_record` a process cannot change: machine, system, Python, numpy, its SIMD."""
    return {
        "machine": platform.machine(),
        "system": platform.system(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numpy_simd": _numpy_simd(),
    }


#: The BLAS libraries `_blas_libraries` found, ordered by file path, and the imported modules' names when
#: it looked.
_blas_found: tuple[frozenset[str], list[threadpoolctl.LibController]] | None = None


def _blas_libraries() -> list[threadpoolctl.LibController]:
    """threadpoolctl's controllers of the BLAS libraries loaded in this process, ordered by file path.

    A library is loaded when an extension module that links it is imported (numpy's OpenBLAS with numpy,
    scipy's with ``scipy.linalg``), so the search is repeated only when the set of imported modules has
    changed since the last one. A BLAS library loaded without any import (``ctypes.CDLL`` by hand) is
    seen at the next import.
    """
    global _blas_found
    modules = frozenset(sys.modules)
    if _blas_found is None or _blas_found[0] != modules:
        loaded = threadpoolctl.ThreadpoolController().lib_controllers
        found = [library for library in loaded if library.user_api == "blas"]
        _blas_found = (modules, sorted(found, key=lambda library: library.filepath or ""))
    return _blas_found[1]


def _numpy_simd() -> dict[str, list[str]]:
    """The SIMD extensions numpy was built for (``baseline``) and those it found on this CPU and dispatches
    to (``found``), as ``numpy.show_runtime()`` reports them."""
    try:
        from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy moved its private module: the record says so instead of guessing
        return {"baseline": [], "found": ["unknown"]}
    return {
        "baseline": list(__cpu_baseline__),
        "found": [feature for feature in __cpu_dispatch__ if __cpu_features__.get(feature)],
    }


def _lexists(path: Path) -> bool:
    return os.path.lexists(path)


def replaceable_problem(path: Path) -> str | None:
    """Why the existing ``path`` is not a fedrecsim result folder that ``--overwrite`` may replace (None: it is)."""
    if path.is_symlink() or not path.is_dir():
        return "exists and is not a folder; --overwrite replaces only a fedrecsim result folder"
    try:
        with open(path / "result.json", encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError):
        return "is not a fedrecsim result folder (no readable result.json); refusing to replace it"
    if not isinstance(document, dict) or document.get("format") != RESULT_FORMAT:
        return f"is not a fedrecsim result folder (result.json lacks format {RESULT_FORMAT!r}); refusing to replace it"
    foreign = sorted(entry.name for entry in path.iterdir() if entry.name not in RESULT_FILES or not entry.is_file())
    if foreign:
        return f"holds {foreign[0]!r}, which fedrecsim did not write; refusing to replace it"
    return None


@dataclass
class OutputTarget:
    """A checked place for one run's result folder and the staging folder being filled for it.

    Attributes:
        path: where the folder will be (absolute, symlinks in it not resolved).
        staging: the hidden sibling folder the run's files are written to.
        numbered: on commit, a target that appeared meanwhile moves the result to the next free suffix.
        overwrite: on commit, an existing fedrecsim result at ``path`` is replaced.
        created_parents: the folders `prepare_output` made, outermost first.
    """

    path: Path
    staging: Path
    numbered: bool = False
    overwrite: bool = False
    created_parents: list[Path] = field(default_factory=list)

    def commit(self) -> Path:
        """Move the staging folder into place and return the final path; OutputError if that is unsafe."""
        _remove_marker(self.staging)
        if self.numbered:
            self.path = _first_free(self.path)
        elif _lexists(self.path):
            problem = replaceable_problem(self.path) if self.overwrite else "appeared during the run; not replacing it"
            if problem is not None:
                raise OutputError(self.path, f"{problem} (this run's results are in {self.staging})")
            self._replace_existing()
            return self.path
        os.rename(self.staging, self.path)
        return self.path

    def _replace_existing(self) -> None:
        retired = _hidden_sibling(self.path, "replaced")
        os.rename(self.path, retired)
        os.rename(self.staging, self.path)
        for name in RESULT_FILES:
            if (retired / name).exists():
                (retired / name).unlink()
        retired.rmdir()

    def abandon(self) -> None:
        """Remove what `prepare_output` and the run created: the staging folder and the new parents."""
        _remove_marker(self.staging)
        for name in RESULT_FILES:
            candidate = self.staging / name
            if candidate.exists():
                candidate.unlink()
        if self.staging.exists():
            self.staging.rmdir()
        for parent in reversed(self.created_parents):
            try:
                parent.rmdir()
            except OSError:
                break


def _first_free(path: Path) -> Path:
    candidate, number = path, 1
    while _lexists(candidate):
        number += 1
        candidate = path.with_name(f"{path.name}-{number}")
    return candidate


def _hidden_sibling(path: Path, purpose: str) -> Path:
    """A name beside ``path`` that nothing uses yet: ``.<name>.<purpose>-<pid>-<n>``."""
    number = 0
    candidate = path.with_name(f".{path.name}.{purpose}-{os.getpid()}-{number}")
    while _lexists(candidate):
        number += 1
        candidate = path.with_name(f".{path.name}.{purpose}-{os.getpid()}-{number}")
    return candidate


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing ancestors; return the ones created, outermost first."""
    missing: list[Path] = []
    probe = folder
    while not _lexists(probe):
        missing.append(probe)
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(probe, "is not a folder, so no result folder can be made inside it")
    created: list[Path] = []
    try:
        for parent in reversed(missing):
            os.mkdir(parent)
            created.append(parent)
    except OSError as exc:
        for parent in reversed(created):
            parent.rmdir()
        raise OutputError(exc.filename or folder, f"cannot create the folder: {exc.strerror}") from None
    return created


def prepare_output(path: str | Path, *, overwrite: bool = False, numbered: bool = False) -> OutputTarget:
    """Check ``path`` for a run's result folder and create its staging folder, before the run starts.

    Args:
        path: the result folder to be.
        overwrite: accept an existing fedrecsim result folder at ``path`` (it is replaced on commit).
        numbered: accept an existing ``path`` by using the first free ``path-2``, ``path-3``, ... instead.

    Raises:
        OutputError: the target exists (and may not be replaced), another process of this host is running
        into it now (not with ``numbered``: that run goes to the next free name), or its location is not
        writable.
    """
    target = Path(os.path.abspath(path))
    if target.parent == target:
        raise OutputError(target, "is a file-system root, not a place for a result folder")
    if numbered:
        target = _first_free(target)
    elif _lexists(target):
        if not overwrite:
            raise OutputError(target, "already exists; choose a new location, or --overwrite (overwrite=True) to replace a fedrecsim result folder")
        problem = replaceable_problem(target)
        if problem is not None:
            raise OutputError(target, problem)
    if not numbered:
        refuse_live_run(target)
    created = _make_parents(target.parent)
    remove_dead_staging(target)
    try:
        staging = _staging_folder(target)
    except OSError as exc:
        for parent in reversed(created):
            parent.rmdir()
        raise OutputError(target.parent, f"cannot write here: {exc.strerror}") from None
    return OutputTarget(target, staging, numbered=numbered, overwrite=overwrite, created_parents=created)


def _staging_folder(target: Path) -> Path:
    while True:
        candidate = _hidden_sibling(target, "partial")
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        try:
            (candidate / STAGING_MARKER).write_text(_owner() + "\n", encoding="utf-8")
        except OSError:
            candidate.rmdir()
            raise
        return candidate


def _owner() -> str:
    return f"{socket.gethostname()} {_boot_id()} {os.getpid()}"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or "-"
    except OSError:
        return "-"


def _remove_marker(staging: Path) -> None:
    marker = staging / STAGING_MARKER
    if marker.exists():
        marker.unlink()


def _owner_state(staging: Path, pid: int) -> str:
    """Whether the run that made ``staging`` is certainly gone ("dead": its marker names this host, and
    this boot's process ``pid`` no longer exists, or the machine has rebooted since), certainly running in
    another process of this host ("alive"), or neither for sure ("unknown": no readable marker, another
    host, this very process)."""
    try:
        host, boot, owner = (staging / STAGING_MARKER).read_text(encoding="utf-8").split()
    except (OSError, ValueError, UnicodeDecodeError):
        return "unknown"
    if host != socket.gethostname() or owner != str(pid) or pid == os.getpid():
        return "unknown"
    if boot != _boot_id():
        return "dead" if boot != "-" else "unknown"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except OSError:  # it exists, owned by another user
        return "alive"
    return "alive"


def _staging_folders(target: Path) -> list[tuple[Path, int]]:
    """The staging folders beside ``target`` named as its own, with the process id in each name."""
    try:
        siblings = list(target.parent.iterdir())
    except OSError:
        return []
    found = []
    for candidate in siblings:
        match = _STAGING_NAME.fullmatch(candidate.name)
        if match is not None and match["name"] == target.name and not candidate.is_symlink() and candidate.is_dir():
            found.append((candidate, int(match["pid"])))
    return found


def refuse_live_run(target: Path) -> None:
    """Raise OutputError when another process of this host is running into ``target`` now (its staging
    folder's owner is alive): a second run or a ``--resume`` would race it for the folder and for its
    checkpoints, which the first removes when it completes."""
    for staging, pid in _staging_folders(target):
        if _owner_state(staging, pid) == "alive":
            raise OutputError(
                target, f"another fedrecsim run (process {pid}) is writing this result folder now (its staging folder "
                f"{staging.name}); wait for it to finish or stop it, then run again"
            )


def remove_dead_staging(target: Path) -> list[Path]:
    """Remove the staging folders of ``target`` that a dead run left (module docstring); returns them."""
    removed = []
    for candidate, pid in _staging_folders(target):
        if _owner_state(candidate, pid) != "dead":
            continue
        entries = list(candidate.iterdir())
        ours = RESULT_FILES | {STAGING_MARKER}
        if any(entry.name not in ours or entry.is_symlink() or not entry.is_file() for entry in entries):
            continue
        for entry in entries:
            entry.unlink()
        candidate.rmdir()
        removed.append(candidate)
    return removed


__all__ = [
    "RESULT_FILES", "RESULT_FORMAT", "STAGING_MARKER", "OutputTarget", "platform_record", "prepare_output",
    "refuse_live_run", "remove_dead_staging", "replaceable_problem",
]
