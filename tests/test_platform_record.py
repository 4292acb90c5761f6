"""result.json's platform record: the BLAS libraries are looked up once per process, their thread counts on
every call, and the record says what threadpoolctl says.

Nothing here times anything: the saving is shown by counting threadpoolctl's library searches.
"""

from __future__ import annotations

import os
import sys
import types

import pytest
import threadpoolctl

from fedrecsim import output
from fedrecsim.output import platform_record


class _FakeBlas:
    """A loaded BLAS library as threadpoolctl describes it; its thread count can be changed at run time."""

    user_api, internal_api, version, architecture = "blas", "openblas", "0.3.99", "Zen"

    def __init__(self, filepath: str) -> None:
        self.filepath = filepath
        self.threads = 4

    @property
    def num_threads(self) -> int:
        return self.threads


class _FakeOpenMP:
    user_api, internal_api, version, filepath, num_threads = "openmp", "openmp", None, "/lib/libgomp.so.1", 2


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[_FakeBlas]]:
    """threadpoolctl's library search replaced by one that counts its calls and finds two fake BLAS
    libraries (listed out of path order) and an OpenMP runtime; the process's cache starts empty."""
    libraries = [_FakeBlas("/opt/b/libopenblas-b.so"), _FakeBlas("/opt/a/libopenblas-a.so")]
    calls: list[int] = []

    def search() -> types.SimpleNamespace:
        calls.append(1)
        return types.SimpleNamespace(lib_controllers=[*libraries, _FakeOpenMP()])

    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", search)
    monkeypatch.setattr(output, "_blas_found", None)
    return calls, libraries


def test_two_records_agree_and_the_second_does_not_search_the_libraries_again(searches) -> None:
    calls, _ = searches
    first = platform_record()
    second = platform_record()
    assert first == second
    assert len(calls) == 1
    assert first["blas"] == [
        {"library": "openblas", "version": "0.3.99", "kernel": "Zen", "threads": 4, "file": "libopenblas-a.so"},
        {"library": "openblas", "version": "0.3.99", "kernel": "Zen", "threads": 4, "file": "libopenblas-b.so"},
    ]


def test_a_thread_count_changed_at_run_time_is_recorded(searches) -> None:
    calls, libraries = searches
    platform_record()
    libraries[0].threads = 1
    assert [library["threads"] for library in platform_record()["blas"]] == [4, 1]
    assert len(calls) == 1


def test_an_import_since_the_last_search_searches_again(searches, monkeypatch: pytest.MonkeyPatch) -> None:
    calls, _ = searches
    platform_record()
    name = "fedrecsim_test_freshly_imported"
    monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    platform_record()
    platform_record()
    assert len(calls) == 2


def test_the_record_is_what_threadpoolctl_reports_for_the_loaded_libraries() -> None:
    recorded = platform_record()["blas"]
    reported = sorted(
        (library for library in threadpoolctl.threadpool_info() if library["user_api"] == "blas"),
        key=lambda library: library["filepath"],
    )
    assert recorded == [
        {
            "library": library["internal_api"],
            "version": library["version"],
            "kernel": library.get("architecture"),
            "threads": library["num_threads"],
            "file": os.path.basename(library["filepath"]),
        }
        for library in reported
    ]
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        assert all(library["threads"] == 1 for library in platform_record()["blas"])
