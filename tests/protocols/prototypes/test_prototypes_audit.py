"""Auditing Ribero et al.'s eps per silo (`prototypes.audit`): the declaration, the server's projection
score against a hand computation, an audit of the honest protocol within the claim, and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedrecsim import cli
from fedrecsim.audit import Audit, Row, Target, TrialView
from fedrecsim.data.ratings import Ratings
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Envelope
from fedrecsim.protocols import protocol_spec
from fedrecsim.protocols.prototypes.audit import prototype_projection
from fedrecsim.protocols.prototypes.messages import Prototypes
from fedrecsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "ribero_synthetic.toml"
SMALL = [
    "data.users=40", "data.items=40", "data.ratings=800", "data.rank=2", "data.silos=2", "protocol.k=2",
    "protocol.support=10", "protocol.rank=2", "protocol.baselines=false", "protocol.nmf_iterations=20",
    "audit.party='server:0'", "audit.trials=60", "audit.chunk=60",
]


def test_the_claim_is_eps_per_silo_for_one_users_row() -> None:
    declaration = protocol_spec("prototypes").audit
    assert declaration.neighbouring.kind == "add_remove" and declaration.neighbouring.unit == "user"
    assert declaration.parties == (Role.SERVER,)
    claim = declaration.claim(load_scenario(SCENARIO, ["protocol.epsilon=3"]))
    assert (claim.epsilon, claim.delta) == (3.0, 0.0)


def test_the_servers_score_is_the_largest_projection_onto_the_clipped_row() -> None:
    scenario = load_scenario(SCENARIO, ["protocol.support=2", "protocol.value_bound=4"])
    known = Ratings(np.array([1]), np.array([0]), np.array([1.0]), 2, 4, (0.0, 10.0))
    target = Target(0, Row((0, 1, 3), (9.0, 1.0, 3.0)), Row((), ()))  # kept: items 0 and 3, clipped to 4 and 3
    silo = Party(Role.SILO, 0)
    P = np.array([[1.0, 5.0, 0.0, 2.0], [4.0, 0.0, 0.0, 0.0]])
    view = TrialView(SERVER, (Envelope(Prototypes.KIND, silo, SERVER, 0.0, Prototypes(P)),), target, known, scenario)
    x = np.array([4.0, 0.0, 0.0, 3.0]) / 5.0
    assert prototype_projection(view)[0] == pytest.approx(max(P @ x), rel=1e-12)


@pytest.mark.timeout(300)  # 120 small runs: ~6 s of CPU
def test_an_audit_of_the_server_finds_no_more_than_the_claimed_eps(tmp_path: Path) -> None:
    """eps = 1 claimed and used: the lower bound stays at most 1 at 95% (measured: 0 at 60 trials per world)."""
    honest = Audit(SCENARIO, [*SMALL, "protocol.epsilon=1"]).run(tmp_path / "honest", workers=1)
    assert honest.document["claim"]["epsilon"] == 1.0
    assert honest.epsilon_lower <= 1.0


def test_a_silos_view_is_not_what_the_claim_covers() -> None:
    from fedrecsim.errors import ConfigError

    with pytest.raises(ConfigError, match="claim is about the views of server"):
        Audit(SCENARIO, [*SMALL, "audit.party='silo:0'"])


@pytest.mark.timeout(300)
def test_the_command_audits_prototypes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["audit", str(SCENARIO), "--party", "server:0", "--trials", "4", "--workers", "1", "--out", str(tmp_path / "out"),
                     "--quiet", *[arg for setting in SMALL[:-3] for arg in ("--set", setting)]])
    shown = capsys.readouterr().out
    assert code == 0
    assert "claimed: epsilon = 1, delta = 0" in shown and "prototype_projection" in shown
    assert json.loads((tmp_path / "out" / "audit.json").read_text())["party"] == "server:0"
