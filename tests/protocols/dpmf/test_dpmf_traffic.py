"""DP-MF's traffic plan (`fedrecsim.protocols.dpmf.traffic`) against the ledgers of real tiny runs.

Where the plan is exact (everyone online, served and answering), each of its flows must be the ledger's
messages and bytes of that kind from that role, round by round. Where it is an expectation -- which K
users S3 serves, who crashes, which users share an item's noise (``sharers = "per_item"``), how many
distinct items the contributions cover -- it is checked against an expectation computed here (by brute
force, Monte Carlo or in closed form from the scenario's numbers) and against the mean of a run's
rounds, each with its tolerance stated where it is used.

The ledger's rows give each round's totals; a test-side spy on `Ledger.record_sent` splits them by kind
and sending role (and the totals are checked to be the rows' own).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import itertools
from collections.abc import Iterator

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data.ratings import Ratings
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.network.wire import encode
from fedrecsim.protocols.dpmf.messages import Aggregate, Contribution, ItemVectors, PresharingRequest, PresharingShare, Roster
from fedrecsim.protocols.dpmf.traffic import _distinct_items, plan
from fedrecsim.protocols.runtime import Flow, PlanContext
from fedrecsim.scenario import parse_scenario
from fedrecsim.testing import plan_context

USER, SERVER_ROLE, TP = Role.USER, Role.SERVER, Role.THIRD_PARTY
DATA = {"source": "synthetic", "users": 20, "items": 30, "ratings": 200}
# 10 of the 20 users have training ratings, several exactly one: the plan counts and sizes only the rated.
SPARSE = {"source": "synthetic", "users": 20, "items": 30, "ratings": 30, "min_per_user": 0}
BASE = {
    "run": {"protocol": "dpmf", "seed": 5, "rounds": 2},
    "data": DATA,
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "protocol": {"scenario": "S2", "d": 3, "epsilon": 1.0, "replay": False},
}
ASK_AGAIN = "every served user asks to be served again right after it contributed"
ONE_ATTEMPT = "S3: one pre-sharing attempt brings all k pieces of every item (no sharer leaves or answers late)"


def _table(data: dict | None = None, rounds: int = 2, seed: int = 5, availability: dict | None = None, **protocol: object) -> dict:
    table = copy.deepcopy(BASE)
    table["run"].update(rounds=rounds, seed=seed)
    if data is not None:
        table["data"] = dict(data)
    if availability is not None:
        table["availability"] = dict(availability)
    table["protocol"].update(protocol)
    return table


@contextlib.contextmanager
def _spying() -> Iterator[dict[tuple[int, str, Role], list[int]]]:
    """Messages and bytes sent per (ledger round, kind, sending role) while the block runs."""
    sent: dict[tuple[int, str, Role], list[int]] = collections.defaultdict(lambda: [0, 0])
    original = Ledger.record_sent

    def record(ledger: Ledger, src: Party, kind: str, nbytes: int) -> None:
        counts = sent[ledger.round, kind, src.role]
        counts[0] += 1
        counts[1] += nbytes
        original(ledger, src, kind, nbytes)

    Ledger.record_sent = record  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        Ledger.record_sent = original  # type: ignore[method-assign]


def _run(table: dict) -> tuple[dict, dict[int, dict[tuple[str, Role], tuple[int, int]]]]:
    """The run's ledger summary, and per round its messages and bytes per (kind, sending role)."""
    with _spying() as sent:
        ledger = fedrecsim.run(table).result["ledger"]
    by_round: dict[int, dict[tuple[str, Role], tuple[int, int]]] = {row["round"]: {} for row in ledger["per_round"]}
    for (round_index, kind, role), (messages, size) in sent.items():
        by_round[round_index][kind, role] = (messages, size)
    for row in ledger["per_round"]:  # the spy saw exactly what the ledger's rows count
        counted = by_round[row["round"]].values()
        assert (sum(m for m, _ in counted), sum(b for _, b in counted)) == (row["msgs"], row["bytes"]), row["round"]
    return ledger, by_round


def _planned(flows: tuple[Flow, ...]) -> dict[tuple[str, Role], tuple[float, float]]:
    """The plan's messages and bytes per (kind, sending role), flows without messages left out."""
    total: dict[tuple[str, Role], list[float]] = {}
    for flow in flows:
        if flow.messages:
            counts = total.setdefault((flow.kind, flow.src), [0.0, 0.0])
            counts[0] += flow.messages
            counts[1] += flow.bytes
    return {key: (messages, size) for key, (messages, size) in total.items()}


def _flow(flows: tuple[Flow, ...], kind: str, src: Role | None = None) -> Flow:
    (found,) = [flow for flow in flows if flow.kind == kind and (src is None or flow.src is src)]
    return found


def _size(body: object, src: Party = SERVER, dst: Party = Party(USER, 0)) -> int:
    return len(encode(src, dst, 0.0, body))


def _words(rows: int, d: int = 3, ring_bits: int = 64) -> np.ndarray:
    return np.zeros((rows, d * ring_bits // 32), dtype=np.uint32)


def _per_round_means(by_round: dict, rounds: int) -> dict[tuple[str, Role], tuple[float, float]]:
    total: dict[tuple[str, Role], list[float]] = {}
    for round_index in range(1, rounds + 1):
        for key, (messages, size) in by_round[round_index].items():
            counts = total.setdefault(key, [0.0, 0.0])
            counts[0] += messages / rounds
            counts[1] += size / rounds
    return {key: (messages, size) for key, (messages, size) in total.items()}


# --------------------------------------------------------------------------- the plan alone


def test_distinct_items_is_the_exact_expectation_over_every_choice_of_users() -> None:
    """By brute force over every set of ``chosen`` of 5 users (item 5 has no rater)."""
    rated = [[0, 1], [1, 2], [2], [0, 3], [4]]
    item_counts = np.bincount(np.concatenate(rated), minlength=6)
    for chosen in (1, 2, 3, 4, 5, 7):
        subsets = list(itertools.combinations(range(5), min(chosen, 5)))
        brute = sum(len(set().union(*(rated[user] for user in subset))) for subset in subsets) / len(subsets)
        assert _distinct_items(item_counts, 5, chosen) == pytest.approx(brute, abs=1e-9), chosen


def test_common_sharers_pre_share_every_item_through_k_users() -> None:
    """The paper's one set of k = 4 sharers: each asked about all 30 items, one roster and one aggregate."""
    traffic = plan(plan_context(_table(scenario="S3", k_presharing=4)))
    request, share = _flow(traffic.setup, "dpmf.presharing_request"), _flow(traffic.setup, "dpmf.presharing_share")
    items = np.arange(30, dtype=np.int32)
    assert (request.messages, request.exact) == (4, True)
    assert request.bytes == 4 * _size(PresharingRequest(1, items, np.zeros((30, 3)), np.ones(30, dtype=np.int32), _words(30)))
    assert (share.messages, share.bytes) == (4, 4 * _size(PresharingShare(1, items, _words(30)), Party(USER, 0), THIRD_PARTY))
    roster = [flow for flow in traffic.setup if flow.kind == "dpmf.roster"]
    sharers = tuple(Party(USER, i) for i in range(4))
    assert [(flow.messages, flow.bytes) for flow in roster] == [(1, _size(Roster(0, sharers, 0.0, 1), SERVER, THIRD_PARTY))]


def test_sizes_are_those_of_an_iteration_in_the_middle_of_the_run() -> None:
    """Iteration numbers travel in the vectors, contributions, rosters and aggregates: 150 (the middle
    of 300) takes msgpack one byte more than 1 does (uint8 against a positive fixint). Requests carry none."""
    for protocol in ({}, {"variant": "naive"}, {"scenario": "S3", "k_presharing": 4}):
        short, long = (plan(plan_context(_table(rounds=rounds, **protocol))) for rounds in (3, 300))
        assert long.setup == short.setup
        for before, after in zip(short.per_round, long.per_round, strict=True):
            carries_round = before.kind not in ("dpmf.item_request", "core.join", "core.leave")
            assert (after.kind, after.messages) == (before.kind, before.messages)
            assert after.bytes - before.bytes == (before.messages if carries_round else 0), before.kind


_DIRECTIONS = {
    "S1": ({("core.join", USER, SERVER_ROLE), ("dpmf.ratings", USER, SERVER_ROLE)},
           {("core.join", USER, SERVER_ROLE), ("core.leave", USER, SERVER_ROLE), ("dpmf.ratings", USER, SERVER_ROLE)}),
    "S2": ({("core.join", USER, SERVER_ROLE), ("dpmf.item_request", USER, SERVER_ROLE), ("dpmf.noise_setup", SERVER_ROLE, USER)},
           {("core.join", USER, SERVER_ROLE), ("core.leave", USER, SERVER_ROLE), ("dpmf.item_request", USER, SERVER_ROLE),
            ("dpmf.item_vectors", SERVER_ROLE, USER), ("dpmf.contribution", USER, TP), ("dpmf.roster", SERVER_ROLE, TP),
            ("dpmf.aggregate", TP, SERVER_ROLE)}),
    "naive": ({("core.join", USER, SERVER_ROLE), ("dpmf.item_request", USER, SERVER_ROLE), ("dpmf.noise_setup", SERVER_ROLE, USER)},
              {("core.join", USER, SERVER_ROLE), ("core.leave", USER, SERVER_ROLE), ("dpmf.item_request", USER, SERVER_ROLE),
               ("dpmf.item_vectors", SERVER_ROLE, USER), ("dpmf.naive_contribution", USER, SERVER_ROLE)}),
    "S3": ({("core.join", USER, SERVER_ROLE), ("dpmf.item_request", USER, SERVER_ROLE), ("dpmf.roster", SERVER_ROLE, TP),
            ("dpmf.presharing_request", SERVER_ROLE, USER), ("dpmf.presharing_share", USER, TP),
            ("dpmf.presharing_aggregate", TP, SERVER_ROLE)},
           {("core.join", USER, SERVER_ROLE), ("core.leave", USER, SERVER_ROLE), ("dpmf.item_request", USER, SERVER_ROLE),
            ("dpmf.item_vectors", SERVER_ROLE, USER), ("dpmf.contribution", USER, TP), ("dpmf.roster", SERVER_ROLE, TP),
            ("dpmf.aggregate", TP, SERVER_ROLE)}),
}


@pytest.mark.parametrize("variant, protocol", [
    ("S1", {"scenario": "S1"}), ("S2", {}), ("naive", {"variant": "naive"}), ("S3", {"scenario": "S3", "k_presharing": 4}),
])
def test_each_flow_goes_the_way_the_protocol_sends_it(variant: str, protocol: dict) -> None:
    """Users talk to the recommender, except that contributions and pre-sharing shares go to the third
    party; with dropout a crashed user's join again is one more user -> server flow."""
    traffic = plan(plan_context(_table(**protocol), online=15.0, joins=1.0, leaves=1.0, dropout=0.1))
    setup, per_round = _DIRECTIONS[variant]
    assert {(flow.kind, flow.src, flow.dst) for flow in traffic.setup} == setup
    assert {(flow.kind, flow.src, flow.dst) for flow in traffic.per_round} == per_round
    if variant != "S1":
        assert [flow.kind for flow in traffic.per_round].count("core.join") == 2


@pytest.mark.parametrize("protocol, expected, exact, roster", [
    ({}, {}, True, True),
    ({"max_users": 5}, {}, True, True),  # S2 serves every user whatever K says
    ({}, {"online": 19.0}, False, False),  # who is online is luck, and so how many the roster lists
    ({}, {"joins": 1.0}, False, False),  # who joins is luck
    ({}, {"dropout": 0.1}, False, True),  # who crashes is luck; the roster lists them all the same
    ({"scenario": "S3", "max_users": 20}, {}, True, True),  # K covers the 20 raters online
    ({"scenario": "S3", "max_users": 19}, {}, False, True),  # which 19 of them is luck; indices all < 128
    ({"variant": "naive"}, {"online": 19.0}, False, None),  # no third party, no roster
])
def test_the_iteration_is_exact_only_when_every_rater_is_online_and_served(
    protocol: dict, expected: dict, exact: bool, roster: bool | None
) -> None:
    traffic = plan(plan_context(_table(**protocol), **expected))
    iteration = {"dpmf.item_request", "dpmf.item_vectors", "dpmf.contribution", "dpmf.naive_contribution", "dpmf.aggregate"}
    assert {flow.exact for flow in traffic.per_round if flow.kind in iteration} == {exact}
    assert {flow.exact for flow in traffic.per_round if flow.kind == "dpmf.roster"} == ({roster} if roster is not None else set())
    assert all(flow.exact is True for flow in traffic.per_round if flow.kind not in iteration | {"dpmf.roster"})


def test_the_plan_states_what_it_assumes() -> None:
    assert plan(plan_context(_table(scenario="S1"))).assumptions == ("S1: users upload their ratings on every (re)join, nothing else travels",)
    assert plan(plan_context(_table())).assumptions == (ASK_AGAIN,)
    assert plan(plan_context(_table(variant="naive"))).assumptions == (ASK_AGAIN,)
    assert plan(plan_context(_table(scenario="S3"))).assumptions == (ASK_AGAIN, ONE_ATTEMPT)


def test_joins_leaves_and_the_initial_users_count_only_the_users_with_ratings() -> None:
    """SPARSE: 10 of the 20 users have ratings, so half of those who join or are online ask to be served."""
    context = plan_context(_table(SPARSE), initial_online=12.0, online=16.0, joins=2.0, leaves=1.0)
    traffic = plan(context)
    assert [(flow.kind, flow.messages) for flow in traffic.setup] == [("core.join", 12), ("dpmf.item_request", 6), ("dpmf.noise_setup", 6)]
    counts = {(flow.kind, flow.src): flow.messages for flow in traffic.per_round}
    # 8 of the 16 online are served; they ask again after contributing, and the 1 rater among 2 joiners asks.
    assert counts == {
        ("core.join", USER): 2, ("core.leave", USER): 1, ("dpmf.item_request", USER): 9, ("dpmf.item_vectors", SERVER_ROLE): 8,
        ("dpmf.contribution", USER): 8, ("dpmf.roster", SERVER_ROLE): 1, ("dpmf.aggregate", TP): 1,
    }
    trusted = plan(plan_context(_table(SPARSE, scenario="S1"), initial_online=12.0, online=16.0, joins=2.0, leaves=1.0))
    assert [(flow.kind, flow.messages) for flow in trusted.setup] == [("core.join", 12), ("dpmf.ratings", 6)]
    assert [(flow.kind, flow.messages) for flow in trusted.per_round] == [("core.join", 2), ("core.leave", 1), ("dpmf.ratings", 1)]


def test_a_plan_without_users_or_ratings_sends_nothing_to_or_from_users() -> None:
    """No rated user, so nobody asks, uploads or is served -- even if the availability guessed some online."""
    for n_users in (0, 4):
        empty = Ratings(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), n_users, 30, (1.0, 5.0))
        for protocol in ({}, {"scenario": "S1"}, {"variant": "naive"}):
            context = PlanContext(parse_scenario(_table(**protocol)), empty, empty, 3.0, 3.0, 1.0, 1.0, 0.0)
            traffic = plan(context)
            assert traffic.parties[USER] == n_users
            for flow in traffic.setup + traffic.per_round:
                if flow.kind not in ("core.join", "core.leave") and USER in (flow.src, flow.dst):
                    assert (flow.messages, flow.bytes) == (0, 0), flow.kind


def test_with_nobody_online_at_the_start_nothing_is_pre_shared() -> None:
    traffic = plan(plan_context(_table(scenario="S3"), initial_online=0.0))
    assert [flow.kind for flow in traffic.setup] == ["core.join", "dpmf.item_request"]
    assert all(flow.messages == 0 for flow in traffic.setup)


# --------------------------------------------------------------------------- exact plans

# The set-up flows whose count and sizes depend on who is online when the population opens: an expectation.
_SETUP_EXPECTED = {"dpmf.item_request", "dpmf.noise_setup", "dpmf.ratings"}


@pytest.mark.parametrize("table, parties", [
    (_table(max_users=5), {USER: 20, SERVER_ROLE: 1, TP: 1}),  # S2 serves everyone, whatever K says
    (_table(SPARSE, mask_transport="seeded", ring_bits=32), {USER: 20, SERVER_ROLE: 1, TP: 1}),
    (_table(variant="naive"), {USER: 20, SERVER_ROLE: 1}),
    (_table(SPARSE, variant="naive", mask_transport="seeded", ring_bits=32), {USER: 20, SERVER_ROLE: 1}),
    (_table(scenario="S3", k_presharing=4, max_users=20), {USER: 20, SERVER_ROLE: 1, TP: 1}),  # K = the raters online
    (_table(SPARSE, scenario="S3", k_presharing=1, mask_transport="seeded", normalize=False), {USER: 20, SERVER_ROLE: 1, TP: 1}),
    (_table({**DATA, "users": 1, "ratings": 10}, scenario="S3"), {USER: 1, SERVER_ROLE: 1, TP: 1}),  # k = 10 > 1 user online
    (_table({**DATA, "users": 130, "ratings": 1300}, rounds=1), {USER: 130, SERVER_ROLE: 1, TP: 1}),  # indices over 127
    (_table({**SPARSE, "users": 130, "ratings": 200}, rounds=1), {USER: 130, SERVER_ROLE: 1, TP: 1}),
    (_table({**DATA, "users": 130, "ratings": 1300}, rounds=1, scenario="S3", k_presharing=130, max_users=130),
     {USER: 130, SERVER_ROLE: 1, TP: 1}),  # every user shares every item
    (_table({**DATA, "users": 130, "ratings": 1300}, rounds=1, scenario="S3", k_presharing=130, max_users=130,
            sharers="per_item"), {USER: 130, SERVER_ROLE: 1, TP: 1}),
    (_table(scenario="S1"), {USER: 20, SERVER_ROLE: 1}),
    (_table(SPARSE, scenario="S1"), {USER: 20, SERVER_ROLE: 1}),
], ids=[
    "s2-explicit-64bit", "s2-seeded-32bit-users-without-ratings", "s2-naive", "s2-naive-seeded-32bit-users-without-ratings",
    "s3-common-K-equals-raters-online", "s3-one-sharer-seeded-unnormalized-users-without-ratings", "s3-one-user",
    "s2-130-users", "s2-130-users-some-without-ratings", "s3-130-users-all-sharing", "s3-130-users-all-sharing-per-item",
    "s1", "s1-users-without-ratings",
])
def test_with_everyone_online_and_served_each_flow_is_the_ledgers_byte_for_byte(table: dict, parties: dict) -> None:
    traffic = plan(plan_context(table))
    ledger, by_round = _run(table)
    assert traffic.parties == parties
    assert traffic.parties == {Role(role): counters["parties"] for role, counters in ledger["roles"].items()}
    assert sorted(by_round) == list(range(table["run"]["rounds"] + 1))
    for round_index, sent in by_round.items():
        flows = traffic.setup if round_index == 0 else traffic.per_round
        assert _planned(flows) == sent, round_index
    # S1's per-round uploads follow who (re)joins: an expectation, even when nobody does.
    assert all(flow.exact is (flow.kind != "dpmf.ratings") for flow in traffic.per_round)
    assert all(flow.exact is (flow.kind not in _SETUP_EXPECTED) for flow in traffic.setup)


_LISTS_AND_SHARERS = ("dpmf.roster", "dpmf.presharing_request", "dpmf.presharing_share", "dpmf.presharing_aggregate")


@pytest.mark.parametrize("users, sharers, presharing, roster", [
    (100, "common", True, True),  # 4 of 100 users: every index one byte on the wire, whichever 4
    (130, "common", False, False),  # 2 of the 130 indices take two bytes: which 4 users is luck
    (20, "per_item", False, True),  # 4 per item: how many users share, and how many rows each, is luck
])
def test_s3_lists_and_sharers_are_exact_only_when_which_users_cannot_change_their_size(
    users: int, sharers: str, presharing: bool, roster: bool
) -> None:
    """K = 4 served and k = 4 pre-sharers, one round: the pre-sharing roster, requests, shares and
    aggregate, and the iteration's roster. Where they are expectations over 130 users, the run's bytes
    are within one byte per listed or addressed user of the plan (an index over 127 takes one byte more,
    and none here is over 255)."""
    table = _table({**DATA, "users": users, "ratings": 10 * users}, rounds=1, scenario="S3", k_presharing=4,
                   max_users=4, sharers=sharers)
    traffic = plan(plan_context(table))
    assert {flow.exact for flow in traffic.setup if flow.kind in _LISTS_AND_SHARERS} == {presharing}
    assert _flow(traffic.per_round, "dpmf.roster").exact is roster
    if users > 128:
        _, by_round = _run(table)
        for round_index, planned_flows in ((0, traffic.setup), (1, traffic.per_round)):
            planned = _planned(planned_flows)
            for (kind, role), (messages, size) in by_round[round_index].items():
                if kind in _LISTS_AND_SHARERS:
                    assert planned[kind, role][0] == messages
                    assert abs(planned[kind, role][1] - size) <= 4 * messages, (kind, round_index)


def test_k_common_sharers_as_many_as_the_users_expected_online_are_k_sharers_for_sure() -> None:
    """19 of the 20 users expected online at the set-up and k = 19: the 19 sharers are certain in number,
    and all their indices are one byte long, so the pre-sharing roster and aggregate are exact."""
    table = _table(scenario="S3", k_presharing=19, max_users=20)
    setup = plan(plan_context(table, initial_online=19.0)).setup
    assert _flow(setup, "dpmf.roster").exact is True and _flow(setup, "dpmf.presharing_aggregate").exact is True


def test_crashed_users_joins_are_sized_as_the_served_raters() -> None:
    """130 users, 22 of them with training ratings (one past index 127): the crashed users who join again are among the
    raters the recommender serves, so their joins are sized at the mean over the raters' indices."""
    table = _table({**SPARSE, "users": 130, "ratings": 30}, rounds=1)
    context = plan_context(table, dropout=0.5)
    rated = np.flatnonzero(context.train.user_counts() > 0)
    assert np.any(rated > 127) and rated.size < 130
    joins = [flow for flow in plan(context).per_round if flow.kind == "core.join"]
    size = np.mean([_size(_join(), Party(USER, int(user)), SERVER) for user in rated])
    assert joins[1].messages == pytest.approx(rated.size * 0.5)
    assert joins[1].bytes == pytest.approx(rated.size * 0.5 * size)


def test_an_item_vectors_message_carries_each_rated_items_rows() -> None:
    """S2, everyone online: per rated item a row of v_j and one of masks (d = 3 elements of the 64-bit
    ring, two 32-bit words each) and its rater count -- or, seeded, one 16-byte key instead of the masks."""
    train = plan_context(_table()).train
    assert len(train) == 180  # 200 ratings, 10% held out for testing
    for transport in ("explicit", "seeded"):
        flow = _flow(plan(plan_context(_table(mask_transport=transport))).per_round, "dpmf.item_vectors")
        masks = transport == "explicit"
        exact = sum(
            _size(ItemVectors.of(1, _words(n), np.ones(n, dtype=np.int32), masks=_words(n) if masks else None,
                              mask_seed=None if masks else bytes(16)), SERVER, Party(USER, user))
            for user, n in enumerate(train.user_counts().tolist())
        )
        assert (flow.messages, flow.bytes) == (20, exact), transport


# --------------------------------------------------------------------------- expectations against runs


def test_s3_serves_k_of_the_online_raters_and_the_plan_is_the_mean_of_their_traffic() -> None:
    """K = 5 of 20 users, 12 iterations: every count is exactly K (or one roster and one aggregate) in
    every round; sizes are the mean over the users with ratings, so the ledger's mean message size over
    the 60 served users is within 2% of it (per-user sizes differ by up to ~40% around the mean; the
    standard error of a 60-draw mean is under 1%). The aggregate covers E[distinct items of 5 users'
    ratings]: Monte Carlo here agrees with `_distinct_items` within 0.1 items (4000 draws, standard
    error ~0.03), and the ledger's mean aggregate is within 1.5 items' bytes of the plan (rounding to
    whole items: 0.5; the 12-round mean's standard error: ~0.3 items)."""
    rounds, k = 12, 5
    table = _table(rounds=rounds, scenario="S3", k_presharing=4, max_users=k)
    context = plan_context(table)
    traffic = plan(context)
    _, by_round = _run(table)
    for round_index in range(1, rounds + 1):
        sent = by_round[round_index]
        for kind, role in (("dpmf.item_request", USER), ("dpmf.item_vectors", SERVER_ROLE), ("dpmf.contribution", USER)):
            assert sent[kind, role][0] == k == _flow(traffic.per_round, kind).messages
        assert sent["dpmf.roster", SERVER_ROLE] == (1, _flow(traffic.per_round, "dpmf.roster").bytes)
    means = _per_round_means(by_round, rounds)
    for kind, role in (("dpmf.item_request", USER), ("dpmf.item_vectors", SERVER_ROLE), ("dpmf.contribution", USER)):
        flow = _flow(traffic.per_round, kind)
        assert flow.exact is False
        assert flow.bytes / flow.messages == pytest.approx(means[kind, role][1] / means[kind, role][0], rel=0.02), kind
    # Distinct items among 5 of the 20 raters.
    train = context.train
    items_of = [set(train.items[train.users == user].tolist()) for user in range(train.n_users)]
    rng = np.random.default_rng(0)
    draws = [len(set().union(*(items_of[u] for u in rng.choice(20, size=k, replace=False)))) for _ in range(4000)]
    expected_items = float(np.mean(draws))
    assert _distinct_items(train.item_counts(), 20, k) == pytest.approx(expected_items, abs=0.1)
    aggregate = _flow(traffic.per_round, "dpmf.aggregate")
    per_item = 4 + 3 * 8  # an int32 item and d = 3 elements of the 64-bit ring
    expected_size = _size(Aggregate(6, np.arange(round(expected_items), dtype=np.int32), _words(round(expected_items)),
                                    tuple(Party(USER, i) for i in range(k))), Party(TP, 0), SERVER)
    assert (aggregate.messages, aggregate.bytes, aggregate.exact) == (1, expected_size, False)
    assert abs(aggregate.bytes - means["dpmf.aggregate", TP][1]) < 1.5 * per_item


def test_crashed_users_contributions_are_missing_and_they_join_and_ask_again() -> None:
    """S2, dropout 0.2, 12 iterations: each round all 20 users are served and ask again (a crashed user
    after its join again), and contributions plus joins again are the 20 served, exactly. The plan's
    16 and 4 are Binomial(20, 0.2) expectations; the 12-round mean's standard error is 0.52, so the
    ledger's mean is within 2 of them. The aggregate covers the distinct items of 16 of the 20 users:
    within 1.5 items' bytes of the ledger's mean (rounding and sampling, as for K above)."""
    rounds = 12
    table = _table(rounds=rounds, availability={"model": "always", "dropout": 0.2})
    traffic = plan(plan_context(table, dropout=0.2))
    _, by_round = _run(table)
    for round_index in range(1, rounds + 1):
        sent = by_round[round_index]
        crashed = sent.get(("core.join", USER), (0, 0))[0]
        assert sent["dpmf.item_vectors", SERVER_ROLE][0] == sent["dpmf.item_request", USER][0] == 20
        assert sent["dpmf.contribution", USER][0] + crashed == 20
    joins = [flow for flow in traffic.per_round if flow.kind == "core.join"]
    assert [flow.messages for flow in joins] == [0, pytest.approx(4.0)]
    assert joins[1].bytes == 4.0 * _size(_join(), Party(USER, 0), SERVER)
    assert _flow(traffic.per_round, "dpmf.item_request").messages == _flow(traffic.per_round, "dpmf.item_vectors").messages == 20
    contribution = _flow(traffic.per_round, "dpmf.contribution")
    assert contribution.messages == pytest.approx(16.0) and contribution.exact is False
    means = _per_round_means(by_round, rounds)
    assert abs(means["dpmf.contribution", USER][0] - 16.0) < 2.0
    assert abs(means["core.join", USER][0] - 4.0) < 2.0
    size = sum(_size(Contribution(1, np.arange(n, dtype=np.int32), _words(n)), Party(USER, u), THIRD_PARTY)
               for u, n in enumerate(plan_context(table).train.user_counts())) / 20
    assert contribution.bytes == pytest.approx(16.0 * size)
    aggregate = _flow(traffic.per_round, "dpmf.aggregate")
    assert aggregate.exact is False
    assert abs(aggregate.bytes - means["dpmf.aggregate", TP][1]) < 1.5 * (4 + 3 * 8)


def _join() -> object:
    from fedrecsim.actors.membership import Join

    return Join()


def _expected_sharers(online: int, k: int, items: int, trials: int = 4000) -> float:
    """Monte Carlo: k distinct of ``online`` users drawn per item; how many users are drawn at least once."""
    rng = np.random.default_rng(1)
    picked = np.argsort(rng.random((trials, items, online)), axis=2)[:, :, :k]
    drawn = np.zeros((trials, online), dtype=bool)
    np.put_along_axis(drawn, picked.reshape(trials, -1), True, axis=1)
    return float(drawn.sum(axis=1).mean())


@pytest.mark.parametrize("data, k, seeds", [
    ({"source": "synthetic", "users": 60, "items": 5, "ratings": 150}, 3, (0, 1, 2)),  # ~13.6 sharers of 1.1 items each
    (DATA, 4, (5,)),  # nearly every one of the 20 users shares 6 of the 30 items
], ids=["few-sharers", "almost-everyone"])
def test_per_item_sharers_are_the_expected_users_drawn_at_least_once(data: dict, k: int, seeds: tuple[int, ...]) -> None:
    """``sharers = "per_item"``: k of the online users per item, so E[sharers] = the users drawn at least
    once (Monte Carlo here, 4000 trials: standard error < 0.04, so within 0.15), each with the n_items * k rows spread
    over them. The ledger's mean over the seeds' runs is within 1.5 sharers of it, and its mean request
    and share are within half a row of the plan's (which rounds to whole rows)."""
    tables = [_table(data, rounds=1, seed=seed, scenario="S3", k_presharing=k, sharers="per_item") for seed in seeds]
    context = plan_context(tables[0])
    n_users, n_items = context.train.n_users, context.train.n_items
    traffic = plan(context)
    expected = _expected_sharers(n_users, k, n_items)
    request, share = _flow(traffic.setup, "dpmf.presharing_request"), _flow(traffic.setup, "dpmf.presharing_share")
    assert request.messages == share.messages == pytest.approx(expected, abs=0.15)
    assert request.exact is False and share.exact is False
    sent = {key: [0.0, 0.0] for key in (("dpmf.presharing_request", SERVER_ROLE), ("dpmf.presharing_share", USER))}
    for table in tables:
        _, by_round = _run(table)
        for key, counts in sent.items():
            counts[0] += by_round[0][key][0] / len(seeds)
            counts[1] += by_round[0][key][1] / len(seeds)
    d = 3
    row = {"dpmf.presharing_request": 4 + 8 * d + 4 + 8 * d, "dpmf.presharing_share": 4 + 8 * d}
    for flow, src in ((request, SERVER_ROLE), (share, USER)):
        messages, size = sent[flow.kind, src]
        assert abs(messages - expected) < 1.5
        assert abs(flow.bytes / flow.messages - size / messages) < row[flow.kind] / 2, flow.kind
    rows = round(n_items * k / expected)
    assert request.bytes == pytest.approx(request.messages * _size(
        PresharingRequest(1, np.arange(rows, dtype=np.int32), np.zeros((rows, d)), np.ones(rows, dtype=np.int32), _words(rows))))
    assert share.bytes == pytest.approx(share.messages * _size(
        PresharingShare(1, np.arange(rows, dtype=np.int32), _words(rows)), Party(USER, 0), THIRD_PARTY))


