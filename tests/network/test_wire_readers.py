"""`wire.TRUSTED_READERS`: a kind's reader, for a caller that knows the kind, gives what `decode_trusted`
gives, for every head form and after a kind is registered again."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from fedrecsim.network import wire
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import TRUSTED_READERS, decode_trusted, encode
from fedrecsim.protocols.dpmf.messages import Contribution, ItemRequest, ItemVectors
from fedrecsim.protocols.fedvae.messages import Gradient

USER = Party(Role.USER, 300)
WORDS = np.arange(60, dtype=np.uint32).reshape(3, 20)
ITEMS = np.array([1, 4, 9], dtype=np.int32)

# A kind longer than 31 bytes and more than 15 envelope elements: the head forms `decode_trusted` finds by
# `_rebuild` rather than by its first bytes.
Wide = wire.message("test.readers_" + "w" * 40)(
    dataclasses.make_dataclass("Wide", [(f"f{index}", int) for index in range(12)], frozen=True)
)


def _same(got: Any, want: Any) -> None:
    assert (got.kind, got.src, got.dst, got.sent_at, type(got.body)) == (want.kind, want.src, want.dst, want.sent_at, type(want.body))
    for field in dataclasses.fields(want.body):
        mine, theirs = getattr(got.body, field.name), getattr(want.body, field.name)
        if isinstance(theirs, np.ndarray):
            np.testing.assert_array_equal(mine, theirs)
            assert mine.dtype == theirs.dtype and not mine.flags.writeable
            assert mine.flags.aligned == theirs.flags.aligned
        else:
            assert mine == theirs


@pytest.mark.parametrize(
    ("src", "dst", "body"),
    [
        (SERVER, USER, ItemVectors.of(2, WORDS, np.ones(3, np.int32), WORDS, None, WORDS, np.full(3, 2, np.int32))),
        (USER, Party(Role.THIRD_PARTY, 0), Contribution(7, ITEMS, WORDS)),
        (USER, SERVER, ItemRequest(ITEMS)),
        (Party(Role.USER, 70000), SERVER, Gradient(300, np.linspace(0, 1, 70000, dtype=np.float32))),
        (SERVER, USER, Wide(*range(-6, 6))),
    ],
    ids=["item_vectors", "contribution", "item_request", "gradient_ext32", "long_head"],
)
def test_a_kinds_reader_gives_what_decode_trusted_gives(src: Party, dst: Party, body: Any) -> None:
    for sent_at in (0.0, 1.25, 1e9):
        data = encode(src, dst, sent_at, body)
        _same(TRUSTED_READERS[body.KIND](data), decode_trusted(data))


def test_the_readers_cannot_be_changed_from_outside() -> None:
    with pytest.raises(TypeError):
        TRUSTED_READERS["dpmf.item_request"] = decode_trusted  # type: ignore[index]


def test_a_kind_registered_again_is_read_by_its_new_reader() -> None:
    def register(fields: list[tuple[str, Any]]) -> Any:
        cls = dataclasses.make_dataclass("Again", fields, frozen=True)
        cls.__module__, cls.__qualname__ = __name__, "Again"
        return wire.message("test.readers_again")(cls)

    register([("count", int)])
    Again = register([("name", str), ("values", wire.Array("int16", ndim=1))])  # noqa: N806
    data = encode(SERVER, USER, 3.0, Again("x", np.arange(5, dtype=np.int16)))
    _same(TRUSTED_READERS["test.readers_again"](data), decode_trusted(data))


@pytest.mark.parametrize("body", [ItemRequest(ITEMS), Contribution(2, ITEMS, WORDS)], ids=["request", "contribution"])
def test_a_read_envelope_is_a_frozen_envelope(body: Any) -> None:
    """A reader fills the envelope as `wire._OpenEnvelope` and then gives it the class `Envelope`: what a
    receiver gets is exactly an `Envelope` -- equal to one built by its constructor, hashed alike, pickled
    and restored as one -- and no receiver can rebind its fields (a broadcast's receivers share its body)."""
    import pickle

    data = encode(SERVER, USER, 1.5, body)
    for envelope in (TRUSTED_READERS[body.KIND](data), wire._envelope(body.KIND, SERVER, USER, 1.5, body)):
        assert type(envelope) is wire.Envelope
        with pytest.raises(dataclasses.FrozenInstanceError):
            envelope.body = None  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            envelope.src = USER  # type: ignore[misc]
        plain = wire.Envelope(envelope.kind, envelope.src, envelope.dst, envelope.sent_at, envelope.body)
        assert envelope == plain and hash((envelope.kind, envelope.src)) == hash((plain.kind, plain.src))
        restored = pickle.loads(pickle.dumps(envelope))
        assert type(restored) is wire.Envelope and restored.kind == envelope.kind and restored.src == SERVER
