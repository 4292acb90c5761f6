"""A shared broadcast body (`wire.SharedBody`) is held after a few padding bytes that put its largest array at
an aligned address: the first delivery reads that array in place, read-only, instead of copying it, while
every copy is still exactly the bytes `encode` gives its destination."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
import xxhash

from fedrecsim.network import wire
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import SHARED_BODY_BYTES, Broadcast, decode_broadcast, encode, encode_many

USERS = [Party(Role.USER, index) for index in (0, 1, 300)]


def _model_class(dtype: str, ndim: int) -> type:
    fields = [("pad", bytes), ("small", wire.Array("float64", ndim=1)), ("weights", wire.Array(dtype, ndim=ndim))]
    return wire.message(f"test.aligned_broadcast_{dtype}_{ndim}")(
        dataclasses.make_dataclass("Model", fields, frozen=True)
    )


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "uint8"])
@pytest.mark.parametrize("ndim", [1, 2])
def test_the_largest_array_of_a_shared_body_is_a_read_only_view_at_every_offset(dtype: str, ndim: int) -> None:
    Model = _model_class(dtype, ndim)  # noqa: N806
    length = SHARED_BODY_BYTES // np.dtype(dtype).itemsize + 16
    weights = np.arange(length, dtype=dtype).reshape((length,) if ndim == 1 else (2, length // 2))
    for count in range(8):  # the pad moves the weights through every offset modulo 8
        body = Model(b"x" * count, np.ones(3), weights)
        copies = encode_many(SERVER, USERS, 2.5, body)
        assert all(type(copy) is Broadcast for copy in copies)
        for dst, copy in zip(USERS, copies):
            assert bytes(copy) == encode(SERVER, dst, 2.5, body) and len(copy) == len(bytes(copy))
        shared = copies[0].shared  # type: ignore[union-attr]
        alone = encode(SERVER, USERS[0], 2.5, body)
        assert bytes(shared.data) == alone[len(alone) - len(shared.data):]
        assert shared.digest() == xxhash.xxh3_128_digest(bytes(shared.data))
        received = [decode_broadcast(Model.KIND, SERVER, dst, copy).body for dst, copy in zip(USERS, copies)]  # type: ignore[attr-defined, arg-type]
        got = received[0].weights
        np.testing.assert_array_equal(got, weights)
        assert got.dtype == weights.dtype and got.flags.aligned and got.flags.c_contiguous
        assert all(other.weights is got for other in received)
        # Read in place: the array is a view of the body's bytes, not a copy ...
        assert np.shares_memory(got, np.frombuffer(shared.data, np.uint8))
        # ... and no receiver can write through it.
        assert not got.flags.writeable
        with pytest.raises(ValueError):
            got.setflags(write=True)
        np.testing.assert_array_equal(received[0].small, np.ones(3))
        assert not received[0].small.flags.writeable


def test_a_padded_body_pickled_in_a_checkpoint_comes_back_with_the_same_bytes_and_a_view() -> None:
    Model = _model_class("float32", 1)  # noqa: N806
    weights = np.arange(SHARED_BODY_BYTES, dtype=np.float32)
    for count in range(4):
        body = Model(b"x" * count, np.zeros(2), weights)
        copies = encode_many(SERVER, USERS, 1.0, body)
        restored = pickle.loads(pickle.dumps(copies))
        assert [bytes(copy) for copy in restored] == [bytes(copy) for copy in copies]
        assert restored[0].shared.digest() == copies[0].shared.digest()
        got = decode_broadcast(Model.KIND, SERVER, USERS[0], restored[0]).body.weights  # type: ignore[attr-defined]
        np.testing.assert_array_equal(got, weights)
        assert np.shares_memory(got, np.frombuffer(restored[0].shared.data, np.uint8)) and not got.flags.writeable


def test_a_body_below_the_threshold_is_plain_bytes_without_padding() -> None:
    Model = _model_class("float64", 1)  # noqa: N806
    body = Model(b"", np.zeros(2), np.arange(16, dtype=np.float64))
    copies = encode_many(SERVER, USERS, 0.5, body)
    assert copies == [encode(SERVER, dst, 0.5, body) for dst in USERS]


def test_no_array_of_a_shared_body_can_be_made_writeable_whichever_arrays_are_misaligned() -> None:
    """Only the largest array is placed aligned; another large one (an ext 32 value, read by `_read`) lands
    misaligned at most offsets and is copied. That copy must be a view of immutable bytes: an owned array
    set read-only could be made writeable by one receiver, changing every other receiver's view."""
    fields = [("pad", bytes), ("second", wire.Array("float64", ndim=1)), ("weights", wire.Array("float64", ndim=1))]
    Model = wire.message("test.aligned_broadcast_two_large")(dataclasses.make_dataclass("Model", fields, frozen=True))  # noqa: N806
    second = np.arange(SHARED_BODY_BYTES // 8 + 3, dtype=np.float64)
    weights = np.arange(SHARED_BODY_BYTES // 4, dtype=np.float64)
    misaligned = 0
    for count in range(8):
        copies = encode_many(SERVER, USERS, 1.5, Model(b"x" * count, second, weights))
        received = [decode_broadcast(Model.KIND, SERVER, dst, copy).body for dst, copy in zip(USERS, copies)]  # type: ignore[attr-defined, arg-type]
        for name, sent in (("second", second), ("weights", weights)):
            got = getattr(received[0], name)
            np.testing.assert_array_equal(got, sent)
            assert all(getattr(other, name) is got for other in received) and got.flags.aligned
            with pytest.raises(ValueError):
                got.setflags(write=True)
            misaligned += not np.shares_memory(got, np.frombuffer(copies[0].shared.data, np.uint8))  # type: ignore[union-attr]
    assert misaligned >= 4  # the copy path was taken
