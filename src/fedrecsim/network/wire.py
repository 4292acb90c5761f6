"""The wire: the one place where messages become bytes and bytes become messages.

A message is a frozen dataclass registered under a kind tag with `message`. Its fields are declared with
ordinary annotations; the supported field types are ``int``, ``float``, ``bool``, ``str``, ``bytes``,
`Party`, numpy arrays declared with `Array` (dtype, optional ndim/shape, NaN policy), ``tuple[T, ...]``
of a supported type, and ``T | None``.

An envelope is encoded as one msgpack array::

    [kind, src_role, src_index, dst_role, dst_index, sent_at, field_1, ..., field_n]

Fields travel positionally in declaration order. An ndarray travels as msgpack ext type 1 whose payload
is a fixed header -- ``uint8`` dtype code, ``uint8`` ndim, ``ndim`` x ``uint32`` shape, all little-endian
-- followed by the raw little-endian element bytes. Nothing else is ever pickled or guessed. The encoder
writes the msgpack headers itself and joins them with the arrays' own buffers, so each element of a
contiguous array is copied once; the bytes are exactly those msgpack's packer gives for the same array of
values. Each message kind gets its own encoder, compiled when it is registered (`_compile_encoders`):
every field's checks and encoding in one function.

Decoding is strict: arbitrary bytes, an unknown kind, a missing or extra field, a wrong type, dtype,
ndim or shape, and NaN/Inf (unless the field allows it) all raise `WireError`, and nothing else does.
The byte count of a message is ``len(encode(...))``: the ledger counts exactly what this module emits.

Alignment. A message whose one array field holds `SHARED_BODY_BYTES` or more (FedVAE's gradient: 18 MB)
is encoded after a few padding bytes that put the array's elements at a multiple of 8 -- aligned for every
dtype here -- and `encode` gives a read-only memoryview of the message's bytes past the padding: the same
bytes, as immutable as a bytes object (a view of one), but its receiver reads the array aligned, in place
(where a bytes object's elements start depends on its allocation, and the array's offset in the message on
the lengths of the envelope before it: the sender's index, the round). A checkpoint saves such a view (a message
in flight) as a bytes object of its bytes (`fedrecsim.checkpoint`).

`decode_trusted`, for bytes this process encoded, skips the checks and gives read-only arrays -- views of
the received bytes where those are aligned, else one aligned copy (or, for a field declared
``aligned=False``, a view of the bytes either way) -- so that no receiver can change what another party
holds; `decode` gives arrays the receiver owns. It does not go through msgpack: each kind
gets its own reader too (`_compile_reader`), which knows the kind's fields, their order and their
arrays' dtypes and reads the bytes in place.

Broadcasts. `encode_many` gives each destination its own bytes, except when the encoded body (``sent_at``
and the fields) is `SHARED_BODY_BYTES` or more: then each destination's message is a `Broadcast`, its own
envelope head and one `SharedBody` that every copy holds -- the same bytes, counted in full for each
copy, but never copied per destination. The body is decoded once, on its first delivery, and every
receiver gets that one body, whose arrays are read-only (so no receiver can change another's). Its
bytes are held after a few padding bytes that put its largest array at an aligned address, so that
array is decoded as a view, not copied.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import struct
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import msgpack
import numpy as np
import xxhash

from ..errors import WireError
from .party import Party, Role

#: Messages larger than this are refused by both encoder and decoder (a run can raise it).
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024

_NDARRAY_EXT = 1
_HEADER = struct.Struct("<BB")
_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(name).newbyteorder("<")
    for name in (
        "int8", "int16", "int32", "int64",
        "uint8", "uint16", "uint32", "uint64",
        "float32", "float64", "bool",
    )
)
_DTYPE_CODES = {dtype: code for code, dtype in enumerate(_DTYPES)}
_NATIVE = tuple(dtype.newbyteorder("=") for dtype in _DTYPES)
# The dtype objects numpy gives native arrays, when native order is the wire's (little-endian); None on a
# big-endian machine, where every array goes through the converting path.
_NATIVE_LE = tuple(np.dtype(dtype.name) if sys.byteorder == "little" else None for dtype in _DTYPES)
_SHAPE_STRUCTS = tuple(struct.Struct(f"<{ndim}I") for ndim in range(33))
_DTYPE_BY_NAME = {dtype.name: dtype for dtype in _DTYPES}
_ENVELOPE_HEADER_LEN = 6

#: A broadcast whose encoded body is at least this many bytes shares it between its copies (`Broadcast`).
SHARED_BODY_BYTES = 1 << 16


@dataclass(frozen=True)
class ArraySpec:
    """What an ndarray field accepts.

    Attributes:
        dtype: the exact dtype name (``"float64"``, ``"uint64"``, ...); no implicit casting on decode.
        ndim: the required number of dimensions, or None for any.
        shape: per-dimension required lengths (None = any length); implies ndim.
        allow_nan: whether NaN/Inf may appear (float dtypes only).
        aligned: whether `decode_trusted` must give the array aligned. True: where its elements' offset
            in the message is not a multiple of their size, they are copied once (numpy's matmul gives a
            misaligned operand to no BLAS routine: it runs its own loop, about 8 times slower). False: a
            read-only view of the message's bytes whether aligned or not, never a copy -- for an array
            its receivers only stream through (elementwise ufuncs, which buffer misaligned data in small
            chunks; `numpy.vdot`, which hands it to BLAS). The bytes are the same either way, and `decode`
            always gives an aligned array of the receiver's own.
    """

    dtype: str
    ndim: int | None = None
    shape: tuple[int | None, ...] | None = None
    allow_nan: bool = False
    aligned: bool = True

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPE_BY_NAME:
            raise ValueError(f"unsupported array dtype {self.dtype!r}; supported: {sorted(_DTYPE_BY_NAME)}")
        if self.shape is not None:
            if self.ndim is not None and self.ndim != len(self.shape):
                raise ValueError(f"ndim {self.ndim} contradicts shape {self.shape}")
            object.__setattr__(self, "ndim", len(self.shape))


def Array(  # noqa: N802 -- reads as a type in annotations
    dtype: str,
    ndim: int | None = None,
    shape: tuple[int | None, ...] | None = None,
    allow_nan: bool = False,
    aligned: bool = True,
) -> Any:
    """Annotation for an ndarray field, e.g. ``vectors: Array("float64", ndim=2)`` (`ArraySpec`)."""
    return Annotated[np.ndarray, ArraySpec(dtype, ndim, shape, allow_nan, aligned)]


# --------------------------------------------------------------------------- ndarray ext payload


def _array_chunks(array: np.ndarray, chunks: list[Any]) -> None:
    """Append the msgpack ext-type encoding of ``array`` to ``chunks``: a header, then the raw elements.

    The bytes are those ``msgpack.packb(ExtType(1, header + elements))`` gives, without building the
    payload: the elements go in as the array itself (converted first only when its dtype is not the wire's
    little-endian one), whose buffer the final join (`_joined`) copies once.
    """
    code = _DTYPE_CODES.get(array.dtype)
    if code is None and array.dtype.byteorder == ">":
        code = _DTYPE_CODES.get(array.dtype.newbyteorder("<"))
    if code is None:
        raise WireError(f"cannot encode an array of dtype {array.dtype}; supported: {sorted(_DTYPE_BY_NAME)}")
    key = (code, array.shape)
    chunks.append(_ARRAY_HEADERS.get(key) or _array_ext_header(code, array, _ARRAY_HEADERS, key))
    chunks.append(array if array.dtype is _NATIVE_LE[code] else np.ascontiguousarray(array, dtype=_DTYPES[code]))


def _array_ext_header(code: int, array: np.ndarray, cache: dict[Any, bytes], key: Any) -> bytes:
    """The ext header and payload header of ``array`` as dtype ``code``, kept as ``cache[key]`` while the
    cache has room."""
    ndim = array.ndim
    if ndim >= len(_SHAPE_STRUCTS):
        raise WireError(f"cannot encode an array of {ndim} dimensions (at most {len(_SHAPE_STRUCTS) - 1})")
    shape = array.shape
    size = _HEADER.size + 4 * ndim + _DTYPES[code].itemsize * math.prod(shape)
    header = _ext_header(size) + _HEADER.pack(code, ndim) + _SHAPE_STRUCTS[ndim].pack(*shape)
    if len(cache) < _HEADER_CACHE_LIMIT:
        cache[key] = header
    return header


# Packed ext headers by (dtype code, shape): a run sends the same few shapes millions of times. (A compiled
# encoder keeps one such cache per array field, by shape alone -- by length for a 1-d field.)
_ARRAY_HEADERS: dict[tuple[int, tuple[int, ...]], bytes] = {}
_HEADER_CACHE_LIMIT = 1 << 16


def _joined(chunks: list[Any]) -> bytes:
    """``b"".join(chunks)``, where the chunks are bytes and arrays of the wire's dtypes in native (= little-
    endian) order: the join takes a C-contiguous array's buffer as it is, and refuses (TypeError) any
    other layout, which is then made contiguous first. Each element is copied once, or twice when strided."""
    try:
        return _join(chunks)
    except TypeError:
        return _join([np.ascontiguousarray(chunk) if isinstance(chunk, np.ndarray) else chunk for chunk in chunks])


_join = b"".join


def _ext_header(size: int) -> bytes:
    """msgpack's header of an ext-type-1 value with a ``size``-byte payload (its smallest form, as packb)."""
    fixed = _FIXEXT.get(size)
    if fixed is not None:
        return fixed
    if size < 1 << 8:
        return _EXT8.pack(0xC7, size, _NDARRAY_EXT)
    if size < 1 << 16:
        return _EXT16.pack(0xC8, size, _NDARRAY_EXT)
    return _EXT32.pack(0xC9, size, _NDARRAY_EXT)


_FIXEXT = {size: bytes((marker, _NDARRAY_EXT)) for size, marker in ((1, 0xD4), (2, 0xD5), (4, 0xD6), (8, 0xD7), (16, 0xD8))}
_EXT8, _EXT16, _EXT32 = struct.Struct(">BBB"), struct.Struct(">BHB"), struct.Struct(">BIB")


def _unpack_array(payload: bytes) -> np.ndarray:
    if len(payload) < _HEADER.size:
        raise WireError("ndarray payload shorter than its header")
    code, ndim = _HEADER.unpack_from(payload)
    if code >= len(_DTYPES):
        raise WireError(f"ndarray payload has unknown dtype code {code}")
    if ndim >= len(_SHAPE_STRUCTS):
        raise WireError(f"ndarray payload has {ndim} dimensions (at most {len(_SHAPE_STRUCTS) - 1})")
    dtype = _DTYPES[code]
    start = _HEADER.size + 4 * ndim
    if len(payload) < start:
        raise WireError("ndarray payload shorter than its shape header")
    shape = _SHAPE_STRUCTS[ndim].unpack_from(payload, _HEADER.size)
    count = math.prod(shape)
    if count * dtype.itemsize != len(payload) - start:
        raise WireError(
            f"ndarray payload holds {len(payload) - start} bytes, shape {shape} of {dtype.name} needs "
            f"{count * dtype.itemsize}"
        )
    return _copied_array(payload, code, ndim, shape)


def _copied_array(payload: bytes, code: int, ndim: int, shape: tuple[int, ...]) -> np.ndarray:
    """The elements after a well-formed header as a private, writable, aligned, native-order copy: the
    receiver never shares memory with the wire buffer.

    Aligned, because the elements start ``2 + 4 ndim`` bytes into the payload, never a multiple of a
    4- or 8-byte element's size: a view of them (or of a copy of the whole payload) would be a misaligned
    array, which numpy copies again before every matrix product and buffers through every ufunc.
    """
    native = _NATIVE_LE[code]
    if native is not None:
        return np.frombuffer(payload, native, -1, _HEADER.size + 4 * ndim).reshape(shape).copy()
    array = np.frombuffer(payload, dtype=_DTYPES[code], offset=_HEADER.size + 4 * ndim)
    return array.reshape(shape).astype(_NATIVE[code])


def _ext_hook(code: int, payload: bytes) -> Any:
    if code != _NDARRAY_EXT:
        raise WireError(f"unknown msgpack ext type {code}")
    return _unpack_array(payload)


_frombuffer = np.frombuffer
_ndarray = np.ndarray
# CPython allocates objects 16-byte aligned and a bytes object's elements start 32 bytes into it: an array
# over a bytes object, at an offset that is a multiple of the element's size, is aligned for every dtype
# here. Checked once, in case an interpreter differs; where it does not hold, the compiled readers leave
# every array to `_read`, which asks numpy.
_BYTES_ALIGNED = all(np.frombuffer(bytes(8 * size)[8:], np.float64).flags.aligned for size in (2, 64, 1 << 12, 1 << 17))


# --------------------------------------------------------------------------- trusted in-place reading
#
# `decode_trusted` does not go through msgpack: msgpack copies every ext payload out into a bytes object of
# its own, which the array must then copy again to be aligned, and calls a Python hook per array. Each
# message kind's compiled reader (`_compile_reader`) reads its fields in place, the common forms inline,
# and leaves every other value to `_read`. Both make each array a read-only view of the message's own
# buffer where the elements happen to be aligned there, and one aligned copy where they are not (a view
# either way for a field declared ``aligned=False``: `ArraySpec.aligned`). They read
# only what this module's encoder writes (no maps, no other ext types) and check nothing: they are for
# bytes `encode` produced in this process.


def _read(data: Any, pos: int) -> tuple[Any, int]:
    """The value msgpack-encoded at ``data[pos:]`` and the position just after it."""
    marker = data[pos]
    if marker < 0x80:
        return marker, pos + 1
    if marker >= 0xE0:
        return marker - 0x100, pos + 1
    if 0x90 <= marker <= 0x9F:
        return _read_list(data, pos + 1, marker & 0x0F)
    if 0xA0 <= marker <= 0xBF:
        end = pos + 1 + (marker & 0x1F)
        return str(data[pos + 1:end], "utf-8"), end
    if marker in _FIXED_READS:
        value_struct = _FIXED_READS[marker]
        return value_struct.unpack_from(data, pos + 1)[0], pos + 1 + value_struct.size
    if marker in _CONSTANTS:
        return _CONSTANTS[marker], pos + 1
    if marker in _FIXEXT_SIZES:
        start = pos + 2
        return _array_in_place(data, start, start + _FIXEXT_SIZES[marker]), start + _FIXEXT_SIZES[marker]
    if marker not in _SIZED_READS:
        raise WireError(f"no value this encoder writes starts with byte 0x{marker:02x} (at {pos})")
    family, length_struct = _SIZED_READS[marker]
    length = length_struct.unpack_from(data, pos + 1)[0]
    start = pos + 1 + length_struct.size
    if family == "array":
        return _read_list(data, start, length)
    if family == "ext":
        start += 1  # the ext type byte: always _NDARRAY_EXT
        return _array_in_place(data, start, start + length), start + length
    if family == "str":
        return str(data[start:start + length], "utf-8"), start + length
    return bytes(data[start:start + length]), start + length


def _read_list(data: Any, pos: int, length: int) -> tuple[list[Any], int]:
    values = []
    for _ in range(length):
        value, pos = _read(data, pos)
        values.append(value)
    return values, pos


def _array_in_place(data: Any, start: int, end: int, aligned: bool = True) -> np.ndarray:
    """The array whose ext payload is ``data[start:end]``: a read-only view of ``data`` where aligned or
    where ``aligned`` is False, else a view of one aligned copy of its elements (`_BYTES_ALIGNED`).

    Every array returned is a view of immutable bytes, never an array owning its memory: the receivers of
    a broadcast share one decoded body (`SharedBody.decoded`), and an owned array set read-only can be
    made writeable again by whoever holds it."""
    code, ndim = data[start], data[start + 1]
    shape = _SHAPE_STRUCTS[ndim].unpack_from(data, start + _HEADER.size)
    native = _NATIVE_LE[code]
    if native is None:
        converted = _copied_array(bytes(data[start:end]), code, ndim, shape)
        return _ndarray(shape, converted.dtype, converted.tobytes())
    offset = start + _HEADER.size + 4 * ndim
    array = _ndarray(shape, native, data, offset)
    if aligned and not array.flags.aligned:
        return _ndarray(shape, native, bytes(data[offset:end]))
    array.setflags(write=False)
    return array


def _read_unaligned_array(data: Any, pos: int) -> tuple[np.ndarray, int]:
    """`_read` of the array value at ``data[pos:]`` of a field declared ``aligned=False``: a read-only view
    of ``data`` whether its elements are aligned there or not (`ArraySpec.aligned`)."""
    marker = data[pos]
    if marker in _FIXEXT_SIZES:
        start = pos + 2
        length = _FIXEXT_SIZES[marker]
    else:
        family, length_struct = _SIZED_READS[marker]
        length = length_struct.unpack_from(data, pos + 1)[0]
        start = pos + 2 + length_struct.size  # the ext type byte follows the length: always _NDARRAY_EXT
    return _array_in_place(data, start, start + length, aligned=False), start + length


_U8, _U16, _U32, _U64 = (struct.Struct(f">{code}") for code in "BHIQ")
_FIXED_READS = {
    0xCA: struct.Struct(">f"), 0xCB: struct.Struct(">d"),
    0xCC: _U8, 0xCD: _U16, 0xCE: _U32, 0xCF: _U64,
    0xD0: struct.Struct(">b"), 0xD1: struct.Struct(">h"), 0xD2: struct.Struct(">i"), 0xD3: struct.Struct(">q"),
}
_CONSTANTS = {0xC0: None, 0xC2: False, 0xC3: True}
_FIXEXT_SIZES = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_SIZED_READS = {
    0xC4: ("bin", _U8), 0xC5: ("bin", _U16), 0xC6: ("bin", _U32),
    0xC7: ("ext", _U8), 0xC8: ("ext", _U16), 0xC9: ("ext", _U32),
    0xD9: ("str", _U8), 0xDA: ("str", _U16), 0xDB: ("str", _U32),
    0xDC: ("array", _U16), 0xDD: ("array", _U32),
}


# --------------------------------------------------------------------------- field codecs


class _Field:
    """Encoder, strict decoder and trusted converter of one field type.

    ``emit`` validates a Python value and appends its msgpack encoding to a list of byte chunks (bytes or
    buffers; their concatenation is what ``msgpack.packb`` gives for the value); ``unpack`` validates a
    freshly decoded value and returns the Python value, raising `WireError` with a message naming
    ``where``; ``convert`` (None = identity) rebuilds the Python value from what `_read` gives for bytes
    this process packed. ``inline`` (None = a call of ``emit``) writes source lines doing what ``emit``
    does, fast path first, for a message's compiled encoders (`_compile_encoders`); ``inline_read`` (None =
    `_read`, then ``convert``) writes source lines reading the value, for its compiled reader
    (`_compile_reader`).
    """

    def __init__(
        self,
        describe: str,
        emit: Callable[[Any, list[Any]], None],
        unpack: Callable[[Any, str], Any],
        convert: Callable[[Any], Any] | None = None,
        inline: Callable[[str, _Bindings], tuple[list[str], list[str]]] | None = None,
        inline_read: Callable[[str, _Bindings], list[str]] | None = None,
        *,
        arrays: str = "none",
    ) -> None:
        self.describe = describe
        self.emit = emit
        self.unpack = unpack
        self.convert = convert
        self.inline = inline
        self.inline_read = inline_read
        self.arrays = arrays
        """What arrays the encoding holds: ``"none"``; ``"one"``, a plain array field, whose compiled encoder
        leaves the array itself as chunk ``{var}_a``; ``"some"``, a tuple or optional of arrays."""

    def source(self, var: str, bindings: _Bindings) -> tuple[list[str], list[str]]:
        """Lines encoding the value in ``var``, and the chunks they leave, in order: the names of bytes (or
        array) values, and starred names of lists of them."""
        if self.inline is not None:
            return self.inline(var, bindings)
        return [f"{var}_c = []", f"{bindings.name(self.emit)}({var}, {var}_c)"], [f"*{var}_c"]

    def read_source(self, var: str, bindings: _Bindings) -> list[str]:
        """Lines setting ``var`` to the value encoded at ``data[p:]`` and ``p`` to the position after it."""
        if self.inline_read is not None:
            return self.inline_read(var, bindings)
        lines = [f"{var}, p = _read(data, p)"]
        if self.convert is not None:
            lines.append(f"{var} = {bindings.name(self.convert)}({var})")
        return lines


class _Bindings:
    """The objects a compiled encoder's or reader's source refers to, each under a generated name."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}

    def name(self, obj: Any) -> str:
        name = f"_b{len(self.objects)}"
        self.objects[name] = obj
        return name


def _packing(pack: Callable[[Any], Any]) -> Callable[[Any, list[Any]], None]:
    """The ``emit`` of a field whose ``pack`` turns a value into something msgpack packs itself."""

    def emit(value: Any, chunks: list[Any]) -> None:
        chunks.append(msgpack.packb(pack(value), use_bin_type=True))

    return emit


def _array_header(length: int) -> bytes:
    """msgpack's header of an array of ``length`` elements (its smallest form, as packb)."""
    if length < 16:
        return bytes((0x90 | length,))
    if length < 1 << 16:
        return _ARRAY16.pack(0xDC, length)
    return _ARRAY32.pack(0xDD, length)


_ARRAY16, _ARRAY32 = struct.Struct(">BH"), struct.Struct(">BI")
_NIL = b"\xc0"


def _scalar_field(kind: type) -> _Field:
    if kind is Party:
        return _Field("Party", _packing(_pack_party), _unpack_party, _convert_party)
    pack = _SCALAR_PACKERS.get(kind)
    if pack is None:
        raise TypeError(f"unsupported message field type {kind!r}")

    def unpack(value: Any, where: str) -> Any:
        # Exact types: msgpack gives bool for booleans, so `type(...) is int` refuses a bool for an int.
        if type(value) is not kind:
            raise WireError(f"{where}: expected {kind.__name__}, got {type(value).__name__}")
        if kind is float and not math.isfinite(value):
            raise WireError(f"{where}: non-finite float {value}")
        return value

    if kind is int:
        return _Field("int", _emit_int, unpack, inline=_inline_int, inline_read=_inline_read_int)
    return _Field(kind.__name__, _packing(pack), unpack)


def _emit_int(value: Any, chunks: list[Any]) -> None:
    """An int field's ``emit``."""
    chunks.append(_int_bytes(value))


def _int_bytes(value: Any) -> bytes:
    """The msgpack encoding of an int field's value: small ints (round numbers, counts, ids) from a cache."""
    packed = _PACKED_INTS.get(value) if type(value) is int else None
    if packed is None:
        packed = msgpack.packb(_pack_int(value), use_bin_type=True)
        if type(value) is int and -(1 << 15) <= value < 1 << 20 and len(_PACKED_INTS) < _INT_CACHE_LIMIT:
            _PACKED_INTS[value] = packed
    return packed


def _inline_int(var: str, bindings: _Bindings) -> tuple[list[str], list[str]]:
    """`_emit_int`, its cache hit inline."""
    return [
        f"{var}_c = _PACKED_INTS.get({var}) if type({var}) is int else None",
        f"if {var}_c is None:",
        f"    {var}_c = _int_bytes({var})",
    ], [f"{var}_c"]


def _inline_read_int(var: str, bindings: _Bindings) -> list[str]:
    """An int field read: a positive fixint (one byte, its own value) inline, anything else by `_read`."""
    return [
        f"{var} = data[p]",
        f"if {var} < 0x80:",
        "    p += 1",
        "else:",
        f"    {var}, p = _read(data, p)",
    ]


# Only exact ints are looked up (True == 1 and 1.0 == 1 must never hit an int's bytes).
_PACKED_INTS: dict[int, bytes] = {}
_INT_CACHE_LIMIT = 1 << 16


def _pack_bool(value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise WireError(f"expected bool, got {type(value).__name__}")
    return bool(value)


def _pack_str(value: Any) -> str:
    if not isinstance(value, str):
        raise WireError(f"expected str, got {type(value).__name__}")
    return value


def bytes_field_size(n: int) -> int:
    """The encoded size of a ``bytes`` message field of ``n`` bytes: msgpack's bin header and the bytes."""
    return n + (2 if n < 1 << 8 else 3 if n < 1 << 16 else 5)


def _pack_bytes(value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray)):
        raise WireError(f"expected bytes, got {type(value).__name__}")
    return bytes(value)


def _pack_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise WireError(f"expected int, got {type(value).__name__}")
    return int(value)


def _pack_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise WireError(f"expected float, got {type(value).__name__}")
    return float(value)


_SCALAR_PACKERS: dict[type, Callable[[Any], Any]] = {
    bool: _pack_bool, int: _pack_int, float: _pack_float, str: _pack_str, bytes: _pack_bytes,
}


def _pack_party(value: Any) -> list[int]:
    if not isinstance(value, Party):
        raise WireError(f"expected Party, got {type(value).__name__}")
    return [value.role.code, value.index]


def _unpack_party(value: Any, where: str) -> Party:
    if type(value) is not list or len(value) != 2:
        raise WireError(f"{where}: expected a party [role, index]")
    return _decode_party(value[0], value[1], where)


def _convert_party(value: list[int]) -> Party:
    return _decode_party(value[0], value[1], "party")


def _decode_party(role_code: Any, index: Any, where: str) -> Party:
    if type(role_code) is not int or type(index) is not int:
        raise WireError(f"{where}: malformed party ({role_code!r}, {index!r})")
    party = _PARTIES.get((role_code, index))
    if party is not None:
        return party
    if index < 0:
        raise WireError(f"{where}: malformed party ({role_code!r}, {index!r})")
    try:
        party = Party(Role.from_code(role_code), index)
    except ValueError as exc:
        raise WireError(f"{where}: {exc}") from exc
    if len(_PARTIES) < _PARTY_CACHE_LIMIT:
        _PARTIES[(role_code, index)] = party
    return party


_SMALL_FINITE_CHECK = 4096
_isfinite = np.isfinite
_all = np.logical_and.reduce


# Decoded parties are interned: a run decodes the same few thousand parties millions of times.
_PARTIES: dict[tuple[int, int], Party] = {}
_PARTY_CACHE_LIMIT = 1 << 20


def _array_field(spec: ArraySpec) -> _Field:
    expected = np.dtype(spec.dtype)
    check_finite = expected.kind == "f" and not spec.allow_nan

    def check(array: np.ndarray, where: str) -> None:
        # Built-in dtypes are singletons, so identity is the fast path; `dtype.name` is slow Python.
        dtype = array.dtype
        if dtype is not expected and dtype != expected and dtype.newbyteorder("<") != expected:
            raise WireError(f"{where}: expected dtype {spec.dtype}, got {array.dtype.name}")
        if spec.ndim is not None and array.ndim != spec.ndim:
            raise WireError(f"{where}: expected {spec.ndim} dimensions, got shape {array.shape}")
        if spec.shape is not None:
            for axis, (want, got) in enumerate(zip(spec.shape, array.shape)):
                if want is not None and want != got:
                    raise WireError(f"{where}: expected length {want} on axis {axis}, got shape {array.shape}")
        # Small arrays: `isfinite` and one reduction, which never warns. Large ones: a finite sum proves
        # every element finite without a temporary array; only otherwise look closer, since a sum can also
        # overflow from finite elements -- an overflow numpy must not warn about, because such an array is
        # valid (and under ``-W error`` the warning would escape as an exception).
        if check_finite:
            if array.size <= _SMALL_FINITE_CHECK:
                if not _all(_isfinite(array), None):
                    raise WireError(f"{where}: array holds NaN or Inf")
                return
            with np.errstate(over="ignore", invalid="ignore"):
                total = array.sum()
            if not math.isfinite(total) and not np.isfinite(array).all():
                raise WireError(f"{where}: array holds NaN or Inf")

    def emit(value: Any, chunks: list[Any]) -> None:
        if not isinstance(value, np.ndarray):
            raise WireError(f"expected ndarray of {spec.dtype}, got {type(value).__name__}")
        check(value, "encode")
        _array_chunks(value, chunks)

    def unpack(value: Any, where: str) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            raise WireError(f"{where}: expected ndarray of {spec.dtype}, got {type(value).__name__}")
        check(value, where)
        return value

    code = _DTYPE_CODES[expected]

    def inline(var: str, bindings: _Bindings) -> tuple[list[str], list[str]]:
        """``emit`` inline for an ndarray that passes ``check`` on its face: exactly the native little-endian
        dtype, the declared ndim and lengths, and (a float field that refuses NaN) at most
        `_SMALL_FINITE_CHECK` elements, all finite. The field's dtype is known, so is its code; anything
        else goes through ``emit``, which checks it again and raises the error that names what is wrong."""
        native = _NATIVE_LE[code]
        chunks = [f"{var}_h", f"{var}_a"]
        # ``emit`` appends exactly two chunks: the header and the array.
        emitted = [f"{var}_h = []", f"{bindings.name(emit)}({var}, {var}_h)", f"{var}_h, {var}_a = {var}_h"]
        if native is None:
            return emitted, chunks
        condition = f"type({var}) is {bindings.name(np.ndarray)} and {var}.dtype is {bindings.name(native)}"
        if spec.ndim is not None:
            condition += f" and {var}.ndim == {spec.ndim}"
        for axis, length in enumerate(spec.shape or ()):
            if length is not None:
                condition += f" and {var}.shape[{axis}] == {length}"
        if check_finite:
            condition += f" and {var}.size <= _SMALL_FINITE_CHECK and _all(_isfinite({var}), None)"
        headers = bindings.name({})
        # A 1-d field's headers are cached by length: ``len`` makes no tuple to hash, as ``shape`` does.
        key = f"len({var})" if spec.ndim == 1 else f"{var}.shape"
        return [
            f"if {condition}:",
            f"    {var}_h = {headers}.get({key}) or _array_ext_header({code}, {var}, {headers}, {key})",
            f"    {var}_a = {var}",
            "else:",
            *(f"    {line}" for line in emitted),
        ], chunks

    def inline_read(var: str, bindings: _Bindings) -> list[str]:
        """The array of an ext 8 or ext 16 value (every payload under 64 KiB but those of 1, 2, 4, 8 or 16
        bytes, which are fixext) inline: its dtype is the field's (the encoder wrote the field's code) and
        so is its ndim where declared; the view of ``data`` where its elements are aligned (or the field
        is declared ``aligned=False``), else a view of a bytes copy of them. Anything else (fixext, ext 32,
        a big-endian machine) by `_read`, or `_read_unaligned_array` for a field declared ``aligned=False``."""
        native = _NATIVE_LE[code]
        fallback = f"{var}, p = _read(data, p)" if spec.aligned else f"{var}, p = _read_unaligned_array(data, p)"
        if native is None or not _BYTES_ALIGNED:
            return [fallback]
        size = native.itemsize
        dtype = bindings.name(native)
        if spec.ndim == 1:
            start = "o = s + 6"
            count = f"(p - o) >> {size.bit_length() - 1}"
            view = f"_frombuffer(data, {dtype}, {count}, o)"
            copy = f"_frombuffer(data[o:p], {dtype})"
            shape = []
        else:
            if spec.ndim is None:
                shape = ["n = data[s + 1]", "shape = _SHAPE_STRUCTS[n].unpack_from(data, s + 2)"]
                start = "o = s + 2 + 4 * n"
            else:
                start = f"o = s + {2 + 4 * spec.ndim}"
                shape = [f"shape = {bindings.name(_SHAPE_STRUCTS[spec.ndim])}.unpack_from(data, s + 2)"]
            view = f"_ndarray(shape, {dtype}, data, o)"
            copy = f"_ndarray(shape, {dtype}, data[o:p])"
        make = f"{var} = {view}" if size == 1 or not spec.aligned else f"{var} = {view} if o & {size - 1} == 0 else {copy}"
        # Each length form's branch is whole (no second test of the marker); ext 8 first, the form of a
        # payload under 256 bytes, which the many small arrays of a protocol's per-user messages take.
        branches = []
        for test, length, skip in (("m == 0xC7", "data[p + 1]", 3), ("m == 0xC8", "(data[p + 1] << 8 | data[p + 2])", 4)):
            branches += [
                f"{'if' if not branches else 'elif'} {test}:",
                f"    s = p + {skip}",
                f"    p = s + {length}",
                *(f"    {line}" for line in shape),
                f"    {start}",
                f"    {make}",
            ]
        return ["m = data[p]", *branches, "else:", f"    {fallback}"]

    return _Field(f"ndarray[{spec.dtype}]", emit, unpack, inline=inline, inline_read=inline_read, arrays="one")


def _tuple_field(item: _Field) -> _Field:
    def emit(value: Any, chunks: list[Any]) -> None:
        if not isinstance(value, (tuple, list)):
            raise WireError(f"expected a tuple of {item.describe}, got {type(value).__name__}")
        chunks.append(_array_header(len(value)))
        for element in value:
            item.emit(element, chunks)

    def unpack(value: Any, where: str) -> tuple[Any, ...]:
        if type(value) is not list:
            raise WireError(f"{where}: expected a sequence of {item.describe}, got {type(value).__name__}")
        return tuple(item.unpack(element, f"{where}[{position}]") for position, element in enumerate(value))

    def convert(value: list[Any]) -> tuple[Any, ...]:
        return tuple(value) if item.convert is None else tuple(map(item.convert, value))

    return _Field(f"tuple[{item.describe}, ...]", emit, unpack, convert, arrays="none" if item.arrays == "none" else "some")


def _optional_field(item: _Field) -> _Field:
    def emit(value: Any, chunks: list[Any]) -> None:
        if value is None:
            chunks.append(_NIL)
        else:
            item.emit(value, chunks)

    def unpack(value: Any, where: str) -> Any:
        return None if value is None else item.unpack(value, where)

    def convert(value: Any) -> Any:
        return value if value is None or item.convert is None else item.convert(value)

    def inline(var: str, bindings: _Bindings) -> tuple[list[str], list[str]]:
        # None: the first of the item's chunks is nil, any others empty.
        lines, chunks = item.source(var, bindings)
        empty = {(True, True): "(_NIL,)", (True, False): "()", (False, True): "_NIL", (False, False): "b''"}
        nil = [
            f"{chunk.lstrip('*')} = {empty[chunk.startswith('*'), position == 0]}"
            for position, chunk in enumerate(chunks)
        ]
        return [
            f"if {var} is None:",
            *(f"    {line}" for line in nil),
            "else:",
            *(f"    {line}" for line in lines),
        ], chunks

    def inline_read(var: str, bindings: _Bindings) -> list[str]:
        return [
            "if data[p] == 0xC0:",
            f"    {var} = None",
            "    p += 1",
            "else:",
            *(f"    {line}" for line in item.read_source(var, bindings)),
        ]

    return _Field(
        f"{item.describe} | None", emit, unpack, None if item.convert is None else convert, inline, inline_read,
        arrays="none" if item.arrays == "none" else "some",
    )


def _field_for(annotation: Any, where: str) -> _Field:
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *extras = typing.get_args(annotation)
        specs = [extra for extra in extras if isinstance(extra, ArraySpec)]
        if base is not np.ndarray or len(specs) != 1:
            raise TypeError(f"{where}: Annotated fields must be Array(...) declarations")
        return _array_field(specs[0])
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"{where}: only homogeneous tuple[T, ...] fields are supported")
        if any(isinstance(extra, ArraySpec) and not extra.aligned for extra in getattr(args[0], "__metadata__", ())):
            raise TypeError(f"{where}: the arrays of a tuple field are always decoded aligned; declare them without aligned=False")
        return _tuple_field(_field_for(args[0], where))
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) != 1 or len(typing.get_args(annotation)) != 2:
            raise TypeError(f"{where}: only `T | None` unions are supported")
        return _optional_field(_field_for(args[0], where))
    if annotation is np.ndarray:
        raise TypeError(f"{where}: declare arrays with Array(dtype, ...), not a bare np.ndarray")
    return _scalar_field(annotation)


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class _Codec:
    """How one message kind is encoded and decoded; ``head`` is the packed envelope array header and kind tag.

    ``emit`` validates a message's fields and appends their encoding to a list of chunks, then runs the
    message's ``validate``; ``pack`` does the same for a whole envelope and returns its bytes
    (`_compile_encoders`). ``rebuild`` reads an envelope of the kind from bytes ``pack`` made, from the
    end of its head on, and ``rebuild_body`` the fields from a given position (`_compile_reader`).
    """

    kind: str
    cls: type
    names: tuple[str, ...]
    fields: tuple[_Field, ...]
    head: bytes
    emit: Callable[[Any, list[Any]], None]
    pack: Callable[[Party, Party, float, Any], bytes]
    rebuild: Callable[..., Envelope]
    rebuild_body: Callable[[bytes, int], Any]


def _compile_encoders(
    kind: str, names: tuple[str, ...], fields: tuple[_Field, ...], validates: bool, head: bytes
) -> tuple[Callable[[Any, list[Any]], None], Callable[[Party, Party, float, Any], bytes]]:
    """Two functions encoding every field of a message kind, as `_Field.emit` would one by one:
    ``emitter(body, out)``, appending the chunks to ``out``, and ``pack(src, dst, sent_at, body)``, the
    whole envelope's bytes (what `encode` returns): for a kind whose one array field is a plain array and
    whose other fields hold none, its bytes after an aligning pad where that array holds `SHARED_BODY_BYTES`
    or more (`_aligned_message`; module docstring, "Alignment").

    Their source is each field's `_Field.source` in declaration order (their fast paths inline: no call per
    field, the dtype of an array field known in advance), wrapped so that a `WireError` is raised again
    naming its field, then the message's ``validate``, then the chunks the fields left, in one tuple. They
    find the packed ints' and parties' caches by their global names (so they see the module's current
    ones); each array field keeps a header cache of its own, by shape (by length where 1-d).
    """
    bindings = _Bindings()
    lines = []
    chunks = []
    if names:
        lines.append("try:")
        for position, (name, field) in enumerate(zip(names, fields)):
            field_lines, field_chunks = field.source(f"v{position}", bindings)
            lines.append(f"    v{position} = body.{name}")
            lines.extend(f"    {line}" for line in field_lines)
            chunks += field_chunks
        lines += [
            "except WireError:",
            f"    _raise_naming_the_field({bindings.name(kind)}, {bindings.name(names)}, {bindings.name(fields)}, body)",
            "    raise",
        ]
    if validates:
        lines += [
            "try:",
            "    body.validate()",
            "except ValueError as exc:",
            f"    raise WireError(f'{{{bindings.name(kind)}}}: {{exc}}') from exc",
        ]
    emitter = _compiled(
        ["def emitter(body, out):", *(f"    {line}" for line in lines), f"    out.extend(({''.join(f'{chunk}, ' for chunk in chunks)}))"],
        bindings, kind,
    )
    arrays = [position for position, field in enumerate(fields) if field.arrays != "none"]
    aligning = []
    if len(arrays) == 1 and fields[arrays[0]].arrays == "one":
        array = f"v{arrays[0]}_a"
        aligning = [f"    if {array}.nbytes >= {SHARED_BODY_BYTES}:", f"        return _aligned_message(out, {array})"]
    pack = _compiled([
        "def pack(src, dst, sent_at, body):",
        "    src = _PARTY_BYTES.get(src) or _party_bytes(src)",
        "    dst = _PARTY_BYTES.get(dst) or _party_bytes(dst)",
        "    sent_at = _FLOAT.pack(0xCB, sent_at if type(sent_at) is float else float(sent_at))",
        *(f"    {line}" for line in lines),
        f"    out = ({bindings.name(head)}, src, dst, sent_at, {', '.join(chunks)})",
        *aligning,
        "    try:",
        "        return _join(out)",
        "    except TypeError:",
        "        return _joined(out)",
    ], bindings, kind)
    return emitter, pack


def _compile_reader(
    kind: str, cls: type, names: tuple[str, ...], fields: tuple[_Field, ...], head_length: int
) -> tuple[Callable[..., Envelope], Callable[[bytes, int], Any]]:
    """How `decode_trusted` reads a message of a kind from bytes its own encoder made and validated:
    ``rebuild(data, p=len(head))``, the envelope from the end of its head on, and ``rebuild_body(data,
    p)``, the fields (from `SharedBody`).

    Their source reads each field in declaration order by its `_Field.read_source` (small ints, ``None``,
    and arrays of up to 64 KiB inline, with their dtype and ndim known in advance; other values by `_read`)
    and the parties of the envelope inline where the role is one byte and the index below 65,536. The message
    is then made as its ``__init__`` would make it: a plain frozen dataclass (`_is_plain`) gets its fields
    stored straight into its ``__dict__`` (cheaper here than a new ``__dict__`` as `_direct_init` gives:
    47,604 against 48,883 instructions per ``dpmf.item_vectors`` of 7 fields, as it then was, though each
    attribute read of the shared-key dict this leaves costs ~250 more); any other class is called as usual.
    The envelope is filled and given its class as `_envelope` does it. ``data`` must be a bytes object, or the view of
    one `encode` gives past an aligning pad (module docstring, "Alignment"): the arrays are read-only
    because it is immutable, and an array inline whose offset in it is a multiple of its element size is
    aligned because its buffer is (`_BYTES_ALIGNED`) -- a view holds one array, too large to be inline, and
    `_array_in_place` asks numpy whether it is aligned.
    """
    bindings = _Bindings()
    fields_lines = []
    for position, field in enumerate(fields):
        fields_lines += field.read_source(f"v{position}", bindings)
    values = ", ".join(f"v{position}" for position in range(len(fields)))
    if _is_plain(cls):
        fields_lines += [f"body = _new({bindings.name(cls)})", *(["f = body.__dict__"] if names else [])]
        fields_lines += [f"f[{name!r}] = v{position}" for position, name in enumerate(names)]
    else:
        fields_lines.append(f"body = {bindings.name(cls)}({values})")
    party_lines = []
    for side in ("src", "dst"):
        party_lines += [
            "r = data[p]",
            "i = data[p + 1]",
            "if r < 0x80 and i < 0x80:",
            "    p += 2",
            "elif r < 0x80 and i == 0xCD:",
            "    i = data[p + 2] << 8 | data[p + 3]",
            "    p += 4",
            "elif r < 0x80 and i == 0xCC:",
            "    i = data[p + 2]",
            "    p += 3",
            "else:",
            "    r, p = _read(data, p)",
            "    i, p = _read(data, p)",
            f"{side} = _PARTIES.get((r, i)) or _decode_party(r, i, {side!r})",
        ]
    rebuild = _compiled([
        f"def rebuild(data, p={head_length}):",
        *(f"    {line}" for line in party_lines),
        "    if data[p] == 0xCB:",
        "        sent_at = _unpack_double(data, p + 1)[0]",
        "        p += 9",
        "    else:",
        "        sent_at, p = _read(data, p)",
        *(f"    {line}" for line in fields_lines),
        "    envelope = _new(_OpenEnvelope)",
        f"    envelope.kind = {bindings.name(kind)}",
        "    envelope.src = src",
        "    envelope.dst = dst",
        "    envelope.sent_at = sent_at",
        "    envelope.body = body",
        "    _SETATTR(envelope, '__class__', Envelope)",
        "    return envelope",
    ], bindings, kind)
    rebuild_body = _compiled(
        ["def rebuild_body(data, p):", *(f"    {line}" for line in fields_lines), "    return body"], bindings, kind
    )
    return rebuild, rebuild_body


def _is_plain(cls: type) -> bool:
    """Whether a message class's instances are made by storing each field in their ``__dict__``: a frozen
    dataclass with a ``__dict__``, every field an ``__init__`` argument, and no ``__post_init__``."""
    return (
        "__slots__" not in cls.__dict__
        and not hasattr(cls, "__post_init__")
        and all(field.init for field in dataclasses.fields(cls))
    )


def _direct_init(kind: str, cls: type) -> Callable[..., None] | None:
    """An ``__init__`` for a plain message class (`_is_plain`) that gives the new instance its arguments
    as one ``__dict__`` (`_SETATTR`): what the dataclass-made one does, without its ``object.__setattr__``
    call per field (most of what building a message of several fields costs). Same parameters, kinds,
    defaults and order; the fields are in the dict in declaration order. None -- the class keeps its own
    -- when it has fewer than `_DIRECT_INIT_FIELDS` fields, defines ``__init__`` itself, a field has a
    default factory or a descriptor of its name or a name the generated source uses, or a parameter is
    not a field (an ``InitVar``)."""
    init = cls.__dict__.get("__init__")
    fields = dataclasses.fields(cls)
    names = [field.name for field in fields]
    if (
        len(fields) < _DIRECT_INIT_FIELDS
        or init is None
        or not cls.__dataclass_params__.init  # type: ignore[attr-defined]
        or getattr(getattr(init, "__code__", None), "co_filename", None) != "<string>"  # not dataclass-made
        or not _is_plain(cls)
        or any(field.default_factory is not dataclasses.MISSING for field in fields)
        or any(hasattr(type(cls.__dict__.get(name)), "__set__") for name in names)
        or any(name == "_SETATTR" or name.startswith("_b") for name in names)  # the source's own names
    ):
        return None
    parameters = list(inspect.signature(init).parameters.values())[1:]
    if sorted(parameter.name for parameter in parameters) != sorted(names):
        return None
    bindings = _Bindings()
    self_name = "self" if "self" not in names else "_self_"
    while self_name in names:
        self_name += "_"
    head, keyword_only = [self_name], False
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not keyword_only:
            head.append("*")
            keyword_only = True
        default = "" if parameter.default is inspect.Parameter.empty else f"={bindings.name(parameter.default)}"
        head.append(f"{parameter.name}{default}")
    direct = _compiled([
        f"def __init__({', '.join(head)}):",
        f"    _SETATTR({self_name}, '__dict__', {{{', '.join(f'{name!r}: {name}' for name in names)}}})",
    ], bindings, kind)
    direct.__qualname__ = init.__qualname__
    direct.__module__ = init.__module__
    direct.__annotations__ = dict(init.__annotations__)
    return direct


# Assigning a new ``__dict__`` has a fixed cost (it first makes the instance's own dict, then drops it):
# encoding with construction, cachegrind, /tmp/pcodec3/micro.sh, dataclass's -> one dict: 7 fields
# (`dpmf.item_vectors` as it then was) 51,135 -> 38,871 instructions, 3 (`dpmf.contribution`) 24,891 -> 23,370, but
# 1 (`dpmf.item_request`) 16,754 -> 17,467; so only a class of this many fields or more gets `_direct_init`.
_DIRECT_INIT_FIELDS = 2


def _compiled(lines: list[str], bindings: _Bindings, kind: str) -> Any:
    """The function whose source is ``lines`` (a ``def``), its free names bound to ``bindings``' objects
    and its global names the module's; profilers see it as ``<wire KIND>``."""
    factory = f"def make({', '.join(bindings.objects)}):\n" + "".join(f"    {line}\n" for line in lines)
    factory += f"    return {lines[0][len('def '):lines[0].index('(')]}\n"
    namespace: dict[str, Any] = {}
    # Source built from message field declarations only.
    exec(compile(factory, f"<wire {kind}>", "exec"), globals(), namespace)  # noqa: S102
    return namespace["make"](**bindings.objects)


_BY_KIND: dict[str, _Codec] = {}
_BY_CLASS: dict[type, _Codec] = {}
# Each kind's `_Codec.rebuild` by its head: heads are prefix-free (msgpack values are self-delimiting), so
# the one a message starts with is the only one it can match, whichever prefix length is tried.
_REBUILDERS: dict[bytes, Callable[..., Envelope]] = {}
_READERS: dict[str, Callable[[bytes], Envelope]] = {}
#: ``TRUSTED_READERS[kind](data)`` is ``decode_trusted(data)`` for bytes ``data`` (a ``bytes`` object, not
#: a view) that `encode` made from a message of ``kind`` in this process: the kind's compiled reader
#: itself, for a caller that knows the kind already (the network files it beside the bytes), without
#: the function call and the look-up of the reader by the bytes' head that `decode_trusted` makes.
TRUSTED_READERS: Mapping[str, Callable[[bytes], Envelope]] = types.MappingProxyType(_READERS)

M = TypeVar("M")


def message(kind: str) -> Callable[[type[M]], type[M]]:
    """Class decorator registering a frozen dataclass as the message ``kind`` (e.g. ``"fcf.item_request"``).

    A message may define ``validate(self)`` to check relations between fields (e.g. equal lengths); the
    decoder calls it and turns any ValueError it raises into a `WireError`.

    A kind names one class: registering a kind that another class -- another module or qualified name --
    already holds raises ValueError naming both, at import time, instead of silently taking the kind over.
    Registering the same class again (same module and qualified name, e.g. a reloaded module) replaces
    the earlier registration.

    A plain class (`_is_plain`) of 2 or more fields whose ``__init__`` the dataclass made gets one with the
    same signature that gives the instance its fields as one dict (`_direct_init`): the same message,
    built cheaper.
    """

    def register(cls: type[M]) -> type[M]:
        if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            raise TypeError(f"message {kind!r}: {cls.__name__} must be a frozen dataclass")
        existing = _BY_KIND.get(kind)
        if existing is not None and _class_name(existing.cls) != _class_name(cls):
            raise ValueError(
                f"message kind {kind!r} is already registered to {_class_name(existing.cls)}; "
                f"{_class_name(cls)} cannot take it too (prefix kinds with your protocol's name)"
            )
        hints = typing.get_type_hints(cls, include_extras=True)
        names = tuple(field.name for field in dataclasses.fields(cls))
        fields = tuple(_field_for(hints[name], f"{kind}.{name}") for name in names)
        head = _array_header(_ENVELOPE_HEADER_LEN + len(fields)) + msgpack.packb(kind, use_bin_type=True)
        validates = callable(getattr(cls, "validate", None))
        codec = _Codec(
            kind, cls, names, fields, head,
            *_compile_encoders(kind, names, fields, validates, head),
            *_compile_reader(kind, cls, names, fields, len(head)),
        )
        direct = _direct_init(kind, cls)
        if direct is not None:
            cls.__init__ = direct  # type: ignore[misc]
        if existing is not None:
            _BY_CLASS.pop(existing.cls, None)
            _REBUILDERS.pop(existing.head, None)
        _BY_KIND[kind] = codec
        _BY_CLASS[cls] = codec
        _REBUILDERS[head] = codec.rebuild
        _READERS[kind] = codec.rebuild
        cls.KIND = kind  # type: ignore[attr-defined]
        return cls

    return register


def _class_name(cls: type) -> str:
    """``module.QualifiedName``: what identifies a message class across reloads."""
    return f"{cls.__module__}.{cls.__qualname__}"


def kind_of(message_type: type) -> str:
    """The registered kind tag of a message class; raises WireError for an unregistered class."""
    codec = _BY_CLASS.get(message_type)
    if codec is None:
        raise WireError(f"{message_type.__qualname__} is not a registered message type")
    return codec.kind


def registered_kinds() -> tuple[str, ...]:
    return tuple(sorted(_BY_KIND))


# --------------------------------------------------------------------------- envelopes


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message in transit: what the receiver sees. ``src`` is whoever sent these bytes."""

    kind: str
    src: Party
    dst: Party
    sent_at: float
    body: Any


def _body_chunks(codec: _Codec, body: Any) -> list[Any]:
    """The msgpack encoding of ``body``'s fields in order, as byte chunks; validates every field first."""
    chunks: list[Any] = []
    codec.emit(body, chunks)
    return chunks


def _raise_naming_the_field(kind: str, names: tuple[str, ...], fields: tuple[_Field, ...], body: Any) -> None:
    """Encode ``body``'s fields one by one again and raise the first field's error, naming the field (a
    compiled encoder does not track which field it is at)."""
    for name, field in zip(names, fields):
        try:
            field.emit(getattr(body, name), [])
        except WireError as exc:
            raise WireError(f"{kind}.{name}: {exc}") from None


def _codec_of(body: Any) -> _Codec:
    codec = _BY_CLASS.get(type(body))
    if codec is None:
        raise WireError(f"{type(body).__qualname__} is not a registered message type")
    return codec


def _check_size(kind: str, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise WireError(f"{kind}: encoded message of {size} bytes exceeds the limit of {max_bytes}")


def encode(
    src: Party, dst: Party, sent_at: float, body: Any, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> bytes | memoryview:
    """Encode one envelope: its bytes, or a read-only view of them past an aligning pad (module docstring,
    "Alignment"). Raises WireError for an unregistered body type or a field of the wrong type."""
    codec = _BY_CLASS.get(type(body)) or _codec_of(body)
    data = codec.pack(src, dst, sent_at, body)
    if len(data) > max_bytes:
        _check_size(codec.kind, len(data), max_bytes)
    return data


def encode_many(
    src: Party, dsts: list[Party], sent_at: float, body: Any, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> list[bytes | Broadcast]:
    """Encode the same body to many destinations: ``[encode(src, dst, sent_at, body) for dst in dsts]``.

    The result is byte for byte what ``encode`` gives each destination, but the body is validated and
    packed once: only the envelope's destination differs between them. A body of `SHARED_BODY_BYTES` or
    more is not copied: each destination gets a `Broadcast` holding it (module docstring).
    """
    codec = _codec_of(body)
    head = codec.head + _party_bytes(src)
    chunks = [_FLOAT.pack(0xCB, float(sent_at)), *_body_chunks(codec, body)]
    encoded: list[bytes | Broadcast]
    pad = _aligning_pad(chunks)
    if pad is not None:
        shared = SharedBody(codec, _joined([bytes(pad), *chunks]), pad)
        encoded = [Broadcast(head + _party_bytes(dst), shared) for dst in dsts]
    else:
        tail = _joined(chunks)
        encoded = [b"".join((head, _party_bytes(dst), tail)) for dst in dsts]
    if encoded:
        _check_size(codec.kind, max(map(len, encoded)), max_bytes)
    return encoded


def _aligned_message(chunks: tuple[Any, ...], array: np.ndarray) -> bytes | memoryview:
    """``chunks`` joined after the pad (0 to 7 bytes) that puts ``array``'s elements, one of the chunks, at
    a multiple of 8 in a bytes object (`_BYTES_ALIGNED`): that bytes object itself where no pad is needed,
    else a read-only memoryview of it past the pad (module docstring, "Alignment")."""
    offset = 0
    for chunk in chunks:
        if chunk is array:
            break
        offset += chunk.nbytes if type(chunk) is _ndarray else len(chunk)
    pad = -offset & 7 if _BYTES_ALIGNED else 0
    if not pad:
        return _joined(list(chunks))
    return memoryview(_joined([bytes(pad), *chunks]))[pad:]


def _aligning_pad(chunks: list[Any]) -> int | None:
    """For a broadcast body's chunks (`encode_many`): None below `SHARED_BODY_BYTES`, else how many bytes
    (0 to 7) to put before them so that the largest array's elements start at a multiple of 8 -- aligned
    for every dtype here, in a bytes object (`_BYTES_ALIGNED`) -- and `SharedBody.decoded` reads it in place
    instead of copying it."""
    size = offset = largest = 0
    for chunk in chunks:
        if isinstance(chunk, _ndarray):
            if chunk.nbytes > largest:
                largest, offset = chunk.nbytes, size
            size += chunk.nbytes
        else:
            size += len(chunk)
    if size < SHARED_BODY_BYTES:
        return None
    return -offset & 7 if _BYTES_ALIGNED else 0


class SharedBody:
    """The encoded body -- ``sent_at`` and the fields -- of one broadcast, held by every copy.

    ``data`` is the body's bytes: ``buffer`` itself, or a read-only memoryview of it from ``start`` on,
    where `encode_many` put ``start`` bytes before the body so that its largest array is aligned there
    (`_aligning_pad`). `decoded` decodes it once, on the first delivery, every array a read-only view of
    ``buffer`` or a copy; `digest`, the body's XXH3-128, stands for its bytes in the transcript hash
    (`fedrecsim.network.ledger`).
    """

    __slots__ = ("_codec", "_buffer", "_start", "data", "_decoded", "_digest")

    def __init__(self, codec: _Codec, buffer: bytes, start: int = 0) -> None:
        self._codec = codec
        self._buffer = buffer
        self._start = start
        self.data: bytes | memoryview = memoryview(buffer)[start:] if start else buffer
        self._decoded: tuple[float, Any] | None = None
        self._digest: bytes | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (a checkpoint's message in flight) as its kind, buffer and start; decoded again when
        delivered."""
        return (_shared_body, (self._codec.kind, self._buffer, self._start))

    def digest(self) -> bytes:
        if self._digest is None:
            self._digest = xxhash.xxh3_128_digest(self.data)
        return self._digest

    def decoded(self) -> tuple[float, Any]:
        """``(sent_at, body)``, the same objects for every caller."""
        if self._decoded is None:
            sent_at, start = _read(self._buffer, self._start)
            self._decoded = (sent_at, self._codec.rebuild_body(self._buffer, start))
        return self._decoded


def _shared_body(kind: str, buffer: bytes, start: int = 0) -> SharedBody:
    return SharedBody(_BY_KIND[kind], buffer, start)


class Broadcast:
    """One destination's copy of a broadcast with a shared body: ``bytes(copy)`` is exactly the message
    `encode` gives that destination, ``len(copy)`` its size."""

    __slots__ = ("head", "shared")

    def __init__(self, head: bytes, shared: SharedBody) -> None:
        self.head = head
        self.shared = shared

    def __len__(self) -> int:
        return len(self.head) + len(self.shared.data)

    def __bytes__(self) -> bytes:
        return self.head + self.shared.data


def _party_bytes(party: Party) -> bytes:
    """A party's two envelope elements, role code and index, as msgpack packs them."""
    packed = _PARTY_BYTES.get(party)
    if packed is None:
        packed = msgpack.packb(party.role.code) + msgpack.packb(party.index)
        if len(_PARTY_BYTES) < _PARTY_CACHE_LIMIT:
            _PARTY_BYTES[party] = packed
    return packed


# msgpack's float64 (the form packb gives a Python float): marker 0xcb, then the big-endian double.
_FLOAT = struct.Struct(">Bd")
_unpack_double = struct.Struct(">d").unpack_from
_PARTY_BYTES: dict[Party, bytes] = {}


def decode(data: bytes, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> Envelope:
    """Decode one envelope strictly. Raises WireError, and only WireError, on any malformed input."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(f"expected bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise WireError(f"message of {len(data)} bytes exceeds the limit of {max_bytes}")
    try:
        frame = msgpack.unpackb(
            data, raw=False, use_list=True, ext_hook=_ext_hook, strict_map_key=True
        )
    except WireError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
        raise WireError(f"malformed message bytes: {exc}") from exc
    if type(frame) is not list or len(frame) < _ENVELOPE_HEADER_LEN:
        raise WireError("malformed envelope: expected an array [kind, src, dst, sent_at, fields...]")
    kind = frame[0]
    codec = _BY_KIND.get(kind) if type(kind) is str else None
    if codec is None:
        raise WireError(f"unknown message kind {kind!r}")
    src = _decode_party(frame[1], frame[2], f"{kind} src")
    dst = _decode_party(frame[3], frame[4], f"{kind} dst")
    sent_at = frame[5]
    if type(sent_at) is not float or not math.isfinite(sent_at):
        raise WireError(f"{kind}: malformed sent_at {sent_at!r}")
    values = frame[_ENVELOPE_HEADER_LEN:]
    if len(values) != len(codec.fields):
        raise WireError(f"{kind}: expected {len(codec.fields)} fields {codec.names}, got {len(values)}")
    kwargs = {
        name: field.unpack(value, f"{kind}.{name}")
        for name, field, value in zip(codec.names, codec.fields, values)
    }
    try:
        body = codec.cls(**kwargs)
        validate = getattr(body, "validate", None)
        if validate is not None:
            validate()
    except (ValueError, TypeError) as exc:
        raise WireError(f"{kind}: {exc}") from exc
    return Envelope(kind, src, dst, sent_at, body)


def decode_trusted(data: bytes) -> Envelope:
    """Decode bytes that `encode` produced in this process, without validating them a second time.

    `encode` has already checked every field (types, dtypes, shapes, NaN, ``validate``), so the network
    uses this on delivery: the receiver gets a message rebuilt from the bytes, but the checks run once per
    message instead of twice. The kind's compiled reader (`_compile_reader`) reads the bytes in place; its
    arrays are read-only: views of the bytes where aligned, else copies (views either way for a field
    declared ``aligned=False``). Bytes of unknown origin must go through `decode`.
    """
    if type(data) is not bytes and not (type(data) is memoryview and type(data.obj) is bytes):
        data = bytes(data)
    # A head of up to 15 elements and a kind of up to 31 bytes is the fixarray byte, the fixstr byte
    # 0xa0 + n and the n bytes of the kind; any other head is found by `_rebuild`.
    rebuild = _REBUILDERS.get(data[:data[1] - 0x9E])
    if rebuild is None:
        return _rebuild(data)
    return rebuild(data)


def _rebuild(data: bytes) -> Envelope:
    """`decode_trusted` of a message whose head is in a longer form (or whose kind is unknown)."""
    marker = data[0]
    start = 1 if 0x90 <= marker <= 0x9F else 3 if marker == 0xDC else 5
    kind, start = _read(data, start)
    codec = _BY_KIND.get(kind)
    if codec is None:
        raise WireError(f"unknown message kind {kind!r}")
    return codec.rebuild(data, start)


def decode_broadcast(kind: str, src: Party, dst: Party, copy: Broadcast) -> Envelope:
    """The envelope of one destination's copy of a shared-body broadcast (its body shared, read-only)."""
    sent_at, body = copy.shared.decoded()
    return _envelope(kind, src, dst, sent_at, body)


def _envelope(kind: str, src: Party, dst: Party, sent_at: float, body: Any) -> Envelope:
    """``Envelope(kind, src, dst, sent_at, body)``, made as an `_OpenEnvelope` whose class is then set to
    `Envelope`: the frozen dataclass's ``__init__`` makes one ``object.__setattr__`` call per field, three
    times the cost, once per delivery."""
    envelope = _new(_OpenEnvelope)
    envelope.kind = kind
    envelope.src = src
    envelope.dst = dst
    envelope.sent_at = sent_at
    envelope.body = body
    _SETATTR(envelope, "__class__", Envelope)
    return envelope


class _OpenEnvelope:
    """`Envelope`'s slots, in its order, without its frozen ``__setattr__``: an envelope is filled as one of
    these, by plain stores, and then given its class (`_envelope`) -- a change CPython allows between
    classes of the same slots and base, and the instance is then exactly an `Envelope`. Nothing else ever
    holds one of these."""

    __slots__ = tuple(field.name for field in dataclasses.fields(Envelope))


_new = object.__new__
# `_direct_init` gives a message its fields as one new ``__dict__``: one call, where the frozen dataclass's
# ``__init__`` makes one ``object.__setattr__`` call per field, and an ordinary dict, whose attributes
# CPython reads faster than those stored one by one through ``__dict__`` into the class's shared-key dict.
_SETATTR = object.__setattr__


__all__ = [
    "Array",
    "ArraySpec",
    "Broadcast",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "Envelope",
    "SHARED_BODY_BYTES",
    "SharedBody",
    "TRUSTED_READERS",
    "bytes_field_size",
    "decode",
    "decode_broadcast",
    "decode_trusted",
    "encode",
    "encode_many",
    "kind_of",
    "message",
    "registered_kinds",
]
