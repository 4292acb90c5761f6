"""The server's per-stage neighbour lists (`roles._Graph.among`) and its index-array comparison (`roles._same`):
the same lists, user by user, as asking the graph one user at a time, and the same verdicts as np.array_equal."""

from __future__ import annotations

import numpy as np
import pytest

from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.secagg import graph as graphs
from fedrecsim.protocols.secagg.roles import _Graph, _same


def _session(n: int, degree: int, seed: int) -> _Graph:
    everyone = [Party(Role.USER, index) for index in range(3, 3 + 2 * n, 2)]  # party indices are not places
    places = graphs.harary_places(n, degree, np.random.default_rng(seed))
    return _Graph(everyone, graphs.by_party(everyone, places), places)


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
