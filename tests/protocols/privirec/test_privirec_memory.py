"""A user's input to a secure sum is alive once while the sum runs (`roles.PriviRecUser._sum_pending`).

Measured with tracemalloc (the bytes numpy allocates: deterministic for a code path, unlike RSS), traced
from the start of a session to the moment its last user deposits its input with the ideal functionality
-- every other user has deposited and waits for the server's next message: the session's peak -- counting
what is still alive of what was allocated under `roles.py` (the users' code): each user's encoded block as
the functionality holds it, n_u x width ring words and n_u row indices, and nothing else. With the user's
reals and its encoding still alive beside the deposit (before issue 30's fix) it was 2.5 to 3 times that.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from privirec_harness import table

import fedrecsim
from fedrecsim.protocols.privirec import roles
from fedrecsim.protocols.privirec.roles import ITEM_ITEM_SESSION, POWER, PriviRecServer
from fedrecsim.protocols.secagg import IdealSum

#: Frames kept per allocation: enough to reach the user's code from the deposit's copy.
FRAMES = 8
USERS, ITEMS = 30, 80


def _held(monkeypatch: pytest.MonkeyPatch, variant: str, k: int, session: int) -> tuple[int, np.ndarray, int]:
    """The numpy bytes allocated under `roles` from the start of ``session`` and still alive when its last
    user deposits its input (every other user has deposited and waits for the server's next message); the
    users' numbers of items; that last user."""
    held: list[int] = []
    deposited: list[int] = []
    deposit, summed = IdealSum.deposit, PriviRecServer._sum

    def counted_deposit(self, at, index, x):  # type: ignore[no-untyped-def]
        if at == session:
            deposited.append(index)
            if len(deposited) == USERS:
                arrays = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
                users = arrays.filter_traces([tracemalloc.Filter(True, roles.__file__, all_frames=True)])
                held.append(sum(stat.size for stat in users.statistics("filename")))
                tracemalloc.stop()
        return deposit(self, at, index, x)

    async def counted_sum(self, at, length, deadline):  # type: ignore[no-untyped-def]
        if at == session:
            tracemalloc.start(FRAMES)  # what was allocated before is not traced, nor its release
        return await summed(self, at, length, deadline)

    monkeypatch.setattr(IdealSum, "deposit", counted_deposit)
    monkeypatch.setattr(PriviRecServer, "_sum", counted_sum)
    scenario = table(variant=variant, k=k, secagg="ideal", baseline=False)
    scenario["data"].update({"users": USERS, "items": ITEMS, "ratings": 1200})
    try:
        result = fedrecsim.run(scenario)
    finally:
        tracemalloc.stop()
    counts = np.array([user.items.size for _, user in sorted(result.outcome.state["users"].items())])
    return held[0], counts, deposited[-1]


def test_a_power_iterations_inputs_are_alive_once_during_the_sum(monkeypatch) -> None:
    """PriviRec-k, p = 64 columns: each user's n_u x p block is held once (ring words and row indices)."""
    held, counts, last = _held(monkeypatch, "privirec_k", 64, POWER + 2)
    once = int(counts.sum()) * (64 + 1) * 8
    # The last user's encoded block is not yet deposited; its row indices are its own items (untraced).
    assert held == once - 8 * counts[last], held / once


def test_the_item_item_inputs_are_alive_once_during_the_sum(monkeypatch) -> None:
    """PriviRec: each user's d_u (d_u + 1) / 2 upper-triangle entries are held once (ring word and position)."""
    held, counts, _ = _held(monkeypatch, "privirec", 12, ITEM_ITEM_SESSION)
    once = int((counts * (counts + 1) // 2).sum()) * (1 + 1) * 8
    assert held == once, held / once
