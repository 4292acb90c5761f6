"""Padding (`Network.send(..., padding=n)`): a message that stands for ``n`` bytes beyond its encoding --
an ideal functionality's payload the run leaves out -- counts as if it carried them: in the ledger (sent,
received, dropped, the transcript rows), on the links' bandwidth and against the size limit; the transcript
hash covers the size, so padded and unpadded runs differ."""

from __future__ import annotations

from dataclasses import dataclass

import msgpack
import pytest
import trio
import trio.testing

from fedrecsim.errors import WireError
from fedrecsim.network.ledger import DropReason, Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import bytes_field_size, encode, message

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)


@message("test.padded")
@dataclass(frozen=True)
class Stub:
    seq: int


def _network(bandwidth_bps: float = 0.0, max_message_bytes: int = 1 << 20) -> Network:
    links = Links(1, LinkSpec(Constant(0.1), bandwidth_bps))
    return Network(links, Ledger(record_transcript=True), resolution_s=0.0, max_message_bytes=max_message_bytes)


async def _exchange(network: Network, padding: int, detach_bob: bool = False) -> float:
    """ALICE sends SERVER and BOB one stub each with ``padding``; returns SERVER's arrival time after the
    sending."""
    for party in (ALICE, BOB, SERVER):
        network.attach(party)
    start = trio.current_time()
    async with network.open():
        size = network.send(ALICE, SERVER, Stub(1), padding=padding)
        assert size == len(encode(ALICE, SERVER, 0.0, Stub(1))) + padding
        network.send(ALICE, BOB, Stub(2), padding=padding)
        if detach_bob:
            network.detach(BOB)
        arrived = await _arrival(network) - start
        await trio.sleep(10.0)
    return arrived


async def _arrival(network: Network) -> float:
    mailbox = network.mailbox(SERVER)
    while mailbox.take(Stub.KIND) is None:  # type: ignore[attr-defined]
        await mailbox.wait(trio.current_time() + 100.0)
    return trio.current_time()


async def test_the_ledger_counts_the_padding_as_carried(autojump_clock) -> None:
    network = _network()
    await _exchange(network, padding=1000, detach_bob=True)
    ledger = network.ledger
    encoded = len(encode(ALICE, SERVER, 0.0, Stub(1)))
    assert ledger.party(ALICE)["sent_bytes"] == 2 * (encoded + 1000)
    assert ledger.party(SERVER)["recv_bytes"] == encoded + 1000
    rows = {(row.dst, row.status): row.nbytes for row in ledger.transcript}
    assert rows == {(SERVER, "delivered"): encoded + 1000, (BOB, f"dropped:{DropReason.OFFLINE.value}"): encoded + 1000}


async def test_the_padding_occupies_the_link(autojump_clock) -> None:
    padded_at = await _exchange(_network(bandwidth_bps=8000), padding=1000)
    plain_at = await _exchange(_network(bandwidth_bps=8000), padding=0)
    assert padded_at - plain_at == pytest.approx(8 * 1000 / 8000)  # 1000 bytes more on an 8 kbit/s link


def test_the_hash_covers_the_padded_size() -> None:
    """The same bytes at the same times (each run in a fresh loop from virtual time 0): only the size the
    transcript hash covers tells the runs apart."""
    hashes = []
    for padding in (0, 1000, 1000):
        network = _network()
        trio.run(_exchange, network, padding, clock=trio.testing.MockClock(autojump_threshold=0))
        hashes.append(network.ledger.transcript_xxh3_128)
    assert hashes[0] != hashes[1] == hashes[2]


async def test_a_message_over_the_limit_with_its_padding_is_refused(autojump_clock) -> None:
    encoded = len(encode(ALICE, SERVER, 0.0, Stub(1)))
    network = _network(max_message_bytes=encoded + 99)
    network.attach(ALICE)
    network.attach(SERVER)
    async with network.open():
        network.send(ALICE, SERVER, Stub(1), padding=99)
        with pytest.raises(WireError, match=rf"^test.padded: message of {encoded + 100} bytes with its padding exceeds the limit of {encoded + 99}$"):
            network.send(ALICE, SERVER, Stub(1), padding=100)
        with pytest.raises(ValueError, match="^padding must be >= 0, got -1$"):
            network.send(ALICE, SERVER, Stub(1), padding=-1)
    assert network.ledger.party(ALICE)["sent_msgs"] == 1


@pytest.mark.parametrize("n", [0, 255, 256, 65_535, 65_536, 100_000])
def test_a_bytes_fields_encoded_size_is_msgpacks(n: int) -> None:
    assert bytes_field_size(n) == len(msgpack.packb(bytes(n)))
