"""The ldp_implicit message set -- Minto et al.'s protocol as a sequence diagram.

    user   -> proxy   core.join / core.leave  membership, sent to the user's home proxy (never the server)
    server -> proxy   ldp.model         epoch e: the whole item matrix V (M x F)
    proxy  -> user    ldp.model         the same V, re-sent by the proxy to each of its online members
    proxy  -> server  ldp.relayed       how many users the proxy forwarded V to (a count, no identities)
    user   -> proxy   ldp.reports       the user's k eps-LDP reports of epoch e (to a proxy drawn per epoch)
    proxy  -> server  ldp.report_batch  single reports of many users, shuffled, in numbered batches

The proxy network sits between the server and the users in both directions (Minto et al. Sec. 3.1.2),
so every message the server receives has a proxy as its sender, and no message body names a user.

A report is Algorithm 1's output ``(flat index i*F + f, sign)``. On the wire a message of ``n`` reports
carries the indices as ``int32[n]`` and the signs as ``uint8[ceil(n / 8)]``, one bit per report
(`numpy.packbits`, big-endian bit order, bit 1 meaning +B, unused trailing bits zero): about the
paper's "one 4-byte integer and one-bit boolean" per report (Sec. 5.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

import numpy as np

from ...network.wire import Array, message


def pack_signs(bits: np.ndarray) -> np.ndarray:
    """Signs in {-1, +1} (any integer dtype, 1-D) to the packed wire form: one bit per sign, 1 = +1."""
    return np.packbits(np.asarray(bits) > 0)


def unpack_signs(packed: np.ndarray, count: int) -> np.ndarray:
    """The wire form back to ``int8[count]`` signs in {-1, +1}."""
    signs = np.unpackbits(packed, count=count).view(np.int8)
    # {0, 1} -> {-1, +1} in place (unpackbits returned a fresh array).
    signs *= 2
    signs -= 1
    return signs


def _check_reports(epoch: int, indices: np.ndarray, signs: np.ndarray) -> None:
    """What every report-carrying message promises: an epoch, >= 1 report, and tight sign packing."""
    if epoch < 1:
        raise ValueError(f"epoch must be >= 1, got {epoch}")
    if indices.size == 0:
        raise ValueError("a report message carries at least one report")
    if indices.min() < 0:
        raise ValueError("report indices must be non-negative")
    if signs.size != (indices.size + 7) // 8:
        raise ValueError(f"{indices.size} reports need {(indices.size + 7) // 8} sign bytes, got {signs.size}")
    padding = 8 * signs.size - indices.size
    if padding and int(signs[-1]) & ((1 << padding) - 1):
        raise ValueError("the unused trailing sign bits must be zero")


@message("ldp.model")
@dataclass(frozen=True)
class Model:
    """Epoch ``epoch`` starts: the server's current item matrix V."""

    epoch: int
    item_factors: Array("float64", ndim=2)

    def validate(self) -> None:
        if self.epoch < 1:
            raise ValueError(f"epoch must be >= 1, got {self.epoch}")


@message("ldp.relayed")
@dataclass(frozen=True)
class Relayed:
    """The proxy forwarded epoch ``epoch``'s V to ``users`` users (so the server knows how many reports to await)."""

    epoch: int
    users: int

    def validate(self) -> None:
        if self.epoch < 1:
            raise ValueError(f"epoch must be >= 1, got {self.epoch}")
        if self.users < 0:
            raise ValueError(f"users must be >= 0, got {self.users}")


@dataclass(frozen=True)
class _PackedReports:
    """Reports of epoch ``epoch``: flat indices and packed signs (see the module docstring)."""

    epoch: int
    indices: Array("int32", ndim=1)
    signs: Array("uint8", ndim=1)

    def validate(self) -> None:
        _check_reports(self.epoch, self.indices, self.signs)

    @classmethod
    def pack(cls, epoch: int, indices: np.ndarray, bits: np.ndarray, **more: int) -> Self:
        """The message of ``epoch``'s reports ``(indices[r], bits[r])``; ``more``: the subclass's own fields."""
        return cls(epoch, np.asarray(indices, dtype=np.int32), pack_signs(bits), **more)

    def unpack(self) -> tuple[np.ndarray, np.ndarray]:
        """``(int32[n] indices, int8[n] signs in {-1, +1})``."""
        return self.indices, unpack_signs(self.signs, self.indices.size)


@message("ldp.reports")
@dataclass(frozen=True)
class Reports(_PackedReports):
    """One user's k reports of epoch ``epoch``."""


@message("ldp.report_batch")
@dataclass(frozen=True)
class ReportBatch(_PackedReports):
    """Shuffled single reports of epoch ``epoch`` from many users; nothing says whose or in what order.

    ``batch`` numbers the proxy's batches of the epoch from 0, so that the server counts each batch once
    even when the network delivers it twice (it says only the order in which the proxy sent them).
    """

    batch: int = 0

    def validate(self) -> None:
        super().validate()
        if self.batch < 0:
            raise ValueError(f"batch must be >= 0, got {self.batch}")


__all__ = ["Model", "Relayed", "ReportBatch", "Reports", "pack_signs", "unpack_signs"]
