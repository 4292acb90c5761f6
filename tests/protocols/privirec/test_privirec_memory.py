"""A user's input to a secure sum is alive once while the sum runs (`roles.PriviRecUser._sum_pending`).

Measured with tracemalloc (the bytes numpy allocates: deterministic for a code path, unlike RSS), traced
from the start of a session to the moment its last user deposits its input with the ideal functionality
-- every other user has deposited and waits for the server's next message: the session's peak -- counting
what is still alive of what was allocated on the users' code path (`roles.PriviRecUser`; the server's
session state, its graph as arrays, is not the users' inputs): each user's encoded block as
the functionality holds it, n_u x width ring words and n_u row indices, and nothing else. With the user's
reals and its encoding still alive beside the deposit (before issue 30's fix) it was 2.5 to 3 times that.
"""

from __future__ import annotations

import inspect
import tracemalloc

import numpy as np
import pytest
from privirec_harness import table

import fedrecsim
from fedrecsim.memory import estimate_memory
from fedrecsim.protocols.privirec import roles
from fedrecsim.protocols.privirec.roles import ITEM_ITEM_SESSION, POWER, PriviRecServer
from fedrecsim.protocols.privirec.traffic import DEGREE_SPREAD
from fedrecsim.protocols.secagg import IdealSum
from fedrecsim.scenario import parse_scenario

#: Frames kept per allocation: enough to reach the user's code from the deposit's copy.
FRAMES = 8
USERS, ITEMS = 30, 80


_USER_LINES = inspect.getsourcelines(roles.PriviRecUser)
_FIRST_LINE, _LAST_LINE = _USER_LINES[1], _USER_LINES[1] + len(_USER_LINES[0])


def _by_a_user(trace: tracemalloc.Trace) -> bool:
    """Whether ``trace`` was allocated on a user's code path (a frame in `roles.PriviRecUser`), not by the
    server (whose session state -- its graph, as arrays -- is not the users' inputs)."""
    return any(
        frame.filename == roles.__file__ and _FIRST_LINE <= frame.lineno < _LAST_LINE for frame in trace.traceback
    )


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
                held.append(sum(trace.size for trace in arrays.traces if _by_a_user(trace)))
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


ML1M_SHAPE = (6040, 3706, 800_133, 200_076)


def _estimate(**protocol: object) -> dict[str, float]:
    scenario = parse_scenario({"run": {"protocol": "privirec"}, "data": {"feedback": "implicit"}, "protocol": protocol})
    return {item.what: item.bytes for item in estimate_memory(scenario, ML1M_SHAPE).items}


def test_the_estimate_counts_each_input_once_and_nothing_per_user_of_the_dense_size() -> None:
    """Ideal mode at ML-1M's shape: PriviRec-k's inputs are the training entries' n_u x (p + 1) words, once;
    PriviRec's the larger of those and the item-item sum's pairs (E[d^2] = DEGREE_SPREAD E[d]^2), two words
    each. Both runs fit 8 GiB as measured (issue 32); the old estimate held every user's dense m x p input
    three times (128 GiB for PriviRec-k) and refused them."""
    low_rank = _estimate(variant="privirec_k", k=256, secagg="ideal")
    assert low_rank["secure sums' inputs"] == 800_133 * 257 * 8
    exact = _estimate(variant="privirec", k=256, secagg="ideal")
    mean = 800_133 / 6040
    assert exact["secure sums' inputs"] == pytest.approx(2 * 6040 * (DEGREE_SPREAD * mean**2 + mean) / 2 * 8)
    for variant in ("privirec", "privirec_k"):
        scenario = parse_scenario({"run": {"protocol": "privirec"}, "protocol": {"variant": variant, "secagg": "ideal"}})
        assert estimate_memory(scenario, ML1M_SHAPE).total < 8 * 2**30


def test_real_mode_counts_the_dense_inputs_of_every_user() -> None:
    """Real secure aggregation masks the dense vector: three copies of m x p words per user (the masked bytes,
    the message, the server's decoded copy)."""
    assert _estimate(variant="privirec_k", k=256, secagg="real")["secure sums' inputs"] == 3 * 6040 * 3706 * 256 * 8
