"""What the protocols' audit tests (tests/protocols/*/test_*_audit.py) share: ``fedrecsim audit`` at test size,
and a study script ``scenarios/audit_*.py`` run ``--quick`` in this process.

Both return what the command printed, after asserting its exit status 0; the tests assert what it means.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from fedrecsim import cli
from fedrecsim.study import run_script

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def audit_command(scenario: Path, party: str, settings: Sequence[str], out: Path) -> str:
    """``fedrecsim audit SCENARIO --party PARTY --trials 4 --workers 1 --out OUT --quiet``, each of
    ``settings`` as ``--set``: what it printed."""
    argv = ["audit", str(scenario), "--party", party, "--trials", "4", "--workers", "1", "--out", str(out), "--quiet"]
    for setting in settings:
        argv += ["--set", setting]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(argv)
    assert code == 0, printed.getvalue()
    return printed.getvalue()


def quick_study(name: str, out: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``scenarios/<name>.py --quick --workers 1 --out OUT`` as its command runs it (`run_script`): the lines
    it printed."""
    spec = importlib.util.spec_from_file_location(f"scenario_script_{name}", SCENARIOS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)  # its dataclasses look their module up
    spec.loader.exec_module(script)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = run_script(script.main, ["--quick", "--workers", "1", "--out", str(out)])
    assert code == 0, printed.getvalue()
    return printed.getvalue().splitlines()
