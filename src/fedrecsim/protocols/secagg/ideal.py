"""The ideal mode: the same session without the cryptography, for scale.

Secure aggregation realizes an ideal functionality: the server learns the sum of the inputs of the users
in U3 and nothing else. In ideal mode that functionality is an object, `IdealSum`, that the protocol's
wiring hands to the server and the users -- the one thing parties share besides messages, on purpose: it
stands for the cryptography. Users deposit their input with it; the server asks it for the sum over U3.

Every message of the real session is still sent, by the same state machines (`roles`), with payloads of
exactly the real sizes filled with zeros: public keys, sealed share pairs and revealed shares are
fixed-width. The masked input, the one payload that grows with the input (m p words per user in
PriviRec), is sent empty and booked as padding (`Network.send`): the ledger, the size limit and the
links' bandwidth count its real bytes. So the ledger counts the same bytes, message by message, as in
real mode, and the same users drop and the same aborts happen. What is skipped is the work: no key
agreement, no Shamir, no AEAD, no PRG expansion, and no masked vector built, sent or summed.

Honesty note: the zeros on the wire are not what a real party would send, so a view recorded in ideal
mode is not an attack surface; record views in real mode.

Sparse inputs: a user whose input is zero but for a few rows of its matrix view (PriviRec's
A^(u)T A^(u) X is nonzero on the user's items only) may deposit it as a `RowBlock`; the sum is the same,
ring element for ring element, as the dense inputs' -- without a dense vector per user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import ProtocolViolation
from ...mechanisms.ring import Ring
from . import crypto, shamir


@dataclass(frozen=True)
class RowBlock:
    """A vector of ``n_rows * width`` elements given by its nonzero rows: the row-major (n_rows, width)
    matrix that is ``block`` on ``rows`` and zero elsewhere.

    Invariants: ``rows`` are distinct indices in [0, n_rows); ``block`` has shape (len(rows), width).
    """

    rows: np.ndarray
    block: np.ndarray
    n_rows: int

    @property
    def size(self) -> int:
        """The dense vector's length."""
        return self.n_rows * self.block.shape[1]

    @property
    def dtype(self) -> np.dtype:
        return self.block.dtype

    def dense(self) -> np.ndarray:
        """The vector itself."""
        matrix = np.zeros((self.n_rows, self.block.shape[1]), dtype=self.block.dtype)
        matrix[self.rows] = self.block
        return matrix.ravel()


class IdealSum:
    """The ideal functionality: holds each user's input per session, gives the server only sums."""

    def __init__(self) -> None:
        self._inputs: dict[tuple[int, int], np.ndarray | RowBlock] = {}

    def deposit(self, session: int, index: int, x: np.ndarray | RowBlock) -> None:
        """User ``index`` commits its input to ``session`` (what sending y_u does in real mode)."""
        if isinstance(x, RowBlock):
            self._inputs[(session, index)] = RowBlock(x.rows.copy(), x.block.copy(), x.n_rows)
        else:
            self._inputs[(session, index)] = np.array(x, copy=True)

    def total(self, session: int, indices: Sequence[int], ring: Ring, length: int) -> np.ndarray:
        """The sum of the deposited inputs of ``indices`` in ``session``, in sorted order.

        Raises:
            ProtocolViolation: one of them deposited nothing (it never sent a masked input).
        """
        total = np.zeros(length, dtype=ring.dtype)
        for index in sorted(indices):
            x = self._inputs.get((session, index))
            if x is None:
                raise ProtocolViolation(f"user:{index} sent no masked input in session {session}")
            if isinstance(x, RowBlock):
                view = total.reshape(x.n_rows, -1)
                view[x.rows] = ring.add(view[x.rows], x.block)
            else:
                total = ring.add(total, x)
        return total

    def release(self, session: int, indices: Sequence[int], ring: Ring, length: int) -> np.ndarray:
        """What the server gets at the end of ``session``: `total` over ``indices`` (U3); then the session
        is forgotten."""
        result = self.total(session, indices, ring, length)
        self.forget(session)
        return result

    def forget(self, session: int) -> None:
        """Drop what ``session`` holds (the server calls it when the session ends)."""
        for key in [key for key in self._inputs if key[0] == session]:
            del self._inputs[key]


class IdealUser:
    """A user's side in ideal mode: `real.RealUser`'s interface to `roles.participate`, zero payloads of
    real sizes, built as arrays at once."""

    def __init__(self, index: int, functionality: IdealSum, session: int, ring: Ring) -> None:
        self.index = index
        self.functionality = functionality
        self.session = session
        self.ring = ring

    def advertise(self) -> tuple[bytes, bytes]:
        return bytes(crypto.KEY_BYTES), bytes(crypto.KEY_BYTES)

    def share_rows(self, peers: Mapping[int, object], threshold: int) -> tuple[list[int], np.ndarray]:
        recipients = sorted(peers)
        return recipients, np.zeros((len(recipients), crypto.CIPHERTEXT_BYTES), dtype=np.uint8)

    def receive_rows(self, senders: Sequence[int], ciphertexts: np.ndarray) -> None:
        """Nothing to open."""

    def mask(self, x: np.ndarray | RowBlock, partners: Sequence[int]) -> np.ndarray:
        """Deposits ``x``; nothing to send (the masked input's bytes are booked as padding)."""
        self.functionality.deposit(self.session, self.index, x)
        return np.zeros(0, dtype=self.ring.dtype)

    def reveal_rows(self, b_owners: Sequence[int], sk_owners: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        return (np.zeros((len(b_owners), shamir.SHARE_BYTES), dtype=np.uint8),
                np.zeros((len(sk_owners), shamir.SHARE_BYTES), dtype=np.uint8))


__all__ = ["IdealSum", "IdealUser", "RowBlock"]
