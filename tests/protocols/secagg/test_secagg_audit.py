"""Auditing secure aggregation (`secagg.audit`): the server learns nothing about one input beyond the sum --
and an audit of a run whose masks are zero says it does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedrecsim
import fedrecsim.protocols.secagg.prg as prg
from audit_helpers import audit_command, quick_study
from fedrecsim.audit import Audit
from fedrecsim.data.prepare import prepare_data
from fedrecsim.errors import ConfigError
from fedrecsim.protocols import protocol_spec
from fedrecsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "secagg_small.toml"
SMALL = [
    "run.rounds=1", "data.users=6", "data.items=20", "data.ratings=40", "availability.dropout=0.0",
    "protocol.inputs='ratings'", "network.latency={model='constant', seconds=0.01}",
]
AUDITED = [*SMALL, "audit.party='server:0'", "audit.trials=30", "audit.chunk=30"]


def test_secagg_declares_one_input_replaced_and_claims_nothing_beyond_the_sum() -> None:
    declaration = protocol_spec("secagg").audit
    assert (declaration.neighbouring.kind, declaration.neighbouring.unit) == ("replace", "input")
    claim = declaration.claim(load_scenario(SCENARIO, ["protocol.inputs='ratings'"]))
    assert (claim.epsilon, claim.delta) == (0.0, 0.0)


@pytest.mark.parametrize(("change", "key"), [([], "protocol.inputs"), (["protocol.mode='ideal'"], "protocol.mode")])
def test_an_audit_needs_data_inputs_and_real_masks(change: list[str], key: str) -> None:
    base = [item for item in AUDITED if not item.startswith("protocol.inputs")] if not change else AUDITED
    with pytest.raises(ConfigError) as caught:
        Audit(SCENARIO, [*base, *change])
    assert caught.value.key_path == key


def test_with_ratings_inputs_the_sum_is_the_training_data_summed_over_users() -> None:
    scenario = load_scenario(SCENARIO, SMALL)
    result = fedrecsim.run(scenario)
    train, _ = prepare_data(scenario.data, scenario.run.seed)
    expected = np.bincount(train.items, weights=train.values, minlength=train.n_items)
    state = result.outcome.state
    assert result.metrics["participants"] == 6
    assert np.allclose(state["params"].ring.decode(state["sum"]), expected, atol=1e-9)


@pytest.mark.timeout(300)  # 60 small runs: ~5 s of CPU
def test_an_audit_of_the_server_finds_nothing_beyond_the_sum(tmp_path: Path) -> None:
    """The masked input is uniform in the ring whatever the input: the bound is 0, the claim."""
    done = Audit(SCENARIO, AUDITED).run(tmp_path / "a", workers=1)
    assert done.epsilon_lower == 0.0 and done.document["verdict"].startswith("no violation found")


@pytest.mark.timeout(300)  # 60 small runs
def test_an_audit_of_the_server_catches_zero_masks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deliberate break: every PRG output (self and pairwise masks) zero, so y = x and the sum still decodes:
    the target's masked input equals its 'in' row in every 'in' run (held out TPR 1, FPR 0), a violation of 0."""
    monkeypatch.setattr(prg, "expand", lambda seed, length, dtype: np.zeros(length, dtype=dtype))
    done = Audit(SCENARIO, [*AUDITED, "audit.distinguishers=['masked_match']"]).run(tmp_path / "a", workers=1)
    entry = done.document["distinguishers"]["masked_match"]
    assert (entry["tpr"], entry["fpr"]) == (1.0, 0.0)
    assert done.epsilon_lower > 1.0 and done.document["verdict"].startswith("VIOLATION")


@pytest.mark.timeout(300)
def test_fedrecsim_audit_runs_on_secagg(tmp_path: Path) -> None:
    shown = audit_command(SCENARIO, "server:0", SMALL, tmp_path / "out")
    assert "claimed: epsilon = 0, delta = 0" in shown and "masked_match" in shown


@pytest.mark.timeout(300)  # two audits of 40 small runs each
def test_the_study_script_finds_no_violation_and_says_it_is_not_a_proof(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = quick_study("audit_secagg", tmp_path / "out", monkeypatch)
    rows = [line.rsplit(maxsplit=4) for line in lines if line.startswith(("Bonawitz", "SecAgg+"))]
    assert [[float(value) for value in row[1:4]] for row in rows] == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert "no violation found" in lines[-1] and "not a proof" in lines[-1]
