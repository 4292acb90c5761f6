"""`fedrecsim.audit.AuditGrid`, the study scripts' claimed-vs-audited table: its folders and seeds, its refusals
before anything runs, the table's cells, and verdicts in ``fedrecsim audit``'s words -- on the protocol of
one's own with a known epsilon (tests/audit_known_mechanism.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from fedrecsim.audit import (
    NO_CLAIM, NO_VIOLATION, VIOLATION, AuditedRow, AuditGrid, AuditResult, AuditRow, Column, GridResult, GridSize,
    claimed_cell,
)
from fedrecsim.errors import ConfigError, OutputError

HERE = Path(__file__).resolve().parent
BASE: dict[str, Any] = {
    "run": {"protocol": "audit_known_mechanism:PROTOCOL", "rounds": 1, "seed": 3},
    "data": {"source": "synthetic", "users": 4, "items": 10, "ratings": 12},
    "network": {"latency": {"model": "constant", "seconds": 0.01}},
    "availability": {"model": "always"},
    "protocol": {"mechanism": "rr", "epsilon": 1.0},
    "audit": {"party": "server:0", "trials": 4, "chunk": 4},
}


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))


@pytest.mark.timeout(300)  # 480 tiny runs: ~6 s of CPU
def test_a_grid_names_the_row_whose_noise_is_below_its_claim_a_violation(tmp_path: Path) -> None:
    """Randomized response claimed at eps = 1, and the same claim with users answering at eps = 4 (the
    deliberate break of tests/test_audit.py): the broken row is a VIOLATION, the honest one is not."""
    trials = ("audit.trials=120", "audit.chunk=60")
    rows = [AuditRow("honest", "the honest users", "honest", trials),
            AuditRow("broken", "the users at eps 4", "broken", (*trials, "protocol.report_epsilon=4.0"))]
    result = AuditGrid(BASE, rows).run(tmp_path / "out", workers=1)
    assert [row.verdict for row in result.rows] == [NO_VIOLATION, VIOLATION]
    assert result["honest"].most <= 1.0 < result["broken"].least
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["broken", "honest"]
    assert result["broken"].bounds == [json.loads((tmp_path / "out" / "broken" / "audit.json").read_text())["best"]["epsilon_lower"]]
    violation, held = result.verdict().splitlines()
    assert violation.startswith(f"{VIOLATION} for the users at eps 4:")
    assert held.startswith(f"{NO_VIOLATION} for the honest users:") and "not a proof" in held


def test_each_seed_is_an_audit_of_its_own_and_the_users_settings_win(tmp_path: Path) -> None:
    rows = [AuditRow(1.0, "eps 1", "eps1", ("protocol.epsilon=1.0",)), AuditRow(2.0, "eps 2", "eps2", ("protocol.epsilon=2.0",))]
    grid = AuditGrid(BASE, rows, seeds=[3, 1_000_003], settings=["data.items=12"])
    assert grid.folders() == ["eps1-seed0", "eps1-seed1", "eps2-seed0", "eps2-seed1"]
    assert [audit.scenario.run.seed for _, audit in grid.audits[2.0]] == [3, 1_000_003]
    assert {audit.scenario.data.items for audits in grid.audits.values() for _, audit in audits} == {12}
    result = grid.run(tmp_path / "out", workers=1)
    assert [row.claimed for row in result.rows] == [1.0, 2.0]
    row = result[2.0]
    assert len(row.results) == 2 and row.least <= row.mean <= row.most
    assert row.trials_per_s > 0
    again = grid.run(tmp_path / "out", workers=1)  # resumed: every trial is there
    assert again[2.0].bounds == row.bounds and again[2.0].trials_per_s == 0.0


def test_a_bad_row_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="protocol.nope"):
        AuditGrid(BASE, [AuditRow("a", "a", "a", ("protocol.nope=1",))])
    with pytest.raises(ConfigError, match="two rows share a folder"):
        AuditGrid(BASE, [AuditRow("a", "a", "same", ()), AuditRow("b", "b", "same", ())])
    with pytest.raises(ConfigError, match="two rows share a key"):
        AuditGrid(BASE, [AuditRow("a", "a", "a", ()), AuditRow("a", "b", "b", ())])
    assert not any(tmp_path.iterdir())


def test_a_folder_with_the_users_file_of_that_name_is_refused_and_the_scripts_own_is_resumed(tmp_path: Path) -> None:
    (tmp_path / "figure.png").write_text("the user's")
    grid = AuditGrid(BASE, [AuditRow("a", "a", "a", ())])
    with pytest.raises(OutputError, match="figure.png: exists and is not this script's"):
        grid.run(tmp_path, workers=1, own=["figure.png"])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["figure.png"]
    grid.run(tmp_path / "study", workers=1)
    (tmp_path / "study" / "figure.png").write_text("the script's, from the run before")
    assert grid.run(tmp_path / "study", workers=1, own=["figure.png"]).rows[0].document["trials_run"] == 0


def made_up(claimed: float | None, bound: float, verdict: str, heldout: int = 100) -> AuditResult:
    """An audit's result with just what the table and the verdict read."""
    entry = {"epsilon_lower": bound, "tpr": 1.0, "fpr": 0.0}
    document = {
        "claim": {"epsilon": claimed, "delta": 0.0}, "best": {"epsilon_lower": bound, "distinguisher": "d"}, "verdict": verdict,
        "heldout_per_world": heldout, "confidence": 0.95, "trials_run": 10, "wall_s": 2.0, "distinguishers": {"d": entry},
    }
    return AuditResult(Path("x"), document, {})


def test_the_verdict_says_violation_no_violation_and_no_claim_in_the_commands_words() -> None:
    result = GridResult((
        AuditedRow(AuditRow("a", "row a", "a", ()), (made_up(1.0, 0.2, f"{NO_VIOLATION}: ..."), made_up(1.0, 1.5, f"{VIOLATION}: ..."))),
        AuditedRow(AuditRow("b", "row b", "b", ()), (made_up(1.0, 0.5, f"{NO_VIOLATION}: ..."),)),
        AuditedRow(AuditRow("c", "row c", "c", ()), (made_up(None, 0.0, f"{NO_CLAIM} (...)"),)),
        AuditedRow(AuditRow("d", "row d", "d", ()), (made_up(2.0, 0.1, f"{NO_VIOLATION}: ..."),)),
    ))
    assert [row.verdict for row in result.rows] == [VIOLATION, NO_VIOLATION, NO_CLAIM, NO_VIOLATION]
    lines = result.verdict().splitlines()
    assert [line.split(":")[0] for line in lines] == [f"{VIOLATION} for row a", f"{NO_VIOLATION} for row b, row d", f"{NO_CLAIM} for row c"]
    assert "lower bound" in lines[2] and "no evidence of privacy" in lines[2]
    only_held = GridResult(result.rows[1:2])
    assert only_held.verdict().startswith(NO_VIOLATION) and "\n" not in only_held.verdict()


def test_the_table_lays_the_rows_out_in_the_scripts_columns() -> None:
    result = GridResult((
        AuditedRow(AuditRow(0.5, "a", "a", ()), (made_up(0.5, 0.25, NO_VIOLATION), made_up(0.5, 0.75, NO_VIOLATION))),
        AuditedRow(AuditRow(None, "b", "b", ()), (made_up(None, 2.0, NO_CLAIM),)),
    ))
    columns = (Column("key", 6, lambda row: str(row.row.key), left=True), Column("claimed", 8, claimed_cell),
               Column("mean", 7, lambda row: row.mean), Column("fpr", 6, lambda row: row.entry("d", "fpr"), ".1f"),
               Column("speed", 7, lambda row: row.trials_per_s, ".1f"))
    assert result.table(columns).splitlines() == [
        "key    claimed   mean   fpr  speed",
        "0.5        0.5  0.500   0.0    5.0",
        "None      none  2.000   0.0    5.0",
    ]



def test_the_report_is_the_table_the_figure_line_the_note_and_the_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = GridResult((AuditedRow(AuditRow(1.0, "row a", "a", ()), (made_up(1.0, 0.25, NO_VIOLATION),)),))
    columns = (Column("mean", 7, lambda row: row.mean),)
    shown = result.report(columns, tmp_path / "f.png", lambda axes, grid: None, "what it means").splitlines()
    assert shown == [*result.table(columns).splitlines(), "figure skipped: matplotlib is not installed", "what it means",
                     result.verdict()]


def test_a_grid_size_gives_the_data_overrides_in_order() -> None:
    assert GridSize(users=5, items=20, ratings=40, trials=9).data() == ("data.users=5", "data.items=20", "data.ratings=40")


def test_the_cap_is_the_bound_of_a_perfect_test_at_these_held_out_trials() -> None:
    """docs/audit.md: with n held-out trials per world and each Clopper--Pearson side at a = 0.025, a test
    with TPR 1 and FPR 0 reaches log(a^(1/n) / (1 - a^(1/n)))."""
    for n in (15, 100):
        row = AuditedRow(AuditRow("a", "a", "a", ()), (made_up(None, 0.0, NO_CLAIM, heldout=n),))
        root = 0.025 ** (1 / n)
        assert row.cap == pytest.approx(math.log(root / (1 - root)), rel=1e-9)
