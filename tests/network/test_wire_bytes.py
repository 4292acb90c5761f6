"""The wire's bytes at every msgpack size boundary, and the exact errors of malformed input (issue 13).

The encoder keeps caches of packed headers, ints and parties; every test here starts from empty caches
(`cold`), so the bytes it checks are computed, then computed again from the caches, and both must be
what msgpack's own packer gives.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import msgpack
import numpy as np
import pytest

from fedrecsim.errors import WireError
from fedrecsim.network import wire
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, decode, decode_trusted, encode, encode_many, message
from wire_reference import DTYPES
from wire_reference import reference as _reference

USER = Party(Role.USER, 7)


@pytest.fixture(autouse=True)
def cold(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("_ARRAY_HEADERS", "_PACKED_INTS", "_PARTIES", "_PARTY_BYTES"):
        monkeypatch.setattr(wire, name, {})


def _register() -> dict[str, type]:
    @message("test.bytes_any")
    @dataclass(frozen=True)
    class Any:
        values: Array("int8")

    @message("test.bytes_ints")
    @dataclass(frozen=True)
    class Ints:
        values: tuple[int, ...]

    @message("test.bytes_scalar")
    @dataclass(frozen=True)
    class Scalar:
        n: int
        x: float

    @message("test.bytes_wide")
    @dataclass(frozen=True)
    class Wide:
        a: int
        b: int
        c: int
        d: int
        e: int
        f: int
        g: int
        h: int
        i: int
        j: int

    @message("test.bytes_guarded")
    @dataclass(frozen=True)
    class Guarded:
        n: int

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("n must be >= 0")

        def validate(self) -> None:
            if self.n == 13:
                raise TypeError("unlucky")

    classes = {cls.__name__: cls for cls in (Any, Ints, Scalar, Wide, Guarded)}
    for dtype in DTYPES:
        holder = dataclasses.make_dataclass(f"Bytes_{dtype}", [("values", Array(dtype))], frozen=True)
        holder.__module__ = __name__
        classes[dtype] = message(f"test.bytes_{dtype}")(holder)
    return classes


def _exactly(text: str) -> str:
    return f"^{re.escape(text)}$"


def _check_twice(body: object, src: Party = USER, dst: Party = SERVER) -> bytes:
    """Encode twice (computed, then from the caches); both must be msgpack's bytes and decode back."""
    want = _reference(src, dst, 0.5, body)
    for _ in range(2):
        assert encode(src, dst, 0.5, body) == want
        assert [bytes(data) for data in encode_many(src, [dst, dst], 0.5, body)] == [want, want]
        for decoder in (decode, decode_trusted):
            envelope = decoder(want)
            assert (envelope.src, envelope.dst) == (src, dst)
    return want


INT_BOUNDARIES = [
    -(2**63), -(2**31) - 1, -(2**31), -32769, -32768, -32767, -129, -128, -33, -32, -1, 0, 1, 127, 128, 255, 256,
    65535, 65536, 2**20 - 1, 2**20, 2**31, 2**32 - 1, 2**32, 2**64 - 1,
]


def test_ints_at_every_msgpack_boundary_are_packed_as_msgpack_packs_them() -> None:
    classes = _register()
    for value in INT_BOUNDARIES:
        body = classes["Scalar"](value, 0.0)
        _check_twice(body)
        assert decode(encode(USER, SERVER, 0.0, body)).body.n == value
    # numpy integers are ints on the wire; a second, cached, value never leaks into another.
    assert encode(USER, SERVER, 0.0, classes["Scalar"](np.int64(300), 0.0)) == encode(USER, SERVER, 0.0, classes["Scalar"](300, 0.0))
    assert encode(USER, SERVER, 0.0, classes["Scalar"](np.uint8(7), 0.0)) == encode(USER, SERVER, 0.0, classes["Scalar"](7, 0.0))


def test_a_float_field_takes_ints_and_numpy_numbers_as_floats_but_never_a_bool() -> None:
    classes = _register()
    for value in (3, np.int32(-2), np.float32(0.5), 2.5):
        data = encode(USER, SERVER, 0.0, classes["Scalar"](1, value))
        assert data == _reference(USER, SERVER, 0.0, classes["Scalar"](1, float(value)))
    for value in (True, np.bool_(False)):
        with pytest.raises(WireError, match=_exactly(f"test.bytes_scalar.x: expected float, got {type(value).__name__}")):
            encode(USER, SERVER, 0.0, classes["Scalar"](1, value))
    with pytest.raises(WireError, match=_exactly("test.bytes_scalar.n: expected int, got float")):
        encode(USER, SERVER, 0.0, classes["Scalar"](1.0, 0.0))


@pytest.mark.parametrize("length", [0, 15, 16, 17, 65535, 65536])
def test_tuples_at_the_array_header_boundaries_are_packed_as_msgpack_packs_them(length: int) -> None:
    classes = _register()
    body = classes["Ints"](tuple(range(length)))
    data = _check_twice(body)
    assert decode(data).body.values == body.values


def test_an_envelope_of_sixteen_elements_takes_the_array16_header() -> None:
    classes = _register()
    body = classes["Wide"](*range(10))
    assert _check_twice(body)[:3] == b"\xdc\x00\x10"
    assert decode(encode(USER, SERVER, 0.0, body)).body == body


@pytest.mark.parametrize(
    "shape",
    [(), (0,), (1,), (2,), (10,), (249,), (250,), (65529,), (65530,), (70_000,), (3, 4), (2, 0, 3), (1,) * 32],
)
def test_arrays_in_every_ext_size_class_are_packed_as_msgpack_packs_them(shape: tuple[int, ...]) -> None:
    # int8 payloads of 2 + 4 * ndim + count bytes: fixext 8 and 16, ext 8, ext 16 and ext 32 and their edges.
    classes = _register()
    values = (np.arange(int(np.prod(shape))) % 100).astype(np.int8).reshape(shape)
    body = classes["Any"](values)
    data = _check_twice(body)
    for decoder in (decode, decode_trusted):
        got = decoder(data).body.values
        assert got.dtype == np.int8 and got.shape == shape
        np.testing.assert_array_equal(got, values)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (3000,)])
def test_each_dtype_travels_little_endian_whatever_its_byte_order_and_layout(dtype: str, shape: tuple[int, ...]) -> None:
    classes = _register()
    native = (np.arange(int(np.prod(shape)) * 2) % 7).astype(dtype).reshape(*shape[:-1], -1) if shape else np.array(3).astype(dtype)
    values = native[..., ::2] if shape else native  # not contiguous when it has an axis
    for variant in (values, values.astype(np.dtype(dtype).newbyteorder(">"))):
        body = classes[dtype](variant)
        data = encode(USER, SERVER, 0.0, body)
        assert data == _reference(USER, SERVER, 0.0, classes[dtype](values.copy(order="C")))
        for decoder in (decode, decode_trusted):
            got = decoder(data).body.values
            assert got.dtype == np.dtype(dtype) and got.dtype.isnative and got.shape == values.shape
            np.testing.assert_array_equal(got, values)
            # Aligned although the elements sit 2 + 4 ndim bytes into their ext payload (`wire._copied_array`).
            assert got.flags.c_contiguous and got.flags.aligned
            # A strictly decoded array is the receiver's own; a trusted one is read-only.
            assert got.flags.writeable == (decoder is decode)


def test_an_array_of_more_than_32_dimensions_cannot_be_encoded() -> None:
    classes = _register()
    with pytest.raises(WireError, match=_exactly("test.bytes_any.values: cannot encode an array of 33 dimensions (at most 32)")):
        encode(USER, SERVER, 0.0, classes["Any"](np.zeros((1,) * 33, np.int8)))


def test_parties_of_every_index_size_are_packed_as_msgpack_packs_them() -> None:
    classes = _register()
    body = classes["Scalar"](0, 0.0)
    for index in (0, 127, 128, 65535, 65536, 2**32 - 1):
        for role in Role:
            src, dst = Party(role, index), Party(Role.USER, index)
            _check_twice(body, src, dst)
            for decoder in (decode, decode_trusted):
                envelope = decoder(encode(src, dst, 0.0, body))
                assert (envelope.src, envelope.dst) == (src, dst) and type(envelope.src) is Party


# ------------------------------------------------------------------ size limits


def test_size_limit_messages_state_size_and_limit() -> None:
    classes = _register()
    body = classes["Any"](np.zeros(100, np.int8))
    size = len(encode(USER, SERVER, 0.0, body))
    with pytest.raises(WireError, match=_exactly(f"test.bytes_any: encoded message of {size} bytes exceeds the limit of {size - 1}")):
        encode(USER, SERVER, 0.0, body, max_bytes=size - 1)
    with pytest.raises(WireError, match=_exactly(f"test.bytes_any: encoded message of {size} bytes exceeds the limit of {size - 1}")):
        encode_many(USER, [SERVER], 0.0, body, max_bytes=size - 1)
    # encode_many checks its largest message: a longer destination index makes a longer envelope.
    far = Party(Role.USER, 70_000)
    assert len(encode(USER, far, 0.0, body)) == size + 4
    with pytest.raises(WireError, match=f"of {size + 4} bytes exceeds the limit of {size}$"):
        encode_many(USER, [SERVER, far], 0.0, body, max_bytes=size)
    assert encode_many(USER, [SERVER, far], 0.0, body, max_bytes=size + 4)[1] == encode(USER, far, 0.0, body)
    assert encode_many(USER, [], 0.0, body, max_bytes=1) == []
    data = encode(USER, SERVER, 0.0, body)
    with pytest.raises(WireError, match=_exactly(f"message of {size} bytes exceeds the limit of {size - 1}")):
        decode(data, max_bytes=size - 1)
    assert decode(data, max_bytes=size).body.values.shape == (100,)


def test_the_default_limit_is_256_mib() -> None:
    assert wire.DEFAULT_MAX_MESSAGE_BYTES == 256 * 1024 * 1024


# ------------------------------------------------------------------ malformed input


def test_only_bytes_like_input_is_decoded() -> None:
    classes = _register()
    data = encode(USER, SERVER, 0.0, classes["Scalar"](1, 2.0))
    assert decode(bytearray(data)).body == decode(memoryview(data)).body == classes["Scalar"](1, 2.0)
    with pytest.raises(WireError, match=_exactly("expected bytes, got str")):
        decode(data.decode("latin-1"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xc1", "malformed message bytes: "),
        (msgpack.packb({1: 2}), "malformed message bytes: int is not allowed for map key when strict_map_key=True"),
        (b"\x92\x01", "malformed message bytes: "),  # truncated
        (b"\x91\x01\x02", "malformed message bytes: "),  # extra data
        (msgpack.packb(msgpack.ExtType(2, b"\x00\x00")), "unknown msgpack ext type 2"),
        (msgpack.packb(msgpack.ExtType(1, b"\x0b\x00")), "ndarray payload has unknown dtype code 11"),
        (msgpack.packb(msgpack.ExtType(1, b"\x00\x21" + b"\x01\x00\x00\x00" * 33 + b"\x00")), "ndarray payload has 33 dimensions (at most 32)"),
        (msgpack.packb(msgpack.ExtType(1, b"\x00")), "ndarray payload shorter than its header"),
        (msgpack.packb(msgpack.ExtType(1, b"\x00\x02\x01\x00\x00\x00")), "ndarray payload shorter than its shape header"),
        (msgpack.packb(msgpack.ExtType(1, b"\x09\x01\x02\x00\x00\x00" + b"\x00" * 15)),
         "ndarray payload holds 15 bytes, shape (2,) of float64 needs 16"),
        (msgpack.packb(msgpack.ExtType(1, b"\x01\x02\x02\x00\x00\x00\x03\x00\x00\x00" + b"\x00" * 14)),
         "ndarray payload holds 14 bytes, shape (2, 3) of int16 needs 12"),
        (msgpack.packb({"a": 2}), "malformed envelope: expected an array [kind, src, dst, sent_at, fields...]"),
        (msgpack.packb(["test.bytes_scalar", 0, 1, 2, 0]), "malformed envelope: expected an array [kind, src, dst, sent_at, fields...]"),
        (msgpack.packb([5, 0, 1, 2, 0, 0.0]), "unknown message kind 5"),
        (msgpack.packb([[1], 0, 1, 2, 0, 0.0]), "unknown message kind [1]"),  # unhashable: never looked up
        (msgpack.packb([b"test.bytes_scalar", 0, 1, 2, 0, 0.0], use_bin_type=True), "unknown message kind b'test.bytes_scalar'"),
        (msgpack.packb(["test.bytes_scalar", 0, -1, 2, 0, 0.0, 1, 0.5]), "test.bytes_scalar src: malformed party (0, -1)"),
        (msgpack.packb(["test.bytes_scalar", 0, 1, 9, 0, 0.0, 1, 0.5]), "test.bytes_scalar dst: unknown role code 9"),
        (msgpack.packb(["test.bytes_scalar", 0, 1, 2, 0.5, 0.0, 1, 0.5]), "test.bytes_scalar dst: malformed party (2, 0.5)"),
        (msgpack.packb(["test.bytes_scalar", 0, 1, 2, 0, 0, 1, 0.5]), "test.bytes_scalar: malformed sent_at 0"),
        (msgpack.packb(["test.bytes_scalar", 0, 1, 2, 0, float("inf"), 1, 0.5]), "test.bytes_scalar: malformed sent_at inf"),
        (msgpack.packb(["test.bytes_scalar", 0, 1, 2, 0, 0.0, 1]), "test.bytes_scalar: expected 2 fields ('n', 'x'), got 1"),
        (msgpack.packb(["test.bytes_guarded", 0, 1, 2, 0, 0.0, -1]), "test.bytes_guarded: n must be >= 0"),
        (msgpack.packb(["test.bytes_guarded", 0, 1, 2, 0, 0.0, 13]), "test.bytes_guarded: unlucky"),
    ],
)
def test_malformed_bytes_raise_a_wire_error_saying_what_is_wrong(data: bytes, problem: str) -> None:
    _register()
    pattern = f"^{re.escape(problem)}" + ("" if problem.endswith(": ") else "$")
    with pytest.raises(WireError, match=pattern):
        decode(data)


def test_a_validate_that_raises_type_error_is_not_a_wire_error_on_encode() -> None:
    # Only ValueError from validate is the message's own refusal on encode (documented); decode maps both.
    classes = _register()
    with pytest.raises(TypeError, match="unlucky"):
        encode(USER, SERVER, 0.0, classes["Guarded"](13))
    assert decode(encode(USER, SERVER, 0.0, classes["Guarded"](12))).body.n == 12


def test_sent_at_is_packed_as_a_float64() -> None:
    classes = _register()
    body = classes["Scalar"](1, 0.0)
    data = encode(USER, SERVER, 3, body)
    assert data == _reference(USER, SERVER, 3.0, body)
    assert decode(data).sent_at == 3.0 and type(decode(data).sent_at) is float


def test_the_byte_order_converting_path_gives_the_same_bytes_and_arrays(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # On a big-endian machine no dtype is native little-endian: every array is converted on the way out and
    # in. Simulate it here; the bytes and the decoded arrays must not change.
    arrays = [(dtype, np.asarray(3).astype(dtype)) for dtype in DTYPES] + [
        (dtype, (np.arange(24) % 5).astype(dtype).reshape(shape)) for dtype in DTYPES for shape in ((24,), (2, 3, 4))
    ]
    classes = _register()
    expected = [encode(USER, SERVER, 0.0, classes[dtype](array)) for dtype, array in arrays]
    monkeypatch.setattr(wire, "_NATIVE_LE", (None,) * len(DTYPES))
    monkeypatch.setattr(wire, "_ARRAY_HEADERS", {})
    classes = _register()  # a message's compiled encoder takes the native dtypes when it is registered
    for (dtype, array), want in zip(arrays, expected):
        assert encode(USER, SERVER, 0.0, classes[dtype](array)) == want
        for decoder in (decode, decode_trusted):
            got = decoder(want).body.values
            assert got.dtype == array.dtype and got.dtype.isnative and got.shape == array.shape
            np.testing.assert_array_equal(got, array)
            assert got.flags.writeable == (decoder is decode)


@pytest.mark.parametrize(
    ("src", "dst", "problem"),
    [((9, 0), (2, 0), "src: unknown role code 9"), ((0, 1), (8, 3), "dst: unknown role code 8"),
     ((0, -1), (2, 0), "src: malformed party (0, -1)"), ((0, 1), (2, -5), "dst: malformed party (2, -5)")],
)
def test_decode_trusted_is_no_validator_but_a_malformed_envelope_party_is_still_a_wire_error(src, dst, problem: str) -> None:  # type: ignore[no-untyped-def]
    _register()
    data = msgpack.packb(["test.bytes_scalar", *src, *dst, 0.0, 1, 0.5])
    with pytest.raises(WireError, match=_exactly(problem)):
        decode_trusted(data)


def test_a_one_dimensional_field_packs_each_length_s_own_header_from_its_cache() -> None:
    """A 1-d field's packed headers are cached by length, a 2-d one's by shape: every length and shape,
    first computed and then from the caches, in any order, gives msgpack's own bytes."""

    @message("test.bytes_lengths")
    @dataclass(frozen=True)
    class Lengths:
        items: Array("int32", ndim=1)
        rows: Array("uint32", ndim=2)

    # The same lengths again, with rows of another width: a 2-d cache keyed by length alone would fail.
    for length, width in ((0, 2), (1, 2), (3, 2), (300, 2), (1, 5), (0, 5), (3, 5), (64, 1), (300, 1)):
        body = Lengths(np.arange(length, dtype=np.int32), np.ones((length, width), dtype=np.uint32))
        _check_twice(body)
        assert decode(encode(USER, SERVER, 0.5, body)).body.items.tolist() == list(range(length))
