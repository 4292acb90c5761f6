"""The wire's bytes as msgpack's own packer gives them: the reference the wire tests compare `wire.encode` with.

An envelope is the msgpack array ``[kind, src_role, src_index, dst_role, dst_index, sent_at, fields...]``; an
ndarray is ext type 1 holding ``uint8`` dtype code, ``uint8`` ndim, ``ndim`` x ``uint32`` shape (little-endian)
and the little-endian C-order elements; a `Party` is ``[role_code, index]``; a tuple is an array.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import msgpack
import numpy as np

from fedrecsim.network.party import Party

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "bool"]


def packable(value: Any) -> Any:
    """The logical msgpack structure of a field value."""
    if isinstance(value, np.ndarray):
        header = struct.pack(f"<BB{value.ndim}I", DTYPES.index(value.dtype.name), value.ndim, *value.shape)
        return msgpack.ExtType(1, header + np.ascontiguousarray(value, value.dtype.newbyteorder("<")).tobytes())
    if isinstance(value, Party):
        return [value.role.code, value.index]
    if isinstance(value, tuple):
        return [packable(element) for element in value]
    return value


def reference(src: Party, dst: Party, sent_at: float, body: Any) -> bytes:
    """What `wire.encode(src, dst, sent_at, body)` must give."""
    fields = [packable(getattr(body, field.name)) for field in dataclasses.fields(body)]
    return msgpack.packb([body.KIND, src.role.code, src.index, dst.role.code, dst.index, float(sent_at), *fields],
                         use_bin_type=True)
