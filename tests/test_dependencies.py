"""pyproject.toml's bound on trio: fedrecsim uses trio internals (docs/architecture.md, "Virtual time"), so
the requirement names the tested releases as a closed range, the trio this suite runs on is inside it, and
a trio without those internals is refused when fedrecsim is imported (`fedrecsim.trio_internals`)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import trio
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fedrecsim.trio_internals import TESTED_TRIO

ROOT = Path(__file__).resolve().parents[1]


def _trio_requirement() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [requirement] = [Requirement(text) for text in project["dependencies"] if Requirement(text).name == "trio"]
    return requirement


def test_trio_is_bounded_above_and_below_and_the_running_release_is_inside() -> None:
    specifier = _trio_requirement().specifier
    assert {spec.operator for spec in specifier} == {">=", "<"}, specifier
    assert specifier.contains(Version(trio.__version__)), f"trio {trio.__version__} is outside {specifier}"


def test_the_docs_name_the_range_pyproject_allows() -> None:
    """Raising the bound means saying which release was tested last, where a reader looks for it."""
    bounds = {spec.operator: Version(spec.version) for spec in _trio_requirement().specifier}
    lowest, below = bounds[">="], bounds["<"]
    newest = f"{below.major}.{below.minor - 1}"

    def text(path: str) -> str:
        return " ".join((ROOT / path).read_text().split())

    assert f"{lowest}.0 (the lowest allowed) through {newest}.0" in text("docs/architecture.md")
    assert f"{lowest} to {newest} (`trio>={lowest},<{below}`)" in text("README.md")


def test_the_range_the_import_check_names_is_pyprojects() -> None:
    assert SpecifierSet(TESTED_TRIO) == _trio_requirement().specifier


@pytest.mark.parametrize(
    ("removal", "lacking"),
    [
        ("import trio._core._traps as m; del m.WaitTaskRescheduled", "WaitTaskRescheduled"),
        ("import trio._core._run as m; del m.Runner.reschedule", "the run loop's reschedule"),
        ("import trio._core._run as m; del m.Runner.runq", "the run loop's runq"),
        ("import trio._core._run as m; del m.Task._next_send_fn", "the task's _next_send_fn"),
    ],
)
def test_a_trio_without_the_internals_fedrecsim_uses_is_refused_at_import_with_what_to_install(
    removal: str, lacking: str
) -> None:
    """A trio outside the tested range installed anyway (``pip install --no-deps``): importing fedrecsim
    says what is missing and which trio to install, not an ImportError from inside trio."""
    code = f"{removal}\nimport fedrecsim"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("fedrecsim.errors.SimulationError: trio ") and lacking in last, done.stderr
    assert f"pip install 'trio{TESTED_TRIO}'" in last
