"""A broadcast's copies are counted as sent in one ledger record (`Network.send_many`, issue 32): every
counter must be the one that sending each copy on its own gives -- per party, per kind, per round and role,
the set-up's per party -- whatever the links lose, whatever a byzantine sender's forgery does to a copy's
length, and whether the wire shares the body (`wire.Broadcast`) or not."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import trio

from fedrecsim.network.faults import Byzantine, Corruption, PartyFaults
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import LinkSpec, Links, LogNormal
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import SHARED_BODY_BYTES, Array, message

USERS = [Party(Role.USER, index) for index in range(7)]


@message("test.broadcast_ledger")
@dataclass(frozen=True)
class Values:
    round: int
    values: Array("float64", ndim=1)


async def _run(broadcast: bool, *, loss: float, forging: bool, length: int) -> tuple[dict, dict, list[int]]:
    """The set-up, rounds 1 and 2, and the set-up again (its counters kept apart from the parties' by then),
    in each of which the server sends one body to every user, as one `send_many` or one `send` per user;
    returns the ledger's summary, its export's counters and the totals the sends returned."""
    faults = PartyFaults(byzantine=[Byzantine(SERVER, Corruption.SHAPE)]) if forging else None
    ledger = Ledger(record_transcript=True)
    network = Network(Links(3, LinkSpec(LogNormal(0.05, 0.5), loss=loss)), ledger, faults=faults)
    for party in (SERVER, *USERS):
        network.attach(party)
    totals = []
    async with network.open():
        for phase, round_index in enumerate((0, 1, 2, 0)):
            if phase:
                ledger.begin_round(round_index, len(USERS) + 1)
            body = Values(round_index, np.arange(float(length + round_index)))
            if broadcast:
                totals.append(network.send_many(SERVER, USERS, body))
            else:
                totals.append(sum(network.send(SERVER, user, body) for user in USERS))
            # A user's own message in the same round, so that the server's counters are not all it has.
            network.send(USERS[round_index], SERVER, Values(round_index, np.zeros(1)))
            await network.sleep(5.0)
    export = ledger.export()
    counters = {name: export[name] for name in ("parties", "kinds", "rounds", "dropped", "duplicated")}
    return ledger.summary(), counters, totals


@pytest.mark.parametrize("loss", [0.0, 0.4])
@pytest.mark.parametrize("forging", [False, True])
@pytest.mark.parametrize("length", [3, SHARED_BODY_BYTES // 8 + 1])
def test_a_broadcast_counts_what_sending_each_copy_on_its_own_counts(loss: float, forging: bool, length: int) -> None:
    one_by_one = trio.run(lambda: _run(False, loss=loss, forging=forging, length=length), clock=trio.testing.MockClock(autojump_threshold=0))
    broadcast = trio.run(lambda: _run(True, loss=loss, forging=forging, length=length), clock=trio.testing.MockClock(autojump_threshold=0))
    assert broadcast == one_by_one
    summary, counters, totals = broadcast
    server = summary["parties"][str(SERVER)]
    assert server["sent_msgs"] == 4 * len(USERS)
    assert server["sent_bytes"] == sum(totals)
    assert summary["setup_parties"][str(SERVER)]["sent_msgs"] == 2 * len(USERS)
    assert [entry["roles"]["server"]["sent_msgs"] for entry in summary["rounds_by_role"]] == [2 * len(USERS), len(USERS), len(USERS)]
    if loss:
        assert counters["dropped"]  # some copies were lost, and still counted as sent
