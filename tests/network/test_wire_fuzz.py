"""The wire decoder fuzzed (issue 18): structured frames of every shape msgpack can express, ndarray
payloads with any header, and raw bytes -- `decode` raises `WireError` and nothing else, returns only
messages of the kind the frame names, and its memory stays linear in the input whatever the input claims
(a length of 2^32 in a header allocates nothing)."""

from __future__ import annotations

import math
import struct
import tracemalloc
from dataclasses import dataclass

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrecsim.errors import WireError
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, Envelope, decode, encode, message

USER = Party(Role.USER, 3)


@message("fuzz.sample")
@dataclass(frozen=True)
class Sample:
    round: int
    weight: float
    rows: Array("float64", ndim=2)
    items: Array("int32", ndim=1)
    who: Party
    tags: tuple[str, ...]
    note: bytes | None = None


# Kinds of every shape the protocols use, plus this module's own.
KINDS = ["fuzz.sample", "fcf.item_gradients", "dpmf.contribution", "ldp.report_batch", "secagg.shares", "core.join", "nope.kind"]
DTYPE_CODES = st.integers(0, 12)  # 0..10 are valid dtype codes, 11 and 12 are not


def _ensure_protocols_loaded() -> None:
    import fedrecsim.protocols.dpmf.messages  # noqa: F401
    import fedrecsim.protocols.fcf.messages  # noqa: F401
    import fedrecsim.protocols.ldp_implicit.messages  # noqa: F401
    import fedrecsim.protocols.secagg.messages  # noqa: F401


@st.composite
def ndarray_payloads(draw: st.DrawFn) -> msgpack.ExtType:
    """An ext payload: a header with any dtype code, ndim and shape, and any number of element bytes --
    often exactly the right number, so that the element checks (dtype, NaN) are reached too."""
    code = draw(DTYPE_CODES)
    ndim = draw(st.integers(0, 4) | st.just(33))
    shape = draw(st.lists(st.integers(0, 5) | st.just(2**32 - 1), min_size=min(ndim, 4), max_size=min(ndim, 4)))
    header = bytes((code, ndim)) + struct.pack(f"<{len(shape)}I", *shape)
    itemsize = (1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 1)[code] if code < 11 else 1
    exact = itemsize * math.prod(shape) if len(shape) == ndim and math.prod(shape) < 64 else 0
    size = draw(st.just(exact) | st.integers(0, 64))
    fill = draw(st.sampled_from([b"\x00", b"\xff", b"\x7f\xf8", b"\x01"]))
    return msgpack.ExtType(draw(st.sampled_from([1, 1, 1, 2, 0])), header + (fill * size)[:size])


_SCALARS = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8) | st.binary(max_size=8) | ndarray_payloads()
)
#: Any value msgpack can carry, nested a little.
VALUES = st.recursive(
    _SCALARS, lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=6,
)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """An envelope-shaped msgpack array: a kind, two parties, a send time and fields, each position either
    well-formed or anything msgpack can carry."""
    good_party = st.tuples(st.integers(0, 4), st.integers(0, 10))
    head = [
        draw(st.sampled_from(KINDS) | VALUES),
        *draw(good_party | st.tuples(VALUES, VALUES)),
        *draw(good_party | st.tuples(VALUES, VALUES)),
        draw(st.floats(allow_nan=True, allow_infinity=True) | VALUES),
    ]
    fields = draw(st.lists(VALUES, max_size=7))
    return msgpack.packb([*head, *fields], use_bin_type=True)


def _decode_or_wire_error(data: bytes) -> Envelope | None:
    try:
        envelope = decode(data)
    except WireError:
        return None
    assert envelope.kind == msgpack.unpackb(data, raw=False, strict_map_key=False)[0]
    return envelope


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames())
def test_structured_frames_decode_or_raise_wire_error_only(data: bytes) -> None:
    _ensure_protocols_loaded()
    _decode_or_wire_error(data)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 7), st.data())
def test_a_valid_message_with_one_field_replaced_decodes_or_raises_wire_error_only(position: int, data: st.DataObject) -> None:
    body = Sample(3, 0.5, np.ones((2, 3)), np.array([1, 2], dtype=np.int32), SERVER, ("a", "b"), b"x")
    frame = msgpack.unpackb(encode(USER, SERVER, 1.0, body), raw=False, use_list=True)
    frame[6 + position % 7] = data.draw(VALUES)
    envelope = _decode_or_wire_error(msgpack.packb(frame, use_bin_type=True))
    if envelope is not None:
        for name in ("rows",):
            assert np.all(np.isfinite(getattr(envelope.body, name)))  # NaN never passes a float field


@settings(max_examples=300, deadline=None)
@given(ndarray_payloads())
def test_any_ndarray_payload_in_a_valid_message_decodes_or_raises_wire_error_only(payload: msgpack.ExtType) -> None:
    frame = msgpack.unpackb(
        encode(USER, SERVER, 1.0, Sample(3, 0.5, np.ones((2, 3)), np.array([1], dtype=np.int32), SERVER, ())),
        raw=False, use_list=True,
    )
    frame[8] = payload
    _decode_or_wire_error(msgpack.packb(frame, use_bin_type=True))


def _peak_bytes(data: bytes) -> int:
    tracemalloc.start()
    try:
        _decode_or_wire_error(data)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# Linear in the input: msgpack's nested arrays cost some 170 bytes per input byte (a list object per
# level); nothing the input merely claims -- a length, a shape -- is ever allocated.
_PER_INPUT_BYTE, _OVERHEAD = 256, 64 * 1024


@pytest.mark.parametrize(
    "data",
    [
        b"\xdd\xff\xff\xff\xff",  # an array of 2^32 - 1 elements, and nothing after
        b"\xdb\xff\xff\xff\xff" + b"a" * 10,  # a string of 4 GiB
        b"\xc6\xff\xff\xff\xff" + b"a" * 10,  # bytes of 4 GiB
        b"\xc9\xff\xff\xff\xff\x01" + b"\x00" * 10,  # an ext of 4 GiB
        b"\xdf\xff\xff\xff\xff",  # a map of 2^32 - 1 pairs
        b"\x9f" * 2000,  # arrays nested 2,000 deep
        b"\x91" * 50_000,  # deeper than any recursion limit
        msgpack.packb(["fuzz.sample", 0, 3, 2, 0, 0.0, 1, 0.5,
                       msgpack.ExtType(1, bytes((9, 2)) + struct.pack("<II", 2**31, 2**31)), b"", [0, 0], []]),
        msgpack.packb(["fuzz.sample", 0, 3, 2, 0, 0.0, 1, 0.5,
                       msgpack.ExtType(1, bytes((9, 32)) + struct.pack("<32I", *[2**32 - 1] * 32)), b"", [0, 0], []]),
    ],
)
def test_lengths_and_shapes_a_frame_claims_are_never_allocated(data: bytes) -> None:
    with pytest.raises(WireError):
        decode(data)
    assert _peak_bytes(data) <= _PER_INPUT_BYTE * len(data) + _OVERHEAD


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames() | st.binary(max_size=2000))
def test_decoding_memory_stays_linear_in_the_input(data: bytes) -> None:
    _ensure_protocols_loaded()
    assert _peak_bytes(data) <= _PER_INPUT_BYTE * len(data) + _OVERHEAD


def test_a_message_over_the_size_limit_is_refused_before_it_is_unpacked() -> None:
    data = b"\x9f" * 2000
    tracemalloc.start()
    try:
        with pytest.raises(WireError, match="exceeds the limit of 100"):
            decode(data, max_bytes=100)
        # Bounded by the limit, not by the input: unpacking these 2,000 nested arrays would take ~340 KB.
        assert tracemalloc.get_traced_memory()[1] <= _PER_INPUT_BYTE * 100 + _OVERHEAD
    finally:
        tracemalloc.stop()
