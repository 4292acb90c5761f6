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
writes the msgpack headers itself and joins them with the arrays' own buffers, so each element is copied
once; the bytes are exactly those msgpack's packer gives for the same array of values. Each message kind
gets its own encoder, compiled when it is registered (`_compile_emitter`): every field's checks and
encoding in one function.

Decoding is strict: arbitrary bytes, an unknown kind, a missing or extra field, a wrong type, dtype,
ndim or shape, and NaN/Inf (unless the field allows it) all raise `WireError`, and nothing else does.
The byte count of a message is ``len(encode(...))``: the ledger counts exactly what this module emits.

`decode_trusted`, for bytes this process encoded, skips the checks and gives read-only arrays -- views of
the received bytes where those are aligned, else one aligned copy -- so that no receiver can change what
another party holds; `decode` gives arrays the receiver owns.

Broadcasts. `encode_many` gives each destination its own bytes, except when the encoded body (``sent_at``
and the fields) is `SHARED_BODY_BYTES` or more: then each destination's message is a `Broadcast`, its own
envelope head and one `SharedBody` that every copy holds -- the same bytes, counted in full for each
copy, but never copied per destination. The body is decoded once, on its first delivery, and every
receiver gets that one body, whose arrays are read-only (so no receiver can change another's).
"""

from __future__ import annotations

import dataclasses
import math
import struct
import sys
import types
import typing
from collections.abc import Callable
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
    """

    dtype: str
    ndim: int | None = None
    shape: tuple[int | None, ...] | None = None
    allow_nan: bool = False

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
) -> Any:
    """Annotation for an ndarray field, e.g. ``vectors: Array("float64", ndim=2)``."""
    return Annotated[np.ndarray, ArraySpec(dtype, ndim, shape, allow_nan)]


# --------------------------------------------------------------------------- ndarray ext payload


def _array_chunks(array: np.ndarray, chunks: list[Any]) -> None:
    """Append the msgpack ext-type encoding of ``array`` to ``chunks``: a header, then the raw elements.

    The bytes are those ``msgpack.packb(ExtType(1, header + elements))`` gives, without building the
    payload: the elements go in as the (C-contiguous) array itself, whose buffer the final join copies once.
    """
    code = _DTYPE_CODES.get(array.dtype)
    if code is None and array.dtype.byteorder == ">":
        code = _DTYPE_CODES.get(array.dtype.newbyteorder("<"))
    if code is None:
        raise WireError(f"cannot encode an array of dtype {array.dtype}; supported: {sorted(_DTYPE_BY_NAME)}")
    key = (code, array.shape)
    chunks.append(_ARRAY_HEADERS.get(key) or _array_ext_header(code, array, _ARRAY_HEADERS, key))
    if array.nbytes <= _SMALL_ARRAY_BYTES and array.dtype is _NATIVE_LE[code]:
        # One small copy (any memory layout) costs less than the call that checks the layout.
        chunks.append(array.tobytes())
    else:
        chunks.append(np.ascontiguousarray(array, dtype=_DTYPES[code]))


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
# encoder keeps one such cache per array field, by shape alone.)
_ARRAY_HEADERS: dict[tuple[int, tuple[int, ...]], bytes] = {}
_HEADER_CACHE_LIMIT = 1 << 16
# Arrays up to this size are copied out with ``tobytes`` (then joined: two small copies); larger ones are
# handed to the join as a buffer (one copy).
_SMALL_ARRAY_BYTES = 16 * 1024


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


def _trusted_ext_hook(code: int, payload: bytes) -> np.ndarray:
    """`_ext_hook` for payloads `_array_chunks` made in this process: the same array, read-only, unchecked.

    The array is a view of a bytes object holding just its elements (sliced off the payload, whose elements
    sit 2 + 4 ndim bytes in, never aligned for wider elements): aligned, since a bytes object's buffer is
    (`_BYTES_ALIGNED`), and read-only, since a bytes object is immutable. One small copy, three calls.
    """
    dtype_code, ndim = payload[0], payload[1]
    native = _NATIVE_LE[dtype_code]
    if native is None or not _BYTES_ALIGNED:
        array = _copied_array(payload, dtype_code, ndim, _SHAPE_STRUCTS[ndim].unpack_from(payload, _HEADER.size))
        array.setflags(write=False)
        return array
    if ndim == 1:
        return _frombuffer(payload[6:], native)
    return _ndarray(_SHAPE_STRUCTS[ndim].unpack_from(payload, _HEADER.size), native, payload[_HEADER.size + 4 * ndim:])


_frombuffer = np.frombuffer
_ndarray = np.ndarray
_unpackb = msgpack.unpackb
# CPython allocates objects 16-byte aligned and a bytes object's elements start 32 bytes into it: an array
# over a whole bytes object is aligned for every dtype here. Checked once, in case an interpreter differs.
_BYTES_ALIGNED = all(np.frombuffer(bytes(8 * size)[8:], np.float64).flags.aligned for size in (2, 64, 1 << 12, 1 << 17))


# --------------------------------------------------------------------------- trusted in-place reading
#
# A large message is read by `_read` instead of msgpack: msgpack copies every ext payload out into a bytes
# object of its own, which the array must then copy again to be aligned. `_read` makes each array a
# read-only view of the message's own buffer where the elements happen to be aligned there, and one
# aligned copy where they are not. It reads only what this module's encoder writes (no maps, no other ext
# types) and checks nothing: it is for bytes `encode` produced in this process.

#: Messages (and shared bodies) of at least this many bytes are read in place by `_read`.
IN_PLACE_BYTES = 1 << 16


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


def _array_in_place(data: Any, start: int, end: int) -> np.ndarray:
    """The array whose ext payload is ``data[start:end]``: a read-only view of ``data`` where aligned, else
    one read-only aligned copy."""
    code, ndim = data[start], data[start + 1]
    shape = _SHAPE_STRUCTS[ndim].unpack_from(data, start + _HEADER.size)
    native = _NATIVE_LE[code]
    if native is None:
        array = _copied_array(bytes(data[start:end]), code, ndim, shape)
    else:
        array = _ndarray(shape, native, data, start + _HEADER.size + 4 * ndim)
        if not array.flags.aligned:
            array = array.copy()
    array.setflags(write=False)
    return array


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
    ``where``; ``convert`` (None = identity) rebuilds the Python value from bytes this process packed.
    ``inline`` (None = a call of ``emit``) writes source lines doing what ``emit`` does, fast path first,
    for a message's compiled encoder (`_compile_emitter`).
    """

    def __init__(
        self,
        describe: str,
        emit: Callable[[Any, list[Any]], None],
        unpack: Callable[[Any, str], Any],
        convert: Callable[[Any], Any] | None = None,
        inline: Callable[[str, _Bindings], list[str]] | None = None,
    ) -> None:
        self.describe = describe
        self.emit = emit
        self.unpack = unpack
        self.convert = convert
        self.inline = inline

    def source(self, var: str, bindings: _Bindings) -> list[str]:
        """Lines appending the encoding of the value in ``var`` to ``out`` (through ``append``)."""
        if self.inline is not None:
            return self.inline(var, bindings)
        return [f"{bindings.name(self.emit)}({var}, out)"]


class _Bindings:
    """The objects a compiled encoder's source refers to, each under a generated name."""

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
        return _Field("int", _emit_int, unpack, inline=_inline_int)
    return _Field(kind.__name__, _packing(pack), unpack)


def _emit_int(value: Any, chunks: list[Any]) -> None:
    """An int field's ``emit``: small ints (round numbers, counts, ids) from a cache of their packed bytes."""
    packed = _PACKED_INTS.get(value) if type(value) is int else None
    if packed is None:
        packed = msgpack.packb(_pack_int(value), use_bin_type=True)
        if type(value) is int and -(1 << 15) <= value < 1 << 20 and len(_PACKED_INTS) < _INT_CACHE_LIMIT:
            _PACKED_INTS[value] = packed
    chunks.append(packed)


def _inline_int(var: str, bindings: _Bindings) -> list[str]:
    """`_emit_int`, its cache hit inline."""
    return [
        f"packed = _PACKED_INTS.get({var}) if type({var}) is int else None",
        "if packed is None:",
        f"    _emit_int({var}, out)",
        "else:",
        "    append(packed)",
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
    checks_more = check_finite or (spec.shape is not None and any(length is not None for length in spec.shape))

    def inline(var: str, bindings: _Bindings) -> list[str]:
        """``emit`` for an ndarray of exactly the native little-endian dtype (and the declared ndim) inline:
        the fields' dtype is known, so is its code; anything else goes through ``emit``."""
        native = _NATIVE_LE[code]
        if native is None:
            return [f"{bindings.name(emit)}({var}, out)"]
        condition = f"type({var}) is {bindings.name(np.ndarray)} and {var}.dtype is {bindings.name(native)}"
        if spec.ndim is not None:
            condition += f" and {var}.ndim == {spec.ndim}"
        headers = bindings.name({})
        return [
            f"if {condition}:",
            *([f"    {bindings.name(check)}({var}, 'encode')"] if checks_more else []),
            f"    append({headers}.get({var}.shape) or _array_ext_header({code}, {var}, {headers}, {var}.shape))",
            f"    append({var}.tobytes() if {var}.nbytes <= _SMALL_ARRAY_BYTES"
            f" else {bindings.name(np.ascontiguousarray)}({var}))",
            "else:",
            f"    {bindings.name(emit)}({var}, out)",
        ]

    return _Field(f"ndarray[{spec.dtype}]", emit, unpack, inline=inline)


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

    return _Field(f"tuple[{item.describe}, ...]", emit, unpack, convert)


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

    def inline(var: str, bindings: _Bindings) -> list[str]:
        return [
            f"if {var} is None:",
            "    append(_NIL)",
            "else:",
            *(f"    {line}" for line in item.source(var, bindings)),
        ]

    return _Field(f"{item.describe} | None", emit, unpack, None if item.convert is None else convert, inline)


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
    """How one message kind is encoded; ``head`` is the packed envelope array header and kind tag.

    ``emit`` validates a message's fields and appends their encoding to a list of chunks, then runs the
    message's ``validate`` (`_compile_emitter`); ``build`` makes a message of the kind from its field
    values in order (`_builder`).
    """

    kind: str
    cls: type
    names: tuple[str, ...]
    fields: tuple[_Field, ...]
    converters: tuple[tuple[int, Callable[[Any], Any]], ...]
    validates: bool
    head: bytes
    emit: Callable[[Any, list[Any]], None]
    build: Callable[[list[Any]], Any]


def _compile_emitter(
    kind: str, names: tuple[str, ...], fields: tuple[_Field, ...], validates: bool
) -> Callable[[Any, list[Any]], None]:
    """One function encoding every field of a message kind, as `_Field.emit` would one by one.

    The source is each field's `_Field.source` in declaration order (their fast paths inline: no call per
    field, the dtype of an array field known in advance), wrapped so that a `WireError` is raised again
    naming its field, then the message's ``validate``. It finds the packed ints' cache by its global name
    (so it sees the module's current one); each array field keeps a header cache of its own, by shape.
    """
    bindings = _Bindings()
    lines = ["def emitter(body, out):", "    append = out.append"]
    if names:
        lines.append("    try:")
        for position, (name, field) in enumerate(zip(names, fields)):
            lines.append(f"        v{position} = body.{name}")
            lines.extend(f"        {line}" for line in field.source(f"v{position}", bindings))
        lines += [
            "    except WireError:",
            f"        _raise_naming_the_field({bindings.name(kind)}, {bindings.name(names)}, {bindings.name(fields)}, body)",
            "        raise",
        ]
    if validates:
        lines += [
            "    try:",
            "        body.validate()",
            "    except ValueError as exc:",
            f"        raise WireError(f'{{{bindings.name(kind)}}}: {{exc}}') from exc",
        ]
    return _compiled(lines, bindings)


def _compiled(lines: list[str], bindings: _Bindings) -> Any:
    """The function whose source is ``lines`` (a ``def``), its free names bound to ``bindings``' objects
    and its global names the module's."""
    factory = f"def make({', '.join(bindings.objects)}):\n" + "".join(f"    {line}\n" for line in lines)
    factory += f"    return {lines[0][len('def '):lines[0].index('(')]}\n"
    namespace: dict[str, Any] = {}
    exec(factory, globals(), namespace)  # noqa: S102 -- source built from message field declarations only
    return namespace["make"](**bindings.objects)


def _builder(cls: type, names: tuple[str, ...]) -> Callable[[list[Any]], Any]:
    """How `decode_trusted` rebuilds a message from field values its own encoder validated.

    A plain frozen dataclass (a ``__dict__``, every field an ``__init__`` argument, no ``__post_init__``)
    gets its fields stored straight into its ``__dict__`` by a compiled function, as its ``__init__``
    would set them: ``__init__`` of a frozen dataclass sets each field through ``object.__setattr__``,
    which is most of what a small message costs to rebuild. Any other class is called as usual.
    """
    plain = (
        "__slots__" not in cls.__dict__
        and not hasattr(cls, "__post_init__")
        and all(field.init for field in dataclasses.fields(cls))
    )
    if not plain:
        return lambda values: cls(*values)
    bindings = _Bindings()
    lines = ["def build(values):", f"    body = {bindings.name(object.__new__)}({bindings.name(cls)})"]
    if names:
        lines += ["    fields = body.__dict__", "    " + ", ".join(f"fields[{name!r}]" for name in names) + ", = values"]
    return _compiled([*lines, "    return body"], bindings)


_BY_KIND: dict[str, _Codec] = {}
_BY_CLASS: dict[type, _Codec] = {}

M = TypeVar("M")


def message(kind: str) -> Callable[[type[M]], type[M]]:
    """Class decorator registering a frozen dataclass as the message ``kind`` (e.g. ``"fcf.item_request"``).

    A message may define ``validate(self)`` to check relations between fields (e.g. equal lengths); the
    decoder calls it and turns any ValueError it raises into a `WireError`.

    A kind names one class: registering a kind that another class -- another module or qualified name --
    already holds raises ValueError naming both, at import time, instead of silently taking the kind over.
    Registering the same class again (same module and qualified name, e.g. a reloaded module) replaces
    the earlier registration.
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
        converters = tuple(
            (position, field.convert) for position, field in enumerate(fields) if field.convert is not None
        )
        head = _array_header(_ENVELOPE_HEADER_LEN + len(fields)) + msgpack.packb(kind, use_bin_type=True)
        validates = callable(getattr(cls, "validate", None))
        codec = _Codec(
            kind, cls, names, fields, converters, validates, head,
            _compile_emitter(kind, names, fields, validates), _builder(cls, names),
        )
        if existing is not None:
            _BY_CLASS.pop(existing.cls, None)
        _BY_KIND[kind] = codec
        _BY_CLASS[cls] = codec
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


def encode(src: Party, dst: Party, sent_at: float, body: Any, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> bytes:
    """Encode one envelope. Raises WireError for an unregistered body type or a field of the wrong type."""
    codec = _BY_CLASS.get(type(body)) or _codec_of(body)
    chunks = [
        codec.head,
        _PARTY_BYTES.get(src) or _party_bytes(src),
        _PARTY_BYTES.get(dst) or _party_bytes(dst),
        _FLOAT.pack(0xCB, float(sent_at)),
    ]
    codec.emit(body, chunks)
    data = b"".join(chunks)
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
    tail = b"".join((_FLOAT.pack(0xCB, float(sent_at)), *_body_chunks(codec, body)))
    encoded: list[bytes | Broadcast]
    if len(tail) >= SHARED_BODY_BYTES:
        shared = SharedBody(codec, tail)
        encoded = [Broadcast(head + _party_bytes(dst), shared) for dst in dsts]
    else:
        encoded = [b"".join((head, _party_bytes(dst), tail)) for dst in dsts]
    if encoded:
        _check_size(codec.kind, max(map(len, encoded)), max_bytes)
    return encoded


class SharedBody:
    """The encoded body -- ``sent_at`` and the fields -- of one broadcast, held by every copy.

    `decoded` decodes it once, on the first delivery, with every array read-only; `digest`, its XXH3-128,
    stands for the bytes in the transcript hash (`fedrecsim.network.ledger`).
    """

    __slots__ = ("_codec", "data", "_decoded", "_digest")

    def __init__(self, codec: _Codec, data: bytes) -> None:
        self._codec = codec
        self.data = data
        self._decoded: tuple[float, Any] | None = None
        self._digest: bytes | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (a checkpoint's message in flight) as its kind and bytes; decoded again when delivered."""
        return (_shared_body, (self._codec.kind, self.data))

    def digest(self) -> bytes:
        if self._digest is None:
            self._digest = xxhash.xxh3_128_digest(self.data)
        return self._digest

    def decoded(self) -> tuple[float, Any]:
        """``(sent_at, body)``, the same objects for every caller."""
        if self._decoded is None:
            sent_at, *values = _read_list(self.data, 0, 1 + len(self._codec.fields))[0]
            for position, convert in self._codec.converters:
                values[position] = convert(values[position])
            self._decoded = (sent_at, self._codec.build(values))
        return self._decoded


def _shared_body(kind: str, data: bytes) -> SharedBody:
    return SharedBody(_BY_KIND[kind], data)


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
    message instead of twice. Its arrays are read-only: views of the bytes where aligned, else copies
    (`_trusted_ext_hook`; `_read` for messages of `IN_PLACE_BYTES` or more). Bytes of unknown origin must
    go through `decode`.
    """
    if len(data) < IN_PLACE_BYTES:
        frame = _unpackb(data, raw=False, use_list=True, ext_hook=_trusted_ext_hook)
    else:
        frame = _read(data, 0)[0]
    codec = _BY_KIND[frame[0]]
    values = frame[_ENVELOPE_HEADER_LEN:]
    for position, convert in codec.converters:
        values[position] = convert(values[position])
    src = _PARTIES.get((frame[1], frame[2])) or _decode_party(frame[1], frame[2], "src")
    dst = _PARTIES.get((frame[3], frame[4])) or _decode_party(frame[3], frame[4], "dst")
    return _envelope(codec.kind, src, dst, frame[5], codec.build(values))


def decode_broadcast(kind: str, src: Party, dst: Party, copy: Broadcast) -> Envelope:
    """The envelope of one destination's copy of a shared-body broadcast (its body shared, read-only)."""
    sent_at, body = copy.shared.decoded()
    return _envelope(kind, src, dst, sent_at, body)


def _envelope(kind: str, src: Party, dst: Party, sent_at: float, body: Any) -> Envelope:
    """``Envelope(kind, src, dst, sent_at, body)``, setting the slots directly: the frozen dataclass's
    ``__init__`` goes through ``object.__setattr__`` per field, twice the cost, once per delivery."""
    envelope = _new(Envelope)
    _SET_KIND(envelope, kind)
    _SET_SRC(envelope, src)
    _SET_DST(envelope, dst)
    _SET_SENT_AT(envelope, sent_at)
    _SET_BODY(envelope, body)
    return envelope


_new = object.__new__
_SET_KIND, _SET_SRC, _SET_DST, _SET_SENT_AT, _SET_BODY = (
    getattr(Envelope, name).__set__ for name in ("kind", "src", "dst", "sent_at", "body")
)


__all__ = [
    "Array",
    "ArraySpec",
    "Broadcast",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "Envelope",
    "SHARED_BODY_BYTES",
    "SharedBody",
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
