"""Auditing FedVAE (`fedvae.audit`): no DP claim, and the support of a user's gradient reveals its interactions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import fedrecsim.protocols.fedvae.roles as roles
from audit_helpers import audit_command, quick_study
from fedrecsim.audit import Audit
from fedrecsim.protocols import protocol_spec
from fedrecsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "fedvae_ml1m_shape.toml"
SMALL = [
    "run.rounds=2", "data.users=12", "data.items=30", "data.ratings=120", "data.test_fraction=0.1",
    "protocol.users_per_round=12", "protocol.hidden=8", "protocol.latent=4", "protocol.secure_filter='none'",
    "protocol.baseline=false", "protocol.cutoffs=[5]", "network.latency={model='constant', seconds=0.01}",
]
AUDITED = [*SMALL, "audit.party='server:0'", "audit.trials=40", "audit.chunk=40", "audit.distinguishers=['gradient_support']"]


def test_fedvae_declares_one_interaction_and_no_dp_claim() -> None:
    declaration = protocol_spec("fedvae").audit
    assert (declaration.neighbouring.kind, declaration.neighbouring.unit) == ("add_remove", "interaction")
    assert math.isinf(declaration.claim(load_scenario(SCENARIO)).epsilon)


@pytest.mark.timeout(300)  # 80 small runs: ~8 s of CPU
def test_the_gradient_support_reveals_the_interaction(tmp_path: Path) -> None:
    """Input dropout 0.5 over T = 2 rounds: the added item's W1 row is non-zero in some round with probability
    1 - 0.5^2 = 0.75 when the user holds it and never otherwise. Held out (20 per world): FPR 0 exactly, and
    TPR above 0.4 (the 0.75 binomial's 1e-3 quantile is 10/20), so the bound is above 0."""
    done = Audit(SCENARIO, AUDITED).run(tmp_path / "a", workers=1)
    entry = done.document["distinguishers"]["gradient_support"]
    assert entry["fpr"] == 0.0 and entry["tpr"] > 0.4
    assert done.epsilon_lower > 0.5 and done.document["verdict"].startswith("no DP claim")


@pytest.mark.timeout(300)  # 80 small runs
def test_the_audit_sees_no_leak_when_the_first_layer_gradient_is_withheld(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The distinguisher reads only W1's rows: a user that zeroes that block (the deliberate break) leaks nothing
    through it, so the test above is one that can fail."""
    real = roles.FedVAEUser.contribution
    hidden = 8

    def withheld(self, round_index, weights):  # type: ignore[no-untyped-def]
        message = real(self, round_index, weights)
        values = np.array(message.values)
        values[: self.layout.n_items * hidden] = 0.0
        return type(message)(message.round, values)

    monkeypatch.setattr(roles.FedVAEUser, "contribution", withheld)
    done = Audit(SCENARIO, AUDITED).run(tmp_path / "a", workers=1)
    assert done.document["distinguishers"]["gradient_support"]["tpr"] == 0.0 and done.epsilon_lower == 0.0


@pytest.mark.timeout(300)
def test_fedrecsim_audit_runs_on_fedvae(tmp_path: Path) -> None:
    shown = audit_command(SCENARIO, "server:0", SMALL, tmp_path / "out")
    assert "claimed: no DP claim" in shown and "gradient_support" in shown


@pytest.mark.timeout(300)  # two audits of 40 small runs each
def test_the_study_script_prints_the_leak_and_what_it_means(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = quick_study("audit_fedvae", tmp_path / "out", monkeypatch)
    rows = [line.split() for line in lines if line[:1].isdigit()]
    assert [(row[0], row[1]) for row in rows] == [("1", "none"), ("2", "none")]
    assert all(float(row[5]) == 0.0 for row in rows)  # no false positive: an item the user lacks is never in the support
    assert lines[-1].startswith("no DP claim for T = 1, T = 2") and "lower bound" in lines[-1]
