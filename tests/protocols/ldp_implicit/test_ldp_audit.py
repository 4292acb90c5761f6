"""Auditing Minto et al.'s per-report eps0 (`ldp_implicit.audit`): the declaration, the proxy's
log-likelihood-ratio distinguisher against the paper's formula, and an audit that catches a broken mechanism."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import fedrecsim.protocols.ldp_implicit.roles as roles
from audit_helpers import quick_study
from fedrecsim.audit import Audit, Row, Target, TrialView
from fedrecsim.data.ratings import Ratings
from fedrecsim.models.implicit_mf import item_gradient, user_factors
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Envelope
from fedrecsim.protocols import protocol_spec
from fedrecsim.protocols.ldp_implicit.audit import report_llr
from fedrecsim.protocols.ldp_implicit.messages import Model, Reports
from fedrecsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "minto_ldp.toml"
SMALL = [
    "run.rounds=1", "data.users=6", "data.items=20", "data.ratings=36", "protocol.min_users=6", "protocol.k=1",
    "protocol.d=2", "protocol.epsilon=1.0", "protocol.init_scale=0.005", "network.latency={model='constant', seconds=0.01}",
    "audit.party='proxy:0'", "audit.chunk=150", "audit.trials=150", "audit.distinguishers=['report_llr']",
]


def test_the_claim_is_k_times_rounds_times_eps0_for_one_users_row() -> None:
    declaration = protocol_spec("ldp_implicit").audit
    assert declaration.neighbouring.kind == "replace" and declaration.neighbouring.unit == "report"
    scenario = load_scenario(SCENARIO, ["protocol.k=3", "run.rounds=2", "protocol.epsilon=0.5"])
    claim = declaration.claim(scenario)
    assert (claim.epsilon, claim.delta) == (3.0, 0.0)
    assert claim.statement.endswith("k = 3 reports per epoch over 2 epochs compose to 3")
    one_epoch = declaration.claim(load_scenario(SCENARIO, ["protocol.k=3", "run.rounds=1", "protocol.epsilon=0.5"]))
    assert one_epoch.statement.endswith("k = 3 reports per epoch over 1 epoch compose to 1.5")


def paper_probability(g: float, eps: float) -> float:
    """Algorithm 1, line 5: P[beta = +1] = (g (e^eps - 1) + e^eps + 1) / (2 e^eps + 2), g clipped to [-1, 1]."""
    g = min(1.0, max(-1.0, g))
    return (g * (math.exp(eps) - 1) + math.exp(eps) + 1) / (2 * math.exp(eps) + 2)


def test_the_proxys_score_is_the_log_likelihood_ratio_of_algorithm_1() -> None:
    rng = np.random.default_rng(0)
    V = 0.05 * rng.standard_normal((6, 2))
    present, absent = Row((1, 4), (1.0, 1.0)), Row((2,), (1.0,))
    scenario = load_scenario(SCENARIO, ["protocol.d=2", "protocol.epsilon=0.7"])
    indices, signs = np.array([3, 8, 9]), np.array([1, -1, 1])
    user = Party(Role.USER, 2)
    proxy = Party(Role.PROXY, 0)
    envelopes = (
        Envelope(Model.KIND, SERVER, proxy, 0.0, Model(1, V)),
        Envelope(Reports.KIND, user, proxy, 1.0, Reports.pack(1, indices, signs)),
        Envelope(Reports.KIND, Party(Role.USER, 3), proxy, 1.0, Reports.pack(1, np.array([0]), np.array([1]))),
    )
    empty = Ratings(np.zeros(0, int), np.zeros(0, int), np.zeros(0), 6, 6, (0.0, 1.0))
    view = TrialView(proxy, envelopes, Target(2, present, absent), empty, scenario)
    expected = 0.0
    for index, sign in zip(indices, signs):
        item, factor = divmod(int(index), 2)
        terms = []
        for row in (present, absent):
            items, conf = np.array(row.items), 1.0 + np.array(row.values)  # c = 1 + alpha r, alpha = 1
            gradient = item_gradient(V, user_factors(V, items, conf, scenario.protocol.lam), items, conf)
            p = paper_probability(gradient[item, factor], 0.7)
            terms.append(math.log(p if sign > 0 else 1 - p))
        expected += terms[0] - terms[1]
    assert report_llr(view)[0] == pytest.approx(expected, rel=1e-9)


@pytest.mark.timeout(300)  # 300 small runs: ~8 s of CPU
def test_an_audit_of_the_proxy_finds_no_more_than_the_claimed_eps0(tmp_path: Path) -> None:
    """eps0 = 1 claimed and used: the lower bound stays at most 1 (measured: 0.14 at 150 trials per world)."""
    honest = Audit(SCENARIO, SMALL).run(tmp_path / "honest", workers=1)
    assert honest.document["claim"]["epsilon"] == 1.0
    assert honest.epsilon_lower <= 1.0


@pytest.mark.timeout(300)  # 300 small runs: ~8 s of CPU
def test_an_audit_of_the_proxy_catches_a_mechanism_noisier_than_claimed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """eps0 = 1 claimed, but the users' reports made at 5 eps0 (the deliberate break: Algorithm 1's flip
    probability 0.27 -> 0.0067): the lower bound exceeds the claim (measured: 1.56 at 150 trials per world)."""
    real = roles.ldp_reports_lazy
    monkeypatch.setattr(
        roles, "ldp_reports_lazy", lambda rng, entries, u, m, f, eps, k: real(rng, entries, u, m, f, 5 * eps, k)
    )
    broken = Audit(SCENARIO, SMALL).run(tmp_path / "broken", workers=1)
    assert broken.epsilon_lower > 1.0
    assert broken.document["verdict"].startswith("VIOLATION")


def test_the_proxys_distinguisher_is_refused_for_the_server() -> None:
    from fedrecsim.errors import ConfigError

    with pytest.raises(ConfigError, match="applies to the roles proxy, not to server:0"):
        Audit(SCENARIO, [*SMALL, "audit.party='server:0'"])


@pytest.mark.timeout(300)  # four small audits of 40 runs each
def test_the_study_script_audits_each_eps0_and_says_what_the_bound_means(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shown = quick_study("audit_minto", tmp_path / "out", monkeypatch)
    rows = [line.split() for line in shown if line[:1].isdigit()]
    assert [row[0] for row in rows] == ["0.5", "2"]
    assert all(float(row[1]) <= float(row[0]) for row in rows)  # the mean lower bound never above the claim here
    assert "no violation found" in shown[-1] and "not a proof" in shown[-1]
    assert sorted(path.name for path in (tmp_path / "out").glob("eps*")) == ["eps0.5-seed0", "eps2-seed0"]
