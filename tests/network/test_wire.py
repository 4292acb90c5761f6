"""The wire: every supported dtype round-trips, arbitrary bytes fail only with WireError."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedrecsim.errors import WireError
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, decode, decode_trusted, encode, encode_many, message

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "bool"]
USER = Party(Role.USER, 7)


@message("test.anyarray")
@dataclass(frozen=True)
class AnyArray:
    values: Array("float64", allow_nan=True)


def _array_message(dtype: str) -> type:
    holder = dataclasses.make_dataclass(f"Holder_{dtype}", [("values", Array(dtype, allow_nan=True))], frozen=True)
    return message(f"test.array_{dtype}")(holder)


HOLDERS = {dtype: _array_message(dtype) for dtype in DTYPES}


@message("test.scalars")
@dataclass(frozen=True)
class Scalars:
    round: int
    weight: float
    flag: bool
    label: str
    blob: bytes
    who: Party
    many: tuple[int, ...]
    maybe: float | None


@message("test.vectors")
@dataclass(frozen=True)
class Vectors:
    items: Array("int64", ndim=1)
    rows: Array("float64", shape=(None, 3))

    def validate(self) -> None:
        if self.items.shape[0] != self.rows.shape[0]:
            raise ValueError("one row per item")


class Unregistered:
    pass


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_every_dtype_and_shape_round_trips(data: st.DataObject, dtype: str) -> None:
    array = data.draw(hnp.arrays(np.dtype(dtype), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
    raw = encode(USER, SERVER, 1.5, HOLDERS[dtype](array))
    envelope = decode(raw)
    got = envelope.body.values
    assert got.dtype == array.dtype and got.shape == array.shape
    np.testing.assert_array_equal(got, array)
    assert got.flags.writeable and not np.shares_memory(got, array)
    assert (envelope.src, envelope.dst, envelope.sent_at, envelope.kind) == (USER, SERVER, 1.5, f"test.array_{dtype}")


def _msgpack_reference(src: Party, dst: Party, sent_at: float, kind: str, fields: list[object]) -> bytes:
    """What msgpack's own packer makes of the envelope: arrays as ext type 1 (header, then raw elements)."""

    def packable(value: object) -> object:
        if isinstance(value, np.ndarray):
            little = value.astype(value.dtype.newbyteorder("<"))
            header = bytes((DTYPES.index(value.dtype.name), value.ndim)) + np.asarray(value.shape, "<u4").tobytes()
            return msgpack.ExtType(1, header + little.tobytes())
        if isinstance(value, Party):
            return [value.role.code, value.index]
        if isinstance(value, tuple):
            return [packable(element) for element in value]
        return value

    frame = [kind, src.role.code, src.index, dst.role.code, dst.index, sent_at, *map(packable, fields)]
    return msgpack.packb(frame, use_bin_type=True)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_encoding_is_byte_for_byte_what_msgpack_packs(data: st.DataObject, dtype: str) -> None:
    array = data.draw(hnp.arrays(np.dtype(dtype), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)))
    sender = Party(Role.USER, data.draw(st.integers(0, 2**32 - 1)))
    assert encode(sender, SERVER, 0.5, HOLDERS[dtype](array)) == _msgpack_reference(
        sender, SERVER, 0.5, f"test.array_{dtype}", [array]
    )


@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 5, 6, 7, 10, 249, 250, 40_000, 70_000])
def test_every_ext_size_class_is_packed_as_msgpack_packs_it(length: int) -> None:
    # int8 payloads of 2 + 4 + length bytes: fixext 8 and 16, ext 8, ext 16 and ext 32.
    array = np.arange(length, dtype=np.int8)
    assert encode(USER, SERVER, 0.0, HOLDERS["int8"](array)) == _msgpack_reference(USER, SERVER, 0.0, "test.array_int8", [array])
    scalars = Scalars(-3, 0.25, False, "x" * length, b"y" * length, USER, tuple(range(length % 40)), None)
    assert encode(USER, SERVER, 0.0, scalars) == _msgpack_reference(
        USER, SERVER, 0.0, "test.scalars", [getattr(scalars, field.name) for field in dataclasses.fields(scalars)]
    )


def test_big_endian_and_non_contiguous_arrays_travel_as_little_endian_values() -> None:
    array = np.arange(12, dtype=">i4").reshape(3, 4)[:, ::2]
    body = decode(encode(USER, SERVER, 0.0, HOLDERS["int32"](array))).body
    np.testing.assert_array_equal(body.values, array)


def test_scalar_fields_round_trip() -> None:
    message_in = Scalars(3, 0.25, True, "ü", b"\x00\x01", Party(Role.THIRD_PARTY, 0), (1, 2, 3), None)
    assert decode(encode(USER, SERVER, 2.0, message_in)).body == message_in


def test_reported_size_is_the_encoded_length() -> None:
    data = encode(USER, SERVER, 0.0, Vectors(np.arange(4), np.zeros((4, 3))))
    # 4 int64 + 12 float64 payload bytes dominate; the count is exactly what goes on the wire.
    assert len(data) == len(msgpack.packb(msgpack.unpackb(data, raw=False), use_bin_type=True))
    assert len(data) > 4 * 8 + 12 * 8


def test_unregistered_type_is_refused() -> None:
    with pytest.raises(WireError, match="not a registered message"):
        encode(USER, SERVER, 0.0, Unregistered())


def test_wrong_dtype_or_shape_is_refused_on_encode_and_decode() -> None:
    with pytest.raises(WireError, match="dtype"):
        encode(USER, SERVER, 0.0, Vectors(np.arange(4, dtype=np.int32), np.zeros((4, 3))))
    with pytest.raises(WireError, match="axis 1"):
        encode(USER, SERVER, 0.0, Vectors(np.arange(4), np.zeros((4, 2))))
    forged = msgpack.packb(["test.vectors", 0, 7, 2, 0, 0.0, msgpack.ExtType(1, b"\x03\x01\x02\x00\x00\x00" + b"\x00" * 16), msgpack.ExtType(1, b"\x09\x02\x02\x00\x00\x00\x02\x00\x00\x00" + b"\x00" * 32)])
    with pytest.raises(WireError, match="axis 1"):
        decode(forged)


def test_cross_field_validation_runs_on_decode() -> None:
    forged = msgpack.packb(["test.vectors", 0, 7, 2, 0, 0.0, msgpack.ExtType(1, b"\x03\x01\x01\x00\x00\x00" + b"\x00" * 8), msgpack.ExtType(1, b"\x09\x02\x02\x00\x00\x00\x03\x00\x00\x00" + b"\x00" * 48)])
    with pytest.raises(WireError, match="one row per item"):
        decode(forged)


def test_nan_is_refused_unless_the_field_allows_it() -> None:
    with pytest.raises(WireError, match="NaN"):
        encode(USER, SERVER, 0.0, Vectors(np.arange(1), np.array([[0.0, np.nan, 1.0]])))
    assert np.isnan(decode(encode(USER, SERVER, 0.0, AnyArray(np.array([np.nan])))).body.values[0])
    with pytest.raises(WireError, match="non-finite"):
        decode(msgpack.packb(["test.scalars", 0, 7, 2, 0, 0.0, 1, float("nan"), True, "", b"", [0, 0], [], None]))


@pytest.mark.parametrize(
    "frame, problem",
    [
        (["test.nope", 0, 7, 2, 0, 0.0], "unknown message kind"),
        (["test.scalars", 0, 7, 2, 0, 0.0, 1], "expected 8 fields"),
        (["test.scalars", 0, 7, 2, 0, 0.0, 1, 0.5, True, "", b"", [0, 0], [], None, "extra"], "expected 8 fields"),
        (["test.scalars", 0, 7, 2, 0, 0.0, "1", 0.5, True, "", b"", [0, 0], [], None], "expected int"),
        (["test.scalars", 0, 7, 2, 0, 0.0, 1, 0.5, 1, "", b"", [0, 0], [], None], "expected bool"),
        (["test.scalars", 0, 7, 2, 0, 0.0, 1, 0.5, True, "", b"", [99, 0], [], None], "unknown role code"),
        (["test.scalars", 9, 7, 2, 0, 0.0, 1, 0.5, True, "", b"", [0, 0], [], None], "unknown role code"),
        (["test.scalars", 0, -1, 2, 0, 0.0, 1, 0.5, True, "", b"", [0, 0], [], None], "malformed party"),
        (["test.scalars", 0, 7, 2, 0, "t", 1, 0.5, True, "", b"", [0, 0], [], None], "sent_at"),
        ({"kind": "test.scalars"}, "malformed envelope"),
    ],
)
def test_malformed_frames_name_the_problem(frame: object, problem: str) -> None:
    with pytest.raises(WireError, match=problem):
        decode(msgpack.packb(frame, use_bin_type=True))


def test_truncated_array_payload_is_refused() -> None:
    data = encode(USER, SERVER, 0.0, AnyArray(np.arange(10.0)))
    with pytest.raises(WireError):
        decode(data[:-3])


def test_oversized_messages_are_refused_both_ways() -> None:
    data = encode(USER, SERVER, 0.0, AnyArray(np.zeros(100)))
    with pytest.raises(WireError, match="exceeds the limit"):
        decode(data, max_bytes=100)
    with pytest.raises(WireError, match="exceeds the limit"):
        encode(USER, SERVER, 0.0, AnyArray(np.zeros(100)), max_bytes=100)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_wire_error(data: bytes) -> None:
    try:
        decode(data)
    except WireError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=40), st.integers(min_value=0, max_value=200))
def test_corrupted_valid_messages_raise_only_wire_error(noise: bytes, position: int) -> None:
    data = bytearray(encode(USER, SERVER, 0.0, Vectors(np.arange(3), np.ones((3, 3)))))
    position %= len(data)
    data[position : position + len(noise)] = noise
    try:
        decode(bytes(data))
    except WireError:
        pass


def test_encode_many_gives_each_destination_exactly_what_encode_gives() -> None:
    body = Scalars(3, 0.25, True, "x", b"\x00", Party(Role.THIRD_PARTY, 0), tuple(range(40)), 1.5)
    dsts = [Party(Role.USER, index) for index in (0, 7, 300, 70_000)] + [SERVER]
    assert encode_many(USER, dsts, 2.5, body) == [encode(USER, dst, 2.5, body) for dst in dsts]
    vectors = Vectors(np.arange(3), np.ones((3, 3)))
    assert encode_many(SERVER, dsts, 0.0, vectors) == [encode(SERVER, dst, 0.0, vectors) for dst in dsts]
    with pytest.raises(WireError, match="exceeds the limit"):
        encode_many(SERVER, dsts, 0.0, vectors, max_bytes=50)


# --------------------------------------------------------------------------- boundaries (issue 13)


@pytest.mark.parametrize(
    "frame",
    [
        b"\xd4\x01\x00",  # fixext 1: a 1-byte ndarray payload, shorter than the (dtype, ndim) header
        b"\xd5\x01\x00\x01",  # fixext 2: dtype and ndim = 1, but no room for the shape word
    ],
)
def test_a_frame_with_a_truncated_array_header_raises_wire_error_not_struct_error(frame: bytes) -> None:
    with pytest.raises(WireError, match="shorter than its"):
        decode(frame)


def test_a_message_of_exactly_the_size_limit_encodes_and_decodes() -> None:
    body = AnyArray(np.arange(100.0))
    data = encode(USER, SERVER, 0.0, body)
    limit = len(data)
    assert encode(USER, SERVER, 0.0, body, max_bytes=limit) == data
    assert encode_many(USER, [SERVER, USER], 0.0, body, max_bytes=limit)[0] == data
    np.testing.assert_array_equal(decode(data, max_bytes=limit).body.values, body.values)
    # One byte less is over the limit, both ways.
    with pytest.raises(WireError, match="exceeds the limit"):
        encode(USER, SERVER, 0.0, body, max_bytes=limit - 1)
    with pytest.raises(WireError, match="exceeds the limit"):
        decode(data, max_bytes=limit - 1)


def _scalars_frame(**overrides: object) -> list[object]:
    """A well-formed test.scalars frame, with some positions replaced."""
    frame: dict[str, object] = {
        "kind": "test.scalars", "src_role": 0, "src_index": 7, "dst_role": 2, "dst_index": 0, "sent_at": 0.0,
        "round": 1, "weight": 0.5, "flag": True, "label": "", "blob": b"", "who": [0, 0], "many": [], "maybe": None,
    }
    frame.update(overrides)
    return list(frame.values())


def test_the_scalars_frame_helper_decodes_when_unchanged() -> None:
    assert decode(msgpack.packb(_scalars_frame(), use_bin_type=True)).body.round == 1


@pytest.mark.parametrize(
    "overrides, problem",
    [
        ({"round": True}, "expected int, got bool"),
        ({"round": False}, "expected int, got bool"),
        ({"many": [1, True]}, "expected int, got bool"),
        ({"src_index": True}, "malformed party"),
        ({"who": [0, True]}, "malformed party"),
    ],
)
def test_a_boolean_is_refused_where_an_int_is_declared(overrides: dict[str, object], problem: str) -> None:
    with pytest.raises(WireError, match=problem):
        decode(msgpack.packb(_scalars_frame(**overrides), use_bin_type=True))


def test_a_boolean_int_field_is_refused_on_encode() -> None:
    with pytest.raises(WireError, match="expected int, got bool"):
        encode(USER, SERVER, 0.0, Scalars(True, 0.5, True, "", b"", USER, (), None))


@pytest.mark.parametrize("sent_at", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_sent_at_is_refused(sent_at: float) -> None:
    with pytest.raises(WireError, match="sent_at"):
        decode(msgpack.packb(_scalars_frame(sent_at=sent_at), use_bin_type=True))


def test_finite_values_whose_sum_overflows_encode_and_decode_without_a_warning() -> None:
    rows = np.array([[1e308, 1e308, -0.0], [1e308, 1.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "overflow encountered in reduce" either
        data = encode(USER, SERVER, 0.0, Vectors(np.arange(2), rows))
        np.testing.assert_array_equal(decode(data).body.rows, rows)
    # An element that really is infinite is still refused, whatever the sum does.
    with pytest.raises(WireError, match="NaN or Inf"):
        encode(USER, SERVER, 0.0, Vectors(np.arange(1), np.array([[1e308, 1e308, np.inf]])))


@pytest.mark.parametrize("decoder", [decode, decode_trusted])
def test_a_decoded_envelope_names_its_addressee_as_dst_and_its_sender_as_src(decoder) -> None:  # type: ignore[no-untyped-def]
    addressee = Party(Role.THIRD_PARTY, 3)
    envelope = decoder(encode(USER, addressee, 4.5, Scalars(1, 0.5, True, "", b"", SERVER, (), None)))
    assert (envelope.src, envelope.dst, envelope.sent_at) == (USER, addressee, 4.5)
    for dst, data in zip([SERVER, addressee], encode_many(USER, [SERVER, addressee], 1.0, AnyArray(np.zeros(2)))):
        assert decoder(data).dst == dst and decoder(data).src == USER
