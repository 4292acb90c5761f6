"""docs/writing-a-protocol.md shows the example package's files as they are, and the package is complete."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "writing-a-protocol.md"
EXAMPLE = ROOT / "examples" / "secure_sum"

# A file shown in the tutorial: its path on a line of its own, then a fenced block with its text.
SHOWN = re.compile(r"^`(examples/secure_sum/[^`]+)`:\n\n```[a-z]*\n(.*?)\n```$", re.MULTILINE | re.DOTALL)


def test_every_file_the_tutorial_shows_is_the_file_in_the_example_verbatim() -> None:
    shown = dict(SHOWN.findall(TUTORIAL.read_text()))
    assert set(shown) >= {
        "examples/secure_sum/secure_sum/messages.py",
        "examples/secure_sum/secure_sum/roles.py",
        "examples/secure_sum/secure_sum/protocol.py",
        "examples/secure_sum/pyproject.toml",
        "examples/secure_sum/scenario.toml",
        "examples/secure_sum/tests/test_secure_sum.py",
    }
    for path, text in shown.items():
        assert (ROOT / path).read_text().rstrip("\n") == text, f"{path} differs from the tutorial's copy"


def test_the_example_registers_its_protocol_and_its_scenario_names_it() -> None:
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["fedrecsim.protocols"] == {"secure_sum": "secure_sum.protocol:PROTOCOL"}
    scenario = tomllib.loads((EXAMPLE / "scenario.toml").read_text())
    assert scenario["run"]["protocol"] == "secure_sum"

