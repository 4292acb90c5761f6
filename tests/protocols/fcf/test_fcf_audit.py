"""Auditing FCF (`fcf.audit`): no DP claim, and the server's view reveals one rating outright."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from audit_helpers import audit_command
from fedrecsim.audit import Audit
from fedrecsim.protocols import protocol_spec
from fedrecsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "fcf_static.toml"
SMALL = [
    "run.rounds=2", "data.users=10", "data.items=30", "data.ratings=100", "protocol.d=4",
    "audit.party='server:0'", "audit.trials=30", "audit.chunk=30",
]


def test_fcf_declares_one_rating_and_no_dp_claim() -> None:
    declaration = protocol_spec("fcf").audit
    assert (declaration.neighbouring.kind, declaration.neighbouring.unit) == ("add_remove", "rating")
    assert math.isinf(declaration.claim(load_scenario(SCENARIO)).epsilon)


@pytest.mark.timeout(300)  # 60 small runs: ~3 s of CPU
def test_the_servers_view_of_the_registered_items_reveals_the_rating(tmp_path: Path) -> None:
    """The registration lists the added item in every "in" run and never in an "out" run: held out TPR 1, FPR 0,
    and the bound is the largest 15 held-out trials per world can show at 95 % (log(0.025^(1/15) / (1 - 0.025^(1/15))))."""
    done = Audit(SCENARIO, [*SMALL, "audit.distinguishers=['registered_item']"]).run(tmp_path / "a", workers=1)
    entry = done.document["distinguishers"]["registered_item"]
    assert (entry["tpr"], entry["fpr"]) == (1.0, 0.0)
    ceiling = math.log(0.025 ** (1 / 15) / (1 - 0.025 ** (1 / 15)))
    assert done.epsilon_lower == pytest.approx(ceiling, rel=1e-6)
    assert done.document["claim"]["epsilon"] is None and done.document["verdict"].startswith("no DP claim")


@pytest.mark.timeout(300)
def test_fedrecsim_audit_runs_on_fcf(tmp_path: Path) -> None:
    shown = audit_command(SCENARIO, "server:0", SMALL[:5], tmp_path / "out")
    assert "claimed: no DP claim" in shown and "registered_item" in shown
    assert json.loads((tmp_path / "out" / "audit.json").read_text())["claim"]["epsilon"] is None
