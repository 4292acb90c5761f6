"""The two leaks the PriviRec paper denies, as the simulator reports them (issue 30): the broadcast V and P~
decode whole profiles (``profiles_exposed_by_broadcast``), and PriviRec-k's server reconstructs P~ from
the bases it sent and the sums it received whenever L p >= m (``server_recovers_p``)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import fedrecsim
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.privirec import attacks
from privirec_harness import table as _table

# A tiny data set whose degree-1 and degree-2 items are placed by hand (12 items, 9 users).
PROFILES = [
    [0, 5, 6],            # item 0 is user 0's alone: decoded
    [1, 5, 7, 8],         # item 1 is users 1 and 2's, of degrees 4 and 2: both decoded
    [1, 6],
    [2, 5, 7],            # item 2 is users 3 and 4's, both of degree 3 with different profiles: ambiguous
    [2, 6, 8],
    [5, 6, 7, 8, 9, 10, 11],
    [3, 5, 6, 7, 8, 9, 10, 11],
    [3, 4, 9, 10, 11],    # item 4 is users 7 and 8's, of degrees 5 and 6: both decoded
    [3, 4, 5, 9, 10, 11],
]
HELD_OUT = [[9], [9], [9], [9], [9], [0], [0], [0], [0]]


def _decodable(profiles: list[list[int]]) -> int:
    """The users a holder of V and P' identifies exactly, by the rule of `attacks` (its module docstring):
    a user holding an item of degree 1, or an item of degree 2 shared with a user of another degree or of
    the same profile."""
    holders: dict[int, list[int]] = {}
    for user, items in enumerate(profiles):
        for item in items:
            holders.setdefault(item, []).append(user)
    exposed = set()
    for users in holders.values():
        if len(users) == 1:
            exposed.add(users[0])
        elif len(users) == 2:
            first, second = (profiles[user] for user in users)
            if len(first) != len(second) or sorted(first) == sorted(second):
                exposed.update(users)
    return len(exposed)


def _npz(path, profiles: list[list[int]]) -> str:  # type: ignore[no-untyped-def]
    rows = np.repeat(np.arange(len(profiles)), [len(items) for items in profiles])
    columns = np.concatenate([np.asarray(items) for items in profiles])
    sp.save_npz(path, sp.csr_matrix((np.ones(rows.size), (rows, columns)), shape=(len(profiles), 12)))
    return str(path)


def _scenario(tmp_path, variant: str = "privirec", **protocol: object) -> dict:  # type: ignore[no-untyped-def]
    table = _table(variant=variant, k=4, **protocol)
    table["data"] = {"source": "npz", "feedback": "implicit", "path": _npz(tmp_path / "train.npz", PROFILES),
                     "test_path": _npz(tmp_path / "test.npz", HELD_OUT)}
    return table


@pytest.mark.parametrize("alpha", [0.5, 0.6])
def test_the_broadcast_exposes_exactly_the_users_whose_profiles_degree_one_and_two_items_decode(tmp_path, alpha) -> None:  # type: ignore[no-untyped-def]
    expected = _decodable(PROFILES)
    assert expected == 5  # users 0, 1, 2, 7, 8 (not 3 and 4: same degree, different profiles)
    receiver = Party(Role.USER, 5)
    result = fedrecsim.run(_scenario(tmp_path, alpha=alpha), record_views=[receiver])
    assert result.metrics["profiles_exposed_by_broadcast"] == expected
    assert result.metrics["profiles_decoded_by_broadcast"] == expected
    # The same attack on the recorded view of a user who holds none of the decoded items.
    degrees, item_item = attacks.broadcast_from_view(result.views[receiver], 12)
    decoded = attacks.decode_profiles(degrees, attacks.dense_rows(item_item), alpha)
    assert sorted(decoded) == sorted(tuple(PROFILES[user]) for user in (0, 1, 2, 7, 8))
    assert "profiles_exposed_by_broadcast" in " ".join(result.result["privacy"]["known_leaks"])


def test_decoding_claims_no_profile_a_noisy_broadcast_does_not_support() -> None:
    """The attack's consistency checks: an entry (0, 1) perturbed beyond 1 / (2 m) makes rows 0 and 1 claim
    one item more than their value's degree: they claim nothing, and rows 2 and 3 still decode the three."""
    degrees = np.array([1.0, 1.0, 2.0, 2.0])
    p_prime = np.zeros((4, 4))
    p_prime[np.ix_([0, 2], [0, 2])] = 0.5           # user {0, 2}
    p_prime[np.ix_([1, 2, 3], [1, 2, 3])] += 1 / 3  # user {1, 2, 3}
    p_prime[3, 3] += 1.0                            # user {3}
    scale = 1 / np.sqrt(degrees)
    clean = p_prime * scale[:, None] * scale[None, :]
    assert attacks.decode_profiles(degrees, attacks.dense_rows(clean)) == [(0, 2), (1, 2, 3), (3,)]
    noisy = clean.copy()
    noisy[1, 0] = noisy[0, 1] = 0.2
    decoded = attacks.decode_profiles(degrees, attacks.dense_rows(noisy))
    assert decoded == [(0, 2), (1, 2, 3), (3,)]
    assert not any({0, 1} <= set(profile) for profile in decoded)


@pytest.mark.parametrize(("oversample", "recovers"), [(18, True), (17, False)])
def test_privirec_k_server_recovers_p_exactly_when_l_times_p_reaches_m(oversample: int, recovers: bool) -> None:
    """m = 60 items, L = 2: p = 30 gives L p = m (recovered to the fixed-point rounding of the sums),
    p = 29 leaves a 2-dimensional complement the server cannot see."""
    table = _table(variant="privirec_k", oversample=oversample)
    table["data"]["ratings"] = 300
    metrics = fedrecsim.run(table).metrics
    assert metrics["server_basis_rank"] == min(60, 2 * (12 + oversample))
    assert metrics["server_recovers_p"] == float(recovers)
    if recovers:
        assert metrics["server_p_error"] < 1e-9
        assert metrics["profiles_exposed_to_server"] > 0
    else:
        assert metrics["server_p_error"] > 1e-3
        assert metrics["profiles_exposed_to_server"] == 0
