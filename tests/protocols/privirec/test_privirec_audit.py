"""Auditing PriviRec (`privirec.audit`): no DP claim, and its broadcasts give away the row of a user with a rare item."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from audit_helpers import audit_command, quick_study
from fedrecsim.audit import Audit
from fedrecsim.audit.spec import AuditSettings
from fedrecsim.data.ratings import Ratings
from fedrecsim.protocols import protocol_spec
from fedrecsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "privirec_small.toml"
SMALL = [
    "run.rounds=1", "data.users=12", "data.items=30", "data.ratings=80", "protocol.k=4", "protocol.secagg='ideal'",
    "network.latency={model='constant', seconds=0.01}",
]
AUDITED = [*SMALL, "audit.party='user:0'", "audit.trials=30", "audit.chunk=30"]


def test_privirec_declares_one_users_row_and_no_dp_claim() -> None:
    declaration = protocol_spec("privirec").audit
    assert (declaration.neighbouring.kind, declaration.neighbouring.unit) == ("add_remove", "user")
    claim = declaration.claim(load_scenario(SCENARIO))
    assert math.isinf(claim.epsilon) and "secure aggregation" in claim.statement


def test_the_default_target_holds_the_rarest_item() -> None:
    users, items = np.array([0, 0, 1, 1, 2, 2, 2]), np.array([0, 1, 0, 1, 0, 1, 3])
    train = Ratings(users, items, np.ones(7), 3, 5, (0.0, 1.0))
    target = protocol_spec("privirec").audit.neighbouring.target(train, AuditSettings(party="user:0"))
    assert (target.user, target.present.items, target.absent.items) == (2, (0, 1, 3), ())


@pytest.mark.timeout(300)  # 60 small runs: ~6 s of CPU
def test_a_user_decodes_the_targets_row_from_the_broadcast(tmp_path: Path) -> None:
    """The target holds an item no one else holds: row i of P' is its whole profile in every "in" run, and in an
    "out" run no one's profile is the target's row: held out TPR 1 and FPR 0 for both distinguishers."""
    done = Audit(SCENARIO, AUDITED).run(tmp_path / "a", workers=1)
    for name in ("broadcast_decoder", "degree_residual"):
        entry = done.document["distinguishers"][name]
        assert (entry["tpr"], entry["fpr"]) == (1.0, 0.0), name
    assert done.epsilon_lower > 1.0 and done.document["verdict"].startswith("no DP claim")


@pytest.mark.timeout(300)  # 60 small runs
def test_privirec_k_broadcasts_no_p_and_the_decoder_finds_nothing(tmp_path: Path) -> None:
    """PriviRec-k sends no P~: the decoder has nothing to read (the test above can fail), the degrees still leak."""
    done = Audit(SCENARIO, [*AUDITED, "protocol.variant='privirec_k'"]).run(tmp_path / "a", workers=1)
    assert done.document["distinguishers"]["broadcast_decoder"]["epsilon_lower"] == 0.0
    assert done.document["distinguishers"]["degree_residual"]["tpr"] == 1.0


@pytest.mark.timeout(300)
def test_fedrecsim_audit_runs_on_privirec(tmp_path: Path) -> None:
    shown = audit_command(SCENARIO, "user:0", SMALL, tmp_path / "out")
    assert "claimed: no DP claim" in shown and "broadcast_decoder" in shown


@pytest.mark.timeout(300)  # four audits of 40 small runs each
def test_the_study_script_prints_the_leak_per_target_and_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shown = quick_study("audit_privirec", tmp_path / "out", monkeypatch)
    rows = [line.split() for line in shown if line.startswith("privirec")]
    assert [row[0] for row in rows] == ["privirec", "privirec", "privirec_k", "privirec_k"]
    decoder = {(row[0], row[1]): float(row[-4]) for row in rows}
    assert decoder["privirec", "rarest-item"] > 0  # the broadcast alone gives the rare item's holder away
    assert decoder["privirec_k", "rarest-item"] == 0.0  # no P~ broadcast, nothing to decode
    assert "no evidence of privacy" in shown[-1]
