"""The server's per-stage neighbour lists (`roles._Graph.among`), its routing of sealed shares (`roles._route`)
and its index-array comparison (`roles._same`): the same lists and rows, user by user, as asking the graph one
user at a time, and the same verdicts as np.array_equal; the graph by party (`_Graph.graph`) is `graphs.by_party`'s."""

from __future__ import annotations

import numpy as np
import pytest

from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.secagg.crypto import CIPHERTEXT_BYTES
from fedrecsim.protocols.secagg import graph as graphs
from fedrecsim.protocols.secagg.messages import Shares
from fedrecsim.protocols.secagg.roles import _Graph, _route, _same


def _session(n: int, degree: int, seed: int) -> _Graph:
    everyone = [Party(Role.USER, index) for index in range(3, 3 + 2 * n, 2)]  # party indices are not places
    return _Graph(everyone, graphs.harary_places(n, degree, np.random.default_rng(seed)))


@pytest.mark.parametrize(("n", "degree", "seed"), [(17, 6, 0), (16, 5, 1), (9, 8, 2), (1, 0, 0)])
def test_the_graph_by_party_is_each_users_neighbours_as_by_party_gives_them(n: int, degree: int, seed: int) -> None:
    everyone = [Party(Role.USER, index) for index in range(3, 3 + 2 * n, 2)]
    places = graphs.harary_places(n, degree, np.random.default_rng(seed)) if degree else [[]]
    net = _Graph(everyone, places)
    expected = graphs.by_party(everyone, places)
    assert net.graph == expected and dict(net.graph) == expected
    assert list(net.graph) == everyone and len(net.graph) == n
    with pytest.raises(KeyError):
        net.graph[Party(Role.USER, 2)]


@pytest.mark.parametrize(("n", "degree", "seed"), [(17, 6, 0), (16, 5, 1), (9, 8, 2), (40, 7, 3)])
def test_each_user_of_u2_gets_the_rows_its_u2_neighbours_sealed_for_it_senders_ascending(n: int, degree: int, seed: int) -> None:
    net = _session(n, degree, seed)
    rng = np.random.default_rng(seed + 20)
    for share_u1, share_u2 in ((1.0, 1.0), (0.8, 0.7), (0.5, 0.3)):
        in_u1 = rng.random(n) < share_u1
        in_u2 = in_u1 & (rng.random(n) < share_u2)
        advertisers = net.among(in_u1)
        u2 = [party for place, party in enumerate(net.everyone) if in_u2[place]]
        shared = {}
        for party in u2:  # the row u seals for v: u's index, v's index and 1 as its first bytes
            recipients = advertisers.ids[advertisers.span(net.position[party])]
            rows = np.zeros((recipients.size, CIPHERTEXT_BYTES), dtype=np.uint8)
            rows[:, 0], rows[:, 1], rows[:, 2] = party.index, recipients, 1
            shared[party] = Shares(0, recipients, rows)
        routed = _route(net, u2, advertisers, shared)
        assert list(routed) == u2
        for party in u2:
            senders = [other for other in u2 if party.index in shared[other].recipients.tolist()]
            origin, rows = routed[party]
            assert origin.tolist() == [other.index for other in senders]
            assert rows[:, :3].tolist() == [[other.index, party.index, 1] for other in senders]


@pytest.mark.parametrize(("n", "degree", "seed"), [(17, 6, 0), (16, 5, 1), (9, 8, 2), (40, 7, 3)])
def test_every_users_list_is_its_neighbours_in_the_mask_and_with_itself_its_place_in_order(n: int, degree: int, seed: int) -> None:
    net = _session(n, degree, seed)
    rng = np.random.default_rng(seed + 10)
    for share in (0.0, 0.3, 0.8, 1.0):
        mask = rng.random(n) < share
        lists, with_self = net.among(mask), net.among(mask, itself=True)
        for place, party in enumerate(net.everyone):
            expected = net.neighbours_in(party, mask)
            assert lists.places[lists.span(place)].tolist() == expected.tolist()
            assert lists.ids[lists.span(place)].tolist() == net.index[expected].tolist()
            assert with_self.places[with_self.span(place)].tolist() == sorted([*expected.tolist(), place])


@pytest.mark.parametrize(
    ("received", "expected"),
    [
        (np.array([1, 4, 9], np.int32), np.array([1, 4, 9], np.int32)),
        (np.array([9, 4, 1], np.int32), np.array([1, 4, 9], np.int32)),
        (np.array([1, 4], np.int32), np.array([1, 4, 9], np.int32)),
        (np.array([], np.int32), np.array([], np.int32)),
        (np.array([1, 4, 9], np.int64), np.array([1, 4, 9], np.int32)),
        (np.array([[1, 4, 9]], np.int32), np.array([1, 4, 9], np.int32)),
        (np.array([0.0, 1.0]), np.array([-0.0, 1.0])),
        (np.array([np.nan]), np.array([np.nan])),
    ],
)
def test_index_arrays_compare_as_np_array_equal_does(received: np.ndarray, expected: np.ndarray) -> None:
    assert _same(received, expected) == np.array_equal(received, expected)
