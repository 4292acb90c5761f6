"""DP-MF resumed from a checkpoint (`fedrecsim.checkpoint`), and the S2/S3 user's main loop it resumes into.

From each round's end of tiny S1, S2 and S3 runs -- with restarts due (with and without the user's state),
stragglers computing, users offline, an S2 noise set-up still in flight, S3 pre-sharing under way -- the
resumed run ends as the run never interrupted: transcript hash, metrics, ledger, final state. And the
`PrivateUser` loop itself, against what the test computes from what each party received: an item-vectors
copy or an overtaken older round is not answered, a pre-sharing request is answered once and before item
vectors waiting with it, a user drawn to drop out of a round sends nothing for it, a crashed user restarts.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import trio

import fedrecsim
from fedrecsim.checkpoint import Saved
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.models.mf import MFHyper
from fedrecsim.network.availability import MidRoundDropout
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.protocols.dpmf.messages import Contribution, ItemVectors, NoiseSetup, PresharingRequest, PresharingShare
from fedrecsim.protocols.dpmf.noise import PublicCoin
from fedrecsim.protocols.dpmf.public import PublicParameters
from fedrecsim.protocols.dpmf.ringops import to_words
from fedrecsim.protocols.dpmf.user import PrivateUser
from fedrecsim.seeding import Stream, generator
from fedrecsim.testing import assert_same_run, checkpoint_world, every_checkpoint, resume_from

_LOGNORMAL = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}
_CONSTANT = {"model": "constant", "seconds": 0.05}
_STRAGGLERS = {"compute_median_s": 1.0, "compute_sigma": 1.0}
_DPMF = {"d": 3, "epsilon": 1.0}
_SMALL = {"users": 12, "items": 15, "ratings": 120}

RUNS: dict[str, dict[str, Any]] = {
    "S1: churn, a crashed user restarting": {
        "run": {"protocol": "dpmf", "seed": 6, "rounds": 4, "round_timeout_s": 3.0}, "data": _SMALL,
        "network": {"latency": _LOGNORMAL},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2, "initial_online": 0.7},
        "faults": {"crash": [{"party": "user:0", "kind": "dpmf.ratings", "restart_after_s": 2.5}]},
        "protocol": {"scenario": "S1", **_DPMF},
    },
    "S2: churn, dropout, stragglers, late noise set-ups, restarts with and without state": {
        "run": {"protocol": "dpmf", "seed": 6, "rounds": 5, "round_timeout_s": 3.0}, "data": _SMALL,
        "network": {"latency": _LOGNORMAL, "links": {"server->user": {"reorder": 0.15, "reorder_delay_s": 8.0}}},
        "availability": {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.1, "initial_online": 0.9, "dropout": 0.1, **_STRAGGLERS},
        "faults": {"crash": [
            {"party": "user:3", "kind": "dpmf.contribution", "round": 2, "restart_after_s": 5.0, "keep_state": False},
            {"party": "user:5", "kind": "dpmf.contribution", "round": 2, "restart_after_s": 5.0},
        ]},
        "protocol": {"scenario": "S2", **_DPMF},
    },
    "S3: churn, dropout, loss, stragglers, pre-sharing retried, a crashed user restarting": {
        "run": {"protocol": "dpmf", "seed": 3, "rounds": 5, "round_timeout_s": 3.0},
        "data": {"users": 20, "items": 20, "ratings": 200}, "network": {"latency": _LOGNORMAL, "loss": 0.1},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2, "initial_online": 0.7, "dropout": 0.1, **_STRAGGLERS},
        "faults": {"crash": [{"party": "user:2", "kind": "dpmf.contribution", "round": 2, "restart_after_s": 5.0}]},
        "protocol": {"scenario": "S3", "max_users": 8, "k_presharing": 8, "presharing_attempts": 1, **_DPMF},
    },
}

# What the checkpoints of each run caught under way, which the resumed users, recommender and third party carry on from.
CAUGHT: dict[str, set[str]] = {
    "S1: churn, a crashed user restarting": {"a restart due with the user's state", "a user offline"},
    "S2: churn, dropout, stragglers, late noise set-ups, restarts with and without state": {
        "a restart due with the user's state", "a restart due from the initial state", "a straggler computing",
        "a user offline", "a user awaiting its noise set-up in flight",
    },
    "S3: churn, dropout, loss, stragglers, pre-sharing retried, a crashed user restarting": {
        "a restart due with the user's state", "a straggler computing", "a user offline", "users that pre-shared",
        "items still to pre-share",
    },
}


def _under_way(saved: Saved) -> set[str]:
    """What ``saved`` caught: a crashed user's restart (keeping its state or not), a straggler computing, a
    user offline, an S2 user waiting for the noise set-up that is on its way, S3 users holding pre-shared
    pieces and items whose noise is not whole yet (pre-shared again before the next round)."""
    world = checkpoint_world(saved)
    population, users = world["population"], world["users"]
    running = [users[party] for party in population["running"]]
    in_flight = {(dst, kind) for bucket in world["network"]["buckets"].values() for _, dst, _, kind, *_ in bucket}
    recommender = world["objects"]["recommender"]
    return {name for name, held in (
        ("a restart due with the user's state", any(crash.keep_state for _, crash in population["_restarts_due"])),
        ("a restart due from the initial state", any(not crash.keep_state for _, crash in population["_restarts_due"])),
        ("a straggler computing", any(user.get("computing_until") is not None for user in users.values())),
        ("a user offline", len(population["_online"]) < len(users)),
        ("a user awaiting its noise set-up in flight", any(
            user.get("eta", 0) is None and (user["party"], NoiseSetup.KIND) in in_flight for user in running)),
        ("users that pre-shared", any(user.get("shared") for user in users.values())),
        ("items still to pre-share", recommender.get("attempt", 0) > 0 and not recommender["eta_whole"].all()),
    ) if held}


def _assert_same_state(result: Any, reference: Any) -> None:
    """The final states agree entry by entry, arrays inside lists and dicts too (but the wall-clock and CPU timings)."""
    state, expected = result.outcome.state, reference.outcome.state
    assert set(state) == set(expected)
    for key in set(expected) - {"loop_wall_s", "round_wall_s", "loop_cpu_s", "round_cpu_s"}:
        np.testing.assert_equal(state[key], expected[key], err_msg=key)


@pytest.mark.parametrize("name", RUNS)
def test_a_run_resumed_from_each_checkpoint_ends_as_the_run_never_interrupted(tmp_path, name) -> None:
    tables = RUNS[name]
    uninterrupted = fedrecsim.run(tables)
    assert uninterrupted.result["warnings"] == []  # every crash rule fired
    checkpointed, written = every_checkpoint(tables, tmp_path / "checkpointed")
    assert [saved.round for saved in written] == list(range(1, tables["run"]["rounds"]))
    assert set().union(*map(_under_way, written)) == CAUGHT[name]
    for result in [checkpointed, *(resume_from(saved, tmp_path / f"from-{saved.round}") for saved in written)]:
        assert_same_run(result, uninterrupted)
        _assert_same_state(result, uninterrupted)


def _users(tables: dict[str, Any]) -> list[Party]:
    return [Party(Role.USER, index) for index in range(tables["data"]["users"])]


def _sent(views: dict[Party, list[Any]], kind: type, user: Party) -> list[Any]:
    """What ``user`` sent of ``kind`` that reached the third party (its links here neither lose nor copy)."""
    return [envelope.body for envelope in views[THIRD_PARTY] if envelope.kind == kind.KIND and envelope.src == user]


def test_an_item_vectors_copy_or_an_overtaken_older_round_is_not_answered() -> None:
    tables = {
        "run": {"protocol": "dpmf", "seed": 1, "rounds": 6, "round_timeout_s": 2.0}, "data": _SMALL,
        "network": {"latency": _LOGNORMAL, "links": {"server->user": {"duplicate": 0.5, "reorder": 0.3, "reorder_delay_s": 4.0}}},
        "protocol": {"scenario": "S2", **_DPMF},
    }
    users = _users(tables)
    result = fedrecsim.run(tables, record_views=[THIRD_PARTY, *users])
    copies = overtaken = 0
    for user in users:
        answered: list[int] = []  # each round newer than every round it answered before, in delivery order
        for envelope in result.views[user]:
            if envelope.kind == ItemVectors.KIND:
                newest = max(answered, default=0)
                copies += envelope.body.round == newest
                overtaken += envelope.body.round < newest
                answered += [envelope.body.round] if envelope.body.round > newest else []
        assert sorted(reply.round for reply in _sent(result.views, Contribution, user)) == answered, user
    assert copies and overtaken, "the run must deliver copies of answered rounds and older rounds after newer ones"


def test_each_presharing_request_is_answered_once_even_when_the_network_copies_it() -> None:
    tables = {
        "run": {"protocol": "dpmf", "seed": 2, "rounds": 4, "round_timeout_s": 3.0},
        "data": {"users": 16, "items": 20, "ratings": 160},
        "network": {"latency": _LOGNORMAL, "links": {"server->user": {"duplicate": 0.5}}},
        "availability": {**_STRAGGLERS},
        "protocol": {"scenario": "S3", "max_users": 8, "k_presharing": 6, "presharing_attempts": 2, **_DPMF},
    }
    users = _users(tables)
    result = fedrecsim.run(tables, record_views=[THIRD_PARTY, *users])
    requests = {user: Counter(e.body.attempt for e in result.views[user] if e.kind == PresharingRequest.KIND) for user in users}
    for user in users:
        assert sorted(share.attempt for share in _sent(result.views, PresharingShare, user)) == sorted(requests[user]), user
    assert any(count > 1 for counter in requests.values() for count in counter.values()), "the run must copy a request"
    assert sum(map(len, requests.values())) >= 6


def test_a_user_drawn_to_drop_out_of_a_round_sends_nothing_for_it_and_contributes_again_next_round() -> None:
    tables = {
        "run": {"protocol": "dpmf", "seed": 4, "rounds": 5, "round_timeout_s": 3.0}, "data": _SMALL,
        "network": {"latency": _CONSTANT}, "availability": {"dropout": 0.25}, "protocol": {"scenario": "S2", **_DPMF},
    }
    users = _users(tables)
    result = fedrecsim.run(tables, record_views=[THIRD_PARTY])
    dropout = MidRoundDropout(0.25)
    for round_index in range(1, 6):
        dropped = dropout.crashes(4, round_index, users)
        expected = sorted(user.index for user in users if user not in dropped)
        assert result.outcome.state["contributors"][round_index - 1].tolist() == expected, round_index
        for user in users:
            sent = [reply.round for reply in _sent(result.views, Contribution, user)]
            assert (round_index in sent) == (user not in dropped), (user, round_index)
    assert sum(len(dropout.crashes(4, r, users)) for r in range(1, 6)) >= 5


def test_a_crashed_user_contributes_again_after_its_restart_but_not_without_its_noise_pieces() -> None:
    tables = {
        "run": {"protocol": "dpmf", "seed": 4, "rounds": 5, "round_timeout_s": 3.0}, "data": _SMALL,
        "network": {"latency": _CONSTANT}, "protocol": {"scenario": "S2", **_DPMF},
        "faults": {"crash": [
            {"party": "user:3", "kind": "dpmf.contribution", "round": 2, "restart_after_s": 1.0},
            {"party": "user:5", "kind": "dpmf.contribution", "round": 2, "restart_after_s": 1.0, "keep_state": False},
        ]},
    }
    result = fedrecsim.run(tables, record_views=[THIRD_PARTY])
    rounds = {user.index: [reply.round for reply in _sent(result.views, Contribution, user)] for user in _users(tables)}
    # user:3 is silent in round 2 only; user:5, reinstalled, waits for an S2 noise set-up that is never sent again.
    assert rounds == {index: {3: [1, 3, 4, 5], 5: [1]}.get(index, [1, 2, 3, 4, 5]) for index in range(12)}
    assert [sorted(row.tolist()) for row in result.outcome.state["contributors"]] == [
        [index for index in range(12) if rounds[index].count(r)] for r in range(1, 6)
    ]


async def test_a_presharing_request_is_answered_before_item_vectors_that_arrived_first(autojump_clock) -> None:
    ring, d, alice = Ring(32, 16), 2, Party(Role.USER, 0)
    public = PublicParameters("S3", "protected", "explicit", MFHyper(d=d), ring, 1.0, 4, (1.0, 5.0), PublicCoin(1, 4, d))
    network = Network(Links(0, LinkSpec(Constant(0.01))), Ledger(), record_views=[THIRD_PARTY])
    user = PrivateUser(alice, network, generator(0, Stream.ACTOR, Role.USER.code, 0), np.array([0, 2]), np.array([4.0, 2.0]), public)
    user.horizon_s = 100.0
    rng = np.random.default_rng(0)
    words = [to_words(ring, ring.uniform(rng, (2, d))) for _ in range(3)]
    for party in (SERVER, THIRD_PARTY, alice):
        network.attach(party)
    async with network.open(), trio.open_nursery() as nursery:
        network.send(SERVER, alice, ItemVectors.of(
            1, words[0], np.array([1, 1], dtype=np.int32), masks=words[1], eta_pieces=words[2],
            known_raters=np.array([1, 1], dtype=np.int32),
        ))
        await trio.sleep(1.0)
        network.send(SERVER, alice, PresharingRequest(
            1, np.array([1, 3], dtype=np.int32), np.ones((2, d)), np.array([2, 2], dtype=np.int32), words[0],
        ))
        await trio.sleep(1.0)  # both are waiting in the user's mailbox, the item vectors first
        nursery.start_soon(user.run)
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert [(envelope.kind, envelope.sent_at) for envelope in network.view(THIRD_PARTY)] == [
        (PresharingShare.KIND, 2.0), (Contribution.KIND, 2.0),
    ]
