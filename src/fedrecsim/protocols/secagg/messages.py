"""The secure-aggregation message set -- Bonawitz et al. 2017's rounds as a sequence diagram in code.

    server -> user    secagg.setup        the session: ring, vector length, threshold t, the user's neighbours
    user   -> server  secagg.advertise    AdvertiseKeys: the user's two X25519 public keys (c, s)
    server -> user    secagg.keys         the public keys of the user's neighbours that advertised (U1)
    user   -> server  secagg.shares       ShareKeys: for each such neighbour, its sealed shares of b_u and s_u^SK
    server -> user    secagg.ciphertexts  the sealed shares addressed to the user by neighbours in U2
    user   -> server  secagg.masked       MaskedInputCollection: y_u = x_u + PRG(b_u) +- pairwise masks
    server -> user    secagg.unmask       Unmasking: which of the user's neighbours sent y (U3)
    user   -> server  secagg.reveal       shares of b_v for v in U3, of s_v^SK for its neighbours in U2 \\ U3

Every message carries the ``session`` it belongs to, so a user can tell a late message of an earlier
session from the current one. Indices are user party indices. ConsistencyCheck (the signatures of the
actively secure variant) is omitted: the server here is honest-but-curious. Arrays of public keys,
ciphertexts and shares are fixed-width rows of bytes, so every message's size depends on the number of
rows only -- the ideal mode relies on that to send exactly the bytes of the real one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...network.wire import Array, message
from .crypto import CIPHERTEXT_BYTES, KEY_BYTES
from .shamir import SHARE_BYTES


def _check_rows(name: str, owners: object, *rows: object) -> None:
    size = len(owners)  # type: ignore[arg-type]
    for row in rows:
        if len(row) != size:  # type: ignore[arg-type]
            raise ValueError(f"{name}: every row array must have one row per index")


@message("secagg.setup")
@dataclass(frozen=True)
class Setup:
    """Session ``session``: sum vectors of ``length`` words of Z_{2^bits}, t = ``threshold``, your neighbours."""

    session: int
    bits: int
    length: int
    threshold: int
    neighbours: Array("int32", ndim=1)


@message("secagg.advertise")
@dataclass(frozen=True)
class Advertise:
    """AdvertiseKeys: the public keys c_u^PK (encryption) and s_u^PK (masking)."""

    session: int
    c_public: bytes
    s_public: bytes


@message("secagg.keys")
@dataclass(frozen=True)
class Keys:
    """The (c^PK, s^PK) of each neighbour that advertised, one row per index in ``owners``."""

    session: int
    owners: Array("int32", ndim=1)
    c_publics: Array("uint8", shape=(None, KEY_BYTES))
    s_publics: Array("uint8", shape=(None, KEY_BYTES))

    def validate(self) -> None:
        _check_rows("secagg.keys", self.owners, self.c_publics, self.s_publics)


@message("secagg.shares")
@dataclass(frozen=True)
class Shares:
    """ShareKeys: one sealed pair of shares for each index in ``recipients``."""

    session: int
    recipients: Array("int32", ndim=1)
    ciphertexts: Array("uint8", shape=(None, CIPHERTEXT_BYTES))

    def validate(self) -> None:
        _check_rows("secagg.shares", self.recipients, self.ciphertexts)


@message("secagg.ciphertexts")
@dataclass(frozen=True)
class Ciphertexts:
    """The sealed share pairs addressed to the receiver, one per index in ``senders`` (its U2 neighbours)."""

    session: int
    senders: Array("int32", ndim=1)
    ciphertexts: Array("uint8", shape=(None, CIPHERTEXT_BYTES))

    def validate(self) -> None:
        _check_rows("secagg.ciphertexts", self.senders, self.ciphertexts)


@message("secagg.masked")
@dataclass(frozen=True)
class Masked:
    """MaskedInputCollection: y_u as little-endian words of Z_{2^bits}."""

    session: int
    masked: bytes


@message("secagg.unmask")
@dataclass(frozen=True)
class Unmask:
    """Unmasking: the receiver's neighbours whose masked input arrived (U3)."""

    session: int
    survivors: Array("int32", ndim=1)


@message("secagg.reveal")
@dataclass(frozen=True)
class Reveal:
    """The receiver's shares of b_v for ``b_owners`` (U3 and itself) and of s_v^SK for ``sk_owners``."""

    session: int
    b_owners: Array("int32", ndim=1)
    b_shares: Array("uint8", shape=(None, SHARE_BYTES))
    sk_owners: Array("int32", ndim=1)
    sk_shares: Array("uint8", shape=(None, SHARE_BYTES))

    def validate(self) -> None:
        _check_rows("secagg.reveal", self.b_owners, self.b_shares)
        _check_rows("secagg.reveal", self.sk_owners, self.sk_shares)


__all__ = ["Advertise", "Ciphertexts", "Keys", "Masked", "Reveal", "Setup", "Shares", "Unmask"]
