"""Exact PriviRec's memory (issue 30): the receivers of one P~ broadcast share one read-only dense P~
(`roles.shared_item_item`), instead of each building its own m x m copy."""

from __future__ import annotations

import numpy as np
import pytest

import fedrecsim
from fedrecsim.protocols.privirec import local
from fedrecsim.protocols.privirec.roles import shared_item_item
from privirec_harness import table as _table


def test_the_users_of_one_broadcast_hold_one_read_only_p_tilde_equal_to_the_servers() -> None:
    table = _table(variant="privirec")
    table["data"].update(items=200, ratings=2000)  # P~'s upper triangle, 160 kB: a shared-body broadcast
    result = fedrecsim.run(table)
    users = list(result.outcome.state["users"].values())
    assert len({id(user.item_item) for user in users}) == 1
    assert not users[0].item_item.flags.writeable
    with pytest.raises(ValueError):
        users[0].item_item.flags.writeable = True  # or one user could change every other user's P~
    np.testing.assert_allclose(users[0].item_item, result.outcome.state["server"].item_item, rtol=1e-14, atol=0)
    assert result.metrics["max_score_gap"] <= 1e-6


def test_a_body_of_its_receivers_own_gets_its_own_read_only_copy() -> None:
    upper = np.arange(local.upper_length(3), dtype=np.float64)
    first, second = shared_item_item(upper, 3), shared_item_item(upper, 3)
    assert first is not second and not first.flags.writeable
    with pytest.raises(ValueError):
        first.flags.writeable = True
    np.testing.assert_array_equal(first, local.symmetric_from_upper(upper, 3))
    shared = upper.copy()
    shared.flags.writeable = False
    assert shared_item_item(shared, 3) is shared_item_item(shared, 3)
