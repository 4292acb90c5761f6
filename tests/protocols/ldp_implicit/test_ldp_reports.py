"""What a run of ldp_implicit builds, measures and reports, pinned down piece by piece: the checks of its
configuration (exact error and message, and the boundary that passes), the users, server and proxies it
wires (each with its own generator of the run's seed), when it measures hit rates, its final metrics with
and without a test set, its progress calls, what its checkpoints name, and the MF-NP baseline it trains.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.data.ratings import Ratings
from fedrecsim.errors import ConfigError
from fedrecsim.models.implicit_mf import ImplicitHyper, confidence
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.ldp_implicit.messages import ReportBatch, Reports
from fedrecsim.protocols.ldp_implicit.pool import ReportPool
from fedrecsim.protocols.ldp_implicit.protocol import LDPImplicitConfig, _check, _negatives, _users
from fedrecsim.protocols.ldp_implicit.roles import LDPUser, SentReports
from fedrecsim.protocols.ldp_implicit.training import exact_mean_gradient, mf_np_trajectory
from fedrecsim.protocols.runtime import RunContext
from fedrecsim.seeding import Stream, generator
from fedrecsim.testing import checkpoint_world, every_checkpoint

SMALL: dict[str, Any] = {
    "run": {"protocol": "ldp_implicit", "name": "small-ldp", "seed": 11, "rounds": 3},
    "data": {"source": "synthetic", "feedback": "implicit", "users": 30, "items": 120, "ratings": 300,
             "split": "leave_one_out"},
    "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}},
    "availability": {"model": "always"},
    "protocol": {"k": 6, "min_users": 30, "steps_per_epoch": 2},
}
HIT_RATES = ("hr@2", "hr@5", "hr@10")


def _small(**protocol: Any) -> dict[str, Any]:
    tables = copy.deepcopy(SMALL)
    tables["protocol"].update(protocol)
    return tables


class _Context:
    """The parts of `RunContext` the checks and `_users` read, with the real seed derivation (`RunContext.rng`)."""

    rng = RunContext.rng

    def __init__(self, train: Ratings, test: Ratings | None = None, *, seed: int = 7, timeout_s: float = 60.0) -> None:
        self.train = train
        self.test = test
        self.scenario = SimpleNamespace(run=SimpleNamespace(seed=seed, round_timeout_s=timeout_s))
        self.network = Network(Links(0, LinkSpec(Constant(0.01))), Ledger())

    @property
    def seed(self) -> int:
        return self.scenario.run.seed


def _ratings(n_users: int, n_items: int, entries: list[tuple[int, int, float]]) -> Ratings:
    users, items, values = (np.array(column) for column in zip(*entries)) if entries else ([], [], [])
    return Ratings(np.asarray(users, dtype=np.int64), np.asarray(items, dtype=np.int64),
                   np.asarray(values, dtype=np.float64), n_users, n_items, (0.0, 5.0))


# ---------------------------------------------------------------- the configuration checks


def test_report_indices_must_fit_int32_and_the_largest_that_fits_passes() -> None:
    # 2**31 entries of V: the first flat index int32 cannot hold is 2**31 itself.
    with pytest.raises(ConfigError) as caught:
        _check(_Context(_ratings(1, 128, [])), LDPImplicitConfig(d=2**24))
    assert (caught.value.key_path, str(caught.value)) == (
        "protocol.d", "protocol.d: reports index the 128 x 16777216 gradient entries with int32; that is too many",
    )
    # Many items, few factors: the count is items x factors, not a ratio.
    with pytest.raises(ConfigError, match=r"^protocol\.d: reports index the 2147483648 x 1 gradient entries"):
        _check(_Context(_ratings(1, 2**31, [])), LDPImplicitConfig(d=1))
    assert _check(_Context(_ratings(1, 1, [])), LDPImplicitConfig(d=2**31 - 1)) is None
    assert _check(_Context(_ratings(1, 2**31 - 1, [])), LDPImplicitConfig(d=1)) is None


def test_a_pool_must_give_up_before_the_server_does_and_a_shorter_wait_passes() -> None:
    with pytest.raises(ConfigError) as caught:
        _check(_Context(_ratings(1, 10, []), timeout_s=30.0), LDPImplicitConfig(proxy_wait_s=30.0))
    assert (caught.value.key_path, str(caught.value)) == (
        "protocol.proxy_wait_s",
        "protocol.proxy_wait_s: must be shorter than run.round_timeout_s = 30.0 (the server's deadline for an "
        "epoch's reports), got 30.0",
    )
    assert _check(_Context(_ratings(1, 10, []), timeout_s=30.0), LDPImplicitConfig(proxy_wait_s=29.999)) is None


def _negatives_context(touched_by_test_user: int, n_items: int = 11) -> _Context:
    """User 0, a test user, touched ``touched_by_test_user`` of the items, the last of them held out; user 1
    touched every item but is not a test user."""
    train = _ratings(2, n_items, [(0, item, 1.0) for item in range(touched_by_test_user - 1)]
                     + [(1, item, 1.0) for item in range(n_items)])
    test = _ratings(2, n_items, [(0, n_items - 1, 1.0)])
    return _Context(train, test)


def test_hr_at_10_needs_nine_untouched_items_per_test_user_and_nine_suffice() -> None:
    # 2 of 11 items touched (one in training, one held out): 9 left, exactly what HR@10 needs.
    assert _negatives(_negatives_context(2), LDPImplicitConfig()) == 9
    # Otherwise the configured number, or as many as every test user has untouched.
    assert _negatives(_negatives_context(2, n_items=40), LDPImplicitConfig(negatives=20)) == 20
    assert _negatives(_negatives_context(2, n_items=12), LDPImplicitConfig()) == 10
    with pytest.raises(ConfigError) as caught:
        _negatives(_negatives_context(3), LDPImplicitConfig())
    assert (caught.value.key_path, str(caught.value)) == (
        "data.items",
        "data.items: HR@10 ranks each held-out item among at least 9 items the user never touched; a test user "
        "here touched all but 8 of 11 items",
    )


def test_fewer_than_nine_negatives_is_refused_as_the_settings_error_and_nine_pass() -> None:
    with pytest.raises(ConfigError) as caught:
        fedrecsim.parse_scenario(_small(negatives=8))
    assert (caught.value.key_path, str(caught.value)) == ("protocol.negatives", "protocol.negatives: must be >= 9, got 8")
    assert fedrecsim.parse_scenario(_small(negatives=9)).protocol.negatives == 9


def test_the_config_hands_its_own_hyper_parameters_to_the_model() -> None:
    config = LDPImplicitConfig(d=3, gamma=0.25, lam=0.125, alpha=4.0)
    assert config.hyper() == ImplicitHyper(d=3, gamma=0.25, lam=0.125, alpha=4.0)


# ---------------------------------------------------------------- the parties the run wires


def test_each_user_holds_its_own_items_and_its_own_generator_of_the_seed() -> None:
    # Entries out of order; user 2 has none. Confidence is 1 + alpha r.
    entries = [(3, 4, 2.0), (0, 5, 1.0), (3, 0, 3.0), (0, 1, 4.0), (1, 2, 5.0)]
    ctx = _Context(_ratings(4, 6, entries), seed=23)
    config = LDPImplicitConfig(d=2, alpha=0.5, epsilon=1.5, k=7)
    proxies = tuple(Party(Role.PROXY, index) for index in range(5))
    users = _users(ctx, config, proxies)
    assert list(users) == [Party(Role.USER, index) for index in range(4)]
    expected_items = {0: ([1, 5], [4.0, 1.0]), 1: ([2], [5.0]), 2: ([], []), 3: ([0, 4], [3.0, 2.0])}
    for index, (items, values) in expected_items.items():
        user = users[Party(Role.USER, index)]
        assert isinstance(user, LDPUser) and user.party == Party(Role.USER, index)
        np.testing.assert_array_equal(user.items, items)
        np.testing.assert_array_equal(user.confidence, confidence(np.array(values, dtype=np.float64), 0.5))
        assert (user.hyper, user.epsilon, user.k, user.proxies) == (config.hyper(), 1.5, 7, proxies)
        assert user.network is ctx.network
        # The home proxy is the first draw of the user's generator: the ACTOR stream, the user role, its index.
        own = generator(23, Stream.ACTOR, Role.USER.code, index)
        assert user.server == proxies[int(own.integers(5))]
        assert user.rng.bit_generator.state == own.bit_generator.state


def test_the_servers_v_starts_from_its_own_generator_of_the_seed_and_ends_as_the_last_epoch_left_it() -> None:
    result = fedrecsim.run(_small(init_scale=0.2, d=4, eval_every=100))
    state = result.outcome.state
    own = generator(11, Stream.ACTOR, Role.SERVER.code, 0)
    np.testing.assert_array_equal(state["initial_item_factors"], 0.2 * own.standard_normal((120, 4)))
    assert len(state["trajectory"]) == 3
    np.testing.assert_array_equal(state["item_factors"], state["trajectory"][-1])
    assert not np.array_equal(state["item_factors"], state["initial_item_factors"])


def test_a_proxy_shuffles_its_pools_with_its_own_generator_of_the_seed() -> None:
    """Replay the proxy: its pools (the reports it received, in delivery order) shuffled by the generator of
    the ACTOR stream, the proxy role and its index, one pool after the other, are the batches the server got."""
    proxy, server = Party(Role.PROXY, 0), Party(Role.SERVER, 0)
    result = fedrecsim.run(_small(batch_size=50), record_views=[proxy, server])
    own = generator(11, Stream.ACTOR, Role.PROXY.code, 0)
    batches = [envelope for envelope in result.views[server] if isinstance(envelope.body, ReportBatch)]
    assert len(batches) == 3 * 4  # 30 users x 6 reports per epoch, in batches of 50
    for epoch in (1, 2, 3):
        pool = ReportPool(epoch, 0.0)
        for envelope in result.views[proxy]:
            if isinstance(envelope.body, Reports) and envelope.body.epoch == epoch:
                pool.add(envelope.src, *envelope.body.unpack())
        received = sorted((b.body for b in batches if b.body.epoch == epoch), key=lambda batch: batch.batch)
        expected = pool.release(own, 50)
        assert len(received) == len(expected) == 4
        for batch, (indices, signs) in zip(received, expected):
            got_indices, got_signs = batch.unpack()
            np.testing.assert_array_equal(got_indices, indices)
            np.testing.assert_array_equal(got_signs, signs)


def test_proxies_refuse_a_users_reports_of_another_count_than_k(monkeypatch) -> None:
    """Users that break the protocol -- user 0 sends one report too many, user 1 one too few -- are refused by
    their proxy (the run tells the proxies k), so the server aggregates only the other users' reports and
    awaits the refused ones as missing."""
    send_reply = LDPUser._send_reply

    def tampered(self: LDPUser) -> None:
        proxy, sent = self.reply  # type: ignore[misc]
        if self.party.index == 0:
            extra = slice(0, 1)
            sent = SentReports(
                sent.epoch, np.append(sent.indices, sent.indices[extra]), np.append(sent.signs, sent.signs[extra])
            )
        elif self.party.index == 1:
            sent = SentReports(sent.epoch, sent.indices[:-1], sent.signs[:-1])
        self.reply = (proxy, sent)
        send_reply(self)

    monkeypatch.setattr(LDPUser, "_send_reply", tampered)
    result = fedrecsim.run(_small(min_users=28, eval_every=100))
    for row in result.rounds:
        assert (row["participants"], row["reports"], row["reports_missing"], row["anonymity_set"]) == (
            30, 28 * 6, 2 * 6, 28,
        )
    faults = result.result["ledger"]["faults"]
    assert faults["rejected"]["invalid"] == 6
    refused = "proxy:0 expected valid ldp.reports from user:{}: 6 reports, received {}"
    assert sorted((r["src"], r["dst"], r["kind"], r["reason"], r["problem"]) for r in faults["rejections"]) == [
        ("user:0", "proxy:0", "ldp.reports", "invalid", refused.format(0, 7))
    ] * 3 + [("user:1", "proxy:0", "ldp.reports", "invalid", refused.format(1, 5))] * 3
    assert [(i["name"], i["checked"], i["violations"]) for i in result.result["invariants"]] == [
        ("server_hears_only_proxies", 3, 0), ("reports_unaltered", 3, 0),
    ]


# ---------------------------------------------------------------- what the run measures and reports


def test_hit_rates_are_measured_every_eval_every_epochs_and_after_the_last() -> None:
    result = fedrecsim.run(_small(eval_every=2))
    measured = [row["round"] for row in result.rounds if set(HIT_RATES) <= set(row)]
    assert measured == [2, 3]
    assert all(not set(HIT_RATES) & set(row) for row in result.rounds if row["round"] == 1)


def test_without_a_test_set_the_run_trains_and_reports_no_hit_rate_nor_baseline() -> None:
    # 40 users with one entry each: leave-one-out holds none of them out.
    tables = {
        "run": {"protocol": "ldp_implicit", "name": "no-test", "seed": 5, "rounds": 2},
        "data": {"source": "synthetic", "feedback": "implicit", "users": 40, "items": 150, "ratings": 40,
                 "split": "leave_one_out", "min_per_user": 1},
        "availability": {"model": "always"},
        "protocol": {"k": 5, "min_users": 40},
    }
    scenario = fedrecsim.parse_scenario(tables)
    assert len(prepare_data(scenario.data, 5)[1]) == 0
    result = fedrecsim.run(tables)
    row = {"participants": 40, "reports": 200, "reports_missing": 0, "reports_late": 0, "silent_proxies": 0,
           "anonymity_set": 40, "reports_held": 0, "reports_dropped": 0}
    assert result.rounds == [{"round": 1, **row}, {"round": 2, **row}]
    assert result.metrics == row
    assert len(result.outcome.state["mf_np_trajectory"]) == 2


def test_the_state_counts_the_populations_joins_leaves_and_crashes() -> None:
    # min_users = 1: every user's reports are a pool of their own, so a report is missing only if its user
    # crashed (the dropout model) after V reached it.
    tables = _small(eval_every=100, min_users=1, proxy_wait_s=1.0)
    tables["run"].update(rounds=4, round_timeout_s=5.0)
    tables["availability"] = {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.5,
                              "dropout": 0.2}
    result = fedrecsim.run(tables)
    ledger = result.result["ledger"]
    initially_online = next(row["online"] for row in ledger["per_round"] if row["round"] == 0)
    population = result.outcome.state["population"]
    assert set(population) == {"joins", "leaves", "crashes"}
    assert 6 * population["crashes"] == sum(row["reports_missing"] for row in result.rounds) > 0
    assert population["leaves"] == ledger["kinds"]["core.leave"]["msgs"] > 0
    # A crashed user rejoins at the round's end; the users online at the start joined before round 1.
    assert initially_online + population["joins"] + population["crashes"] == ledger["kinds"]["core.join"]["msgs"]
    assert population["joins"] > 0


def test_progress_is_told_each_completed_epoch() -> None:
    calls: list[tuple[int, int]] = []
    fedrecsim.run(_small(eval_every=100), progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_a_checkpoint_names_the_server_and_each_proxy(tmp_path) -> None:
    tables = _small(proxies=2, min_users=10, eval_every=100)
    result, written = every_checkpoint(tables, tmp_path / "run")
    assert [saved.round for saved in written] == [1, 2]
    for saved in written:
        objects = checkpoint_world(saved)["objects"]
        assert set(objects) == {"server", "proxy:0", "proxy:1"}
        np.testing.assert_array_equal(
            objects["server"]["item_factors"], result.outcome.state["trajectory"][saved.round - 1]
        )


# ---------------------------------------------------------------- the MF-NP baseline of the final metrics


def test_the_exact_mean_gradient_and_mf_np_compute_in_float64_whatever_v_comes_in() -> None:
    train = _ratings(3, 5, [(0, 0, 1.0), (0, 3, 2.0), (1, 1, 1.0), (2, 4, 3.0), (2, 0, 1.0)])
    hyper = ImplicitHyper(d=2, gamma=0.05, lam=0.3, alpha=1.0)
    V32 = np.random.default_rng(4).normal(scale=0.3, size=(5, 2)).astype(np.float32)
    V64 = V32.astype(np.float64)
    gradient = exact_mean_gradient(V32, train, hyper)
    assert gradient.dtype == np.float64
    np.testing.assert_array_equal(gradient, exact_mean_gradient(V64, train, hyper))
    trajectory = mf_np_trajectory(V32, train, hyper, steps=3, epochs=2)
    assert [V.dtype for V in trajectory] == [np.float64, np.float64]
    for got, expected in zip(trajectory, mf_np_trajectory(V64, train, hyper, steps=3, epochs=2), strict=True):
        np.testing.assert_array_equal(got, expected)


def test_reports_outside_v_are_refused_by_the_proxy_and_the_run_goes_on(monkeypatch) -> None:
    """Users 0 and 1 each send one report indexed past V's last entry (a negative index cannot be encoded):
    their proxy refuses each such message, the server awaits their reports as missing, and the invariant
    check -- which compares the aggregate with what the users sent -- holds instead of failing on them."""
    send_reply = LDPUser._send_reply
    train, _ = prepare_data(fedrecsim.parse_scenario(SMALL).data, SMALL["run"]["seed"])
    entries = train.n_items * LDPImplicitConfig().d  # V's M x F entries: indices lie in [0, entries)

    def tampered(self: LDPUser) -> None:
        proxy, sent = self.reply  # type: ignore[misc]
        if self.party.index in (0, 1):
            indices = sent.indices.copy()
            indices[0] = entries + self.party.index
            sent = SentReports(sent.epoch, indices, sent.signs)
        self.reply = (proxy, sent)
        send_reply(self)

    monkeypatch.setattr(LDPUser, "_send_reply", tampered)
    result = fedrecsim.run(_small(min_users=28, eval_every=100))
    for row in result.rounds:
        assert (row["participants"], row["reports"], row["reports_missing"]) == (30, 28 * 6, 2 * 6)
    rejections = result.result["ledger"]["faults"]["rejections"]
    assert sorted((r["src"], r["dst"], r["kind"]) for r in rejections) == sorted(
        [("user:0", "proxy:0", "ldp.reports"), ("user:1", "proxy:0", "ldp.reports")] * 3
    )
    assert [(i["name"], i["checked"], i["violations"]) for i in result.result["invariants"]] == [
        ("server_hears_only_proxies", 3, 0), ("reports_unaltered", 3, 0),
    ]
