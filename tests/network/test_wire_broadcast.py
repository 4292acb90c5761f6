"""Broadcasts whose body is shared (`wire.Broadcast`): at `SHARED_BODY_BYTES` and above, `encode_many` gives
every destination its own envelope head and one body -- the bytes `encode` gives it, never copied -- and
every receiver gets one decoded body whose arrays are read-only; the ledger counts every copy in full and
hashes each as its head and the body's digest."""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass

import numpy as np
import pytest
import trio
import xxhash

from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import (
    SHARED_BODY_BYTES,
    Array,
    Broadcast,
    decode,
    decode_broadcast,
    encode,
    encode_many,
    message,
)

USERS = [Party(Role.USER, index) for index in range(3)]


@message("test.shared")
@dataclass(frozen=True)
class Model:
    round: int
    name: str
    weights: Array("float64", ndim=2)
    layers: tuple[Array("float64", ndim=1), ...]


@message("test.shared_blob")
@dataclass(frozen=True)
class Blob:
    data: bytes


def _model(floats: int) -> Model:
    """A model whose encoded body is about ``8 * floats`` bytes."""
    return Model(3, "mult-vae", np.arange(floats, dtype=np.float64).reshape(-1, 1), (np.ones(2), np.zeros(1)))


def test_the_threshold_is_on_the_encoded_body_sent_at_included() -> None:
    # The body: sent_at (9 bytes, a msgpack float64) and one bytes field (3 header bytes below 64 KiB).
    at = Blob(bytes(SHARED_BODY_BYTES - 9 - 3))
    below = Blob(bytes(SHARED_BODY_BYTES - 9 - 3 - 1))
    assert type(encode_many(SERVER, USERS, 0.0, at)[0]) is Broadcast
    assert type(encode_many(SERVER, USERS, 0.0, below)[0]) is bytes


def test_a_body_beyond_msgpacks_default_buffer_decodes() -> None:
    """msgpack's streaming unpacker refuses more than 100 MiB unless told the size."""
    body = Model(1, "big", np.zeros((101 * 1024 * 1024 // 8, 1)), ())
    [copy] = encode_many(SERVER, USERS[:1], 0.0, body, max_bytes=1 << 30)
    assert decode_broadcast(Model.KIND, SERVER, USERS[0], copy).body.weights.shape == body.weights.shape  # type: ignore[attr-defined, union-attr]


def test_at_the_threshold_every_copy_holds_one_body_and_is_exactly_what_encode_gives() -> None:
    body = _model(SHARED_BODY_BYTES // 8)
    copies = encode_many(SERVER, USERS, 1.5, body)
    assert all(type(copy) is Broadcast for copy in copies)
    assert len({id(copy.shared) for copy in copies}) == 1
    for dst, copy in zip(USERS, copies):
        assert bytes(copy) == encode(SERVER, dst, 1.5, body) and len(copy) == len(bytes(copy))
    small = encode_many(SERVER, USERS, 1.5, _model(SHARED_BODY_BYTES // 8 - 10))
    assert all(type(copy) is bytes for copy in small)


def test_every_receiver_gets_the_one_decoded_body_read_only() -> None:
    body = _model(SHARED_BODY_BYTES // 8)
    copies = encode_many(SERVER, USERS, 1.5, body)
    envelopes = [decode_broadcast(Model.KIND, SERVER, dst, copy) for dst, copy in zip(USERS, copies)]  # type: ignore[attr-defined]
    assert [(e.src, e.dst, e.sent_at) for e in envelopes] == [(SERVER, dst, 1.5) for dst in USERS]
    assert envelopes[0].body is envelopes[2].body
    reference = decode(bytes(copies[0])).body
    np.testing.assert_array_equal(envelopes[0].body.weights, reference.weights)
    assert (envelopes[0].body.round, envelopes[0].body.name) == (3, "mult-vae")
    assert [layer.tolist() for layer in envelopes[0].body.layers] == [[1.0, 1.0], [0.0]]
    for array in (envelopes[1].body.weights, *envelopes[1].body.layers):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 7.0


async def test_the_ledger_counts_every_copy_and_hashes_its_head_and_the_bodys_digest(autojump_clock) -> None:
    body = _model(SHARED_BODY_BYTES // 8)
    network = Network(Links(0, LinkSpec(Constant(0.25))), Ledger(), resolution_s=0.0)
    for party in (SERVER, *USERS):
        network.attach(party)
    async with network.open():
        start = trio.current_time()
        sent = network.send_many(SERVER, USERS, body)
        await trio.sleep(1.0)
    copies = encode_many(SERVER, USERS, start, body)
    assert sent == sum(len(copy) for copy in copies) == network.ledger.party(SERVER)["sent_bytes"]
    assert all(network.ledger.party(user)["recv_bytes"] == len(copies[0]) for user in USERS)
    expected = xxhash.xxh3_128()
    digest = xxhash.xxh3_128_digest(copies[0].shared.data)  # type: ignore[union-attr]
    for copy in copies:  # delivered in sender, receiver order at start + 0.25
        expected.update(struct.pack("<dQ", start + 0.25, len(copy)))
        expected.update(copy.head)  # type: ignore[union-attr]
        expected.update(digest)
    assert network.ledger.transcript_xxh3_128 == expected.hexdigest()
    received = [network.mailbox(user).take(Model.KIND) for user in USERS]  # type: ignore[attr-defined]
    assert [(envelope.src, envelope.dst) for envelope in received] == [(SERVER, user) for user in USERS]
    assert received[0].body is received[1].body and not received[0].body.weights.flags.writeable


def test_a_copy_pickled_in_a_checkpoint_comes_back_as_the_same_bytes_digest_and_body() -> None:
    body = _model(SHARED_BODY_BYTES // 8)
    copies = encode_many(SERVER, USERS, 1.5, body)
    restored = pickle.loads(pickle.dumps(copies))
    assert len({id(copy.shared) for copy in restored}) == 1
    for copy, again in zip(copies, restored):
        assert bytes(again) == bytes(copy) and again.shared.digest() == xxhash.xxh3_128_digest(copy.shared.data)
    received = decode_broadcast(Model.KIND, SERVER, USERS[0], restored[0]).body
    np.testing.assert_array_equal(received.weights, body.weights)  # type: ignore[attr-defined]
