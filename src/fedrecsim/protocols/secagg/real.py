"""The real cryptography of a session: what a user computes with its secrets, and how the server unmasks.

A user u holds, per session, two X25519 key pairs (c_u, s_u) and a self-mask seed b_u (32 bytes). It
shares b_u and s_u^SK t-of-(k + 1) among its neighbourhood (itself included, x-coordinate = party index
+ 1), seals each neighbour's pair of shares with AES-GCM under HKDF(c_u^SK . c_v^PK), and masks its input

    y_u = x_u + PRG(b_u) + sum_{v in U2 n N(u), v < u} PRG(s_uv) - sum_{v in U2 n N(u), v > u} PRG(s_uv)

in Z_{2^b}, s_uv = HKDF(s_u^SK . s_v^PK). Over U3 every pairwise mask between two survivors is added once
and subtracted once; the server removes PRG(b_u) for u in U3 and, for each v that dropped after sharing
(U2 \\ U3), the masks s_uv it left in its surviving neighbours' inputs, from reconstructed secrets.

Invariant (the privacy argument): the server reconstructs b_u only for u in U3 and s_v^SK only for v not
in U3, so for no user does it learn both; a single y_u stays uniformly masked by PRG(b_u).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ...errors import ProtocolViolation
from ...mechanisms.ring import Ring
from . import crypto, prg, shamir


def rows_of(blobs: Sequence[bytes], width: int) -> np.ndarray:
    """``blobs`` of ``width`` bytes each as the rows of a uint8 matrix (a message's fixed-width rows)."""
    return np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), width)


def x_of(index: int) -> int:
    """The Shamir x-coordinate of the user with party index ``index``."""
    return index + 1


def pairwise_mask(keys: crypto.KeyPair, peer_public: bytes, session: int, length: int, ring: Ring) -> np.ndarray:
    """PRG(s_uv): the mask u shares with the owner of ``peer_public`` (the same from either side)."""
    return prg.expand(crypto.derive(keys.agree(peer_public), b"mask", session), length, ring.dtype)


class RealUser:
    """One user's secrets and computations in one session."""

    def __init__(self, index: int, rng: np.random.Generator, session: int, ring: Ring) -> None:
        self.index = index
        self.rng = rng
        self.session = session
        self.ring = ring
        self.c = crypto.KeyPair.generate(rng)
        self.s = crypto.KeyPair.generate(rng)
        self.b_seed = rng.bytes(prg.SEED_BYTES)
        self.peers: dict[int, tuple[bytes, bytes]] = {}
        self._encryption: dict[int, bytes] = {}
        self.held: dict[int, tuple[int, int]] = {}
        """The shares (of b_v, of s_v^SK) this user holds, by owner v (itself included)."""

    def advertise(self) -> tuple[bytes, bytes]:
        return self.c.public, self.s.public

    def share(self, peers: Mapping[int, tuple[bytes, bytes]], threshold: int) -> dict[int, bytes]:
        """Share b_u and s_u^SK among ``peers`` (index -> (c^PK, s^PK)) and this user; seal each pair."""
        self.peers = dict(peers)
        holders = sorted([*self.peers, self.index])
        xs = [x_of(holder) for holder in holders]
        b_shares = shamir.split(int.from_bytes(self.b_seed, "big"), threshold, xs, self.rng)
        sk_shares = shamir.split(int.from_bytes(self.s.private, "big"), threshold, xs, self.rng)
        mine = x_of(self.index)
        self.held[self.index] = (b_shares[mine], sk_shares[mine])
        sealed = {}
        for peer, (c_public, _) in sorted(self.peers.items()):
            key = self._key(peer, c_public)
            sealed[peer] = crypto.seal(key, self.session, self.index, peer, b_shares[x_of(peer)], sk_shares[x_of(peer)])
        return sealed

    def receive(self, sealed: Mapping[int, bytes]) -> None:
        """Open the share pairs neighbours sealed for this user (`crypto.open_sealed` checks them)."""
        for sender, ciphertext in sorted(sealed.items()):
            key = self._key(sender, self.peers[sender][0])
            self.held[sender] = crypto.open_sealed(key, self.session, sender, self.index, ciphertext)

    def mask(self, x: np.ndarray, partners: Sequence[int]) -> np.ndarray:
        """y_u: ``x`` plus the self mask plus the pairwise masks with ``partners`` (U2 neighbours)."""
        ring = self.ring
        y = ring.add(x, prg.expand(self.b_seed, x.size, ring.dtype))  # a new array: x stays the caller's
        for peer in sorted(partners):
            mask = pairwise_mask(self.s, self.peers[peer][1], self.session, x.size, ring)
            # In place, mod 2^b like `Ring.add` / `Ring.sub`: y and the mask are arrays of the ring's dtype.
            (np.add if peer < self.index else np.subtract)(y, mask, out=y)
        return y

    def reveal(self, b_owners: Sequence[int], sk_owners: Sequence[int]) -> tuple[list[bytes], list[bytes]]:
        """The held shares of b_v for ``b_owners`` and of s_v^SK for ``sk_owners``, as wire bytes."""
        return (
            [shamir.to_bytes(self.held[owner][0]) for owner in b_owners],
            [shamir.to_bytes(self.held[owner][1]) for owner in sk_owners],
        )

    # What `roles.participate` calls: the messages' rows (`ideal.IdealUser` has the same three).

    def share_rows(self, peers: Mapping[int, tuple[bytes, bytes]], threshold: int) -> tuple[list[int], np.ndarray]:
        """`share` as the recipients, ascending, and their sealed pairs, one row each."""
        sealed = self.share(peers, threshold)
        recipients = sorted(sealed)
        return recipients, rows_of([sealed[peer] for peer in recipients], crypto.CIPHERTEXT_BYTES)

    def receive_rows(self, senders: Sequence[int], ciphertexts: np.ndarray) -> None:
        """`receive` of one row of ``ciphertexts`` per sender."""
        self.receive({sender: bytes(row) for sender, row in zip(senders, ciphertexts)})

    def reveal_rows(self, b_owners: Sequence[int], sk_owners: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """`reveal` as rows of wire bytes."""
        b_shares, sk_shares = self.reveal(b_owners, sk_owners)
        return rows_of(b_shares, shamir.SHARE_BYTES), rows_of(sk_shares, shamir.SHARE_BYTES)

    def _key(self, peer: int, c_public: bytes) -> bytes:
        key = self._encryption.get(peer)
        if key is None:
            key = self._encryption[peer] = crypto.derive(self.c.agree(c_public), b"encrypt", self.session)
        return key


def _secret(shares: Mapping[int, bytes], threshold: int, what: str) -> bytes:
    try:
        value = shamir.reconstruct({x: shamir.from_bytes(share) for x, share in shares.items()}, threshold)
        return value.to_bytes(prg.SEED_BYTES, "big")
    except (shamir.ShamirError, OverflowError) as exc:
        raise ProtocolViolation(f"server:0 could not reconstruct {what}: {exc}") from exc


class RealServer:
    """The server's side of the cryptography: removing the masks from the sum of the survivors' inputs."""

    def __init__(self, session: int, ring: Ring) -> None:
        self.session = session
        self.ring = ring

    def unmask(
        self,
        total: np.ndarray,
        s_publics: Mapping[int, bytes],
        b_shares: Mapping[int, Mapping[int, bytes]],
        sk_shares: Mapping[int, Mapping[int, bytes]],
        partners: Mapping[int, Sequence[int]],
        threshold: int,
    ) -> np.ndarray:
        """Sum of the survivors' inputs from the sum of their masked inputs.

        Args:
            total: sum over U3 of y_u.
            s_publics: s^PK of every user in U1, by index.
            b_shares: for each u in U3, its revealed b-shares by x-coordinate (at least ``threshold``).
            sk_shares: for each dropped v whose masks must go, its s^SK-shares by x-coordinate.
            partners: for each such v, its neighbours in U3 (those who masked with it).
        """
        ring = self.ring
        total = np.array(total, dtype=ring.dtype)  # this method's own copy, unmasked in place (mod 2^b)
        for owner, shares in sorted(b_shares.items()):
            seed = _secret(shares, threshold, f"b of user:{owner}")
            np.subtract(total, prg.expand(seed, total.size, ring.dtype), out=total)
        for owner, shares in sorted(sk_shares.items()):
            keys = crypto.KeyPair(_secret(shares, threshold, f"s^SK of user:{owner}"))
            for survivor in sorted(partners[owner]):
                mask = pairwise_mask(keys, s_publics[survivor], self.session, total.size, ring)
                # The survivor added the mask if the dropped user's index is below its own.
                (np.subtract if owner < survivor else np.add)(total, mask, out=total)
        return total


__all__ = ["RealServer", "RealUser", "pairwise_mask", "rows_of", "x_of"]
