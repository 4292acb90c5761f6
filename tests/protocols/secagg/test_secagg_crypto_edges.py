"""The cryptography's remaining promises: a sealed pair must name the pair it travels between, pairwise masks
are keyed by purpose and session, the server names the secret it cannot rebuild, and zero is a share."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedrecsim.errors import ProtocolViolation
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.protocols.secagg import crypto, prg, shamir
from fedrecsim.protocols.secagg.real import RealServer, RealUser, pairwise_mask, x_of


def _authentic(key: bytes, session: int, sender: int, recipient: int, plaintext: bytes) -> bytes:
    """A ciphertext under the pair's own key, nonce and associated data: it authenticates."""
    nonce = struct.pack("<II", sender, recipient) + bytes(4)
    associated = struct.pack("<q", session) + struct.pack("<II", sender, recipient)
    return AESGCM(key).encrypt(nonce, plaintext, associated)


def test_an_authentic_ciphertext_naming_another_pair_or_of_the_wrong_length_is_refused() -> None:
    rng = np.random.default_rng(0)
    a, b = crypto.KeyPair.generate(rng), crypto.KeyPair.generate(rng)
    key = crypto.derive(a.agree(b.public), b"encrypt", 4)
    shares = shamir.to_bytes(5) + shamir.to_bytes(6)
    good = _authentic(key, 4, 0, 1, struct.pack("<II", 0, 1) + shares)
    assert crypto.open_sealed(key, 4, 0, 1, good) == (5, 6)
    for named in ((2, 1), (0, 2), (1, 0)):
        moved = _authentic(key, 4, 0, 1, struct.pack("<II", *named) + shares)
        with pytest.raises(ProtocolViolation, match="^" + re.escape(f"user:1 expected shares from user:0 for itself, they name {named}") + "$"):
            crypto.open_sealed(key, 4, 0, 1, moved)
    short = _authentic(key, 4, 0, 1, struct.pack("<II", 0, 1) + shares[:-1])
    with pytest.raises(ProtocolViolation, match="expected shares from user:0 for itself"):
        crypto.open_sealed(key, 4, 0, 1, short)


def test_the_pairwise_mask_is_the_prg_of_the_mask_key_of_its_session() -> None:
    ring = Ring(64, 20)
    rng = np.random.default_rng(1)
    a, b = crypto.KeyPair.generate(rng), crypto.KeyPair.generate(rng)
    agreement = a.agree(b.public)
    mask = pairwise_mask(a, b.public, 7, 16, ring)
    np.testing.assert_array_equal(mask, prg.expand(crypto.derive(agreement, b"mask", 7), 16, np.uint64))
    np.testing.assert_array_equal(mask, pairwise_mask(b, a.public, 7, 16, ring))  # the same from either side
    assert not np.array_equal(mask, pairwise_mask(a, b.public, 8, 16, ring))  # fresh in every session
    assert not np.array_equal(mask, prg.expand(crypto.derive(agreement, b"encrypt", 7), 16, np.uint64))


def _users(n: int, threshold: int, ring: Ring) -> list[RealUser]:
    rng = np.random.default_rng(2)
    users = [RealUser(index, rng, 3, ring) for index in range(n)]
    keys = {user.index: user.advertise() for user in users}
    sealed = {user.index: user.share({p: keys[p] for p in keys if p != user.index}, threshold) for user in users}
    for user in users:
        user.receive({sender: sealed[sender][user.index] for sender in sealed if sender != user.index})
    return users


def test_the_server_names_the_secret_it_cannot_rebuild() -> None:
    ring = Ring(32, 16)
    users = _users(4, 3, ring)
    s_publics = {user.index: user.advertise()[1] for user in users}
    two = {x_of(holder.index): shamir.to_bytes(holder.held[1][0]) for holder in users[:2]}
    with pytest.raises(ProtocolViolation, match=r"^server:0 could not reconstruct b of user:1: 2 shares cannot"):
        RealServer(3, ring).unmask(np.zeros(4, ring.dtype), s_publics, {1: two}, {}, {}, 3)
    sk_two = {x_of(holder.index): shamir.to_bytes(holder.held[2][1]) for holder in users[:2]}
    with pytest.raises(ProtocolViolation, match=r"^server:0 could not reconstruct s\^SK of user:2: 2 shares cannot"):
        RealServer(3, ring).unmask(np.zeros(4, ring.dtype), s_publics, {}, {2: sk_two}, {2: [0, 1]}, 3)
    # A "secret" past 32 bytes is refused as well: shares that are no sharing of a seed.
    bogus = {1: shamir.to_bytes(0), 2: shamir.to_bytes(1)}  # f(x) = x - 1: f(0) = p - 1 > 2^256
    with pytest.raises(ProtocolViolation, match=r"^server:0 could not reconstruct b of user:0: "):
        RealServer(3, ring).unmask(np.zeros(4, ring.dtype), s_publics, {0: bogus}, {}, {}, 2)


def test_zero_is_a_share_value_like_any_other() -> None:
    # f(x) = 2x - 2 (secret p - 2) passes through (1, 0).
    assert shamir.interpolate_at_zero({1: 0, 2: 2}) == shamir.PRIME - 2
    assert shamir.reconstruct({1: 0, 2: 0, 3: 0}, 2) == 0
    assert shamir.from_bytes(bytes(shamir.SHARE_BYTES)) == 0
    assert shamir.from_bytes(bytes(shamir.SHARE_BYTES - 1) + b"\x01") == 1  # big-endian


def test_keys_nonces_and_associated_data_are_the_documented_ones() -> None:
    """Known answers: HKDF-SHA256 with info "fedrecsim secagg <purpose> <session>" and no salt; AES-256-GCM
    with the 12-byte nonce (sender, recipient, 0) and associated data (session, sender, recipient)."""
    rng = np.random.default_rng(3)
    a, b = crypto.KeyPair.generate(rng), crypto.KeyPair.generate(rng)
    agreement = a.agree(b.public)
    for purpose, session in ((b"encrypt", 0), (b"mask", 12), (b"encrypt", -1)):
        expected = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"fedrecsim secagg " + purpose + b" "
                        + str(session).encode()).derive(agreement)
        assert crypto.derive(agreement, purpose, session) == expected
        key = crypto.derive(agreement, b"encrypt", session)
        plaintext = struct.pack("<II", 2, 9) + shamir.to_bytes(11) + shamir.to_bytes(12)
        assert crypto.seal(key, session, 2, 9, 11, 12) == _authentic(key, session, 2, 9, plaintext)


def test_each_user_holds_the_polynomial_at_its_index_plus_one_and_t_of_them_rebuild_the_secrets() -> None:
    ring = Ring(32, 16)
    users = _users(5, 3, ring)
    for owner in users:
        for chosen in ((0, 1, 2), (1, 3, 4), (0, 2, 4)):
            b = {x_of(users[i].index): users[i].held[owner.index][0] for i in chosen}
            sk = {x_of(users[i].index): users[i].held[owner.index][1] for i in chosen}
            assert sorted(b) == [i + 1 for i in chosen]
            assert shamir.reconstruct(b, 3) == int.from_bytes(owner.b_seed, "big")
            assert shamir.reconstruct(sk, 3) == int.from_bytes(owner.s.private, "big")
        # Two shares say nothing: interpolating them gives neither secret.
        two = {x_of(users[i].index): users[i].held[owner.index][0] for i in (0, 1)}
        assert shamir.interpolate_at_zero(two) != int.from_bytes(owner.b_seed, "big")


def test_shares_travel_under_the_encryption_key_of_the_c_agreement_of_their_session() -> None:
    ring = Ring(32, 16)
    rng = np.random.default_rng(4)
    alice, bob = RealUser(0, rng, 6, ring), RealUser(1, rng, 6, ring)
    sealed = alice.share({1: bob.advertise()}, 2)[1]
    bob.share({0: alice.advertise()}, 2)
    bob.receive({0: sealed})
    key = crypto.derive(alice.c.agree(bob.c.public), b"encrypt", 6)
    assert crypto.open_sealed(key, 6, 0, 1, sealed) == bob.held[0]
    for other in (crypto.derive(alice.c.agree(bob.c.public), b"encrypt", 7), crypto.derive(alice.s.agree(bob.s.public), b"encrypt", 6)):
        with pytest.raises(ProtocolViolation, match="could not authenticate"):
            crypto.open_sealed(other, 6, 0, 1, sealed)
    assert shamir.reconstruct({1: alice.held[0][0], 2: bob.held[0][0]}, 2) == int.from_bytes(alice.b_seed, "big")


class _Draws:
    """A generator stand-in whose ``bytes`` returns the given byte strings in turn."""

    def __init__(self, *draws: bytes) -> None:
        self.draws = list(draws)

    def bytes(self, length: int) -> bytes:
        draw = self.draws.pop(0)
        assert len(draw) == length
        return draw


def test_a_coefficient_draw_of_p_or_more_is_rejected_and_drawn_again() -> None:
    """Rejection sampling from 257 bits: p itself and values above it are not field elements."""
    width = shamir.SHARE_BYTES
    draws = _Draws(shamir.PRIME.to_bytes(width, "big"), (shamir.PRIME + 5).to_bytes(width, "big"), (7).to_bytes(width, "big"))
    shares = shamir.split(11, 2, [1, 2], draws)  # type: ignore[arg-type]
    assert shares == {1: 11 + 7, 2: 11 + 14} and draws.draws == []  # f(x) = 11 + 7 x
    top = _Draws((shamir.PRIME - 1).to_bytes(width, "big"))  # the largest field element is kept
    assert shamir.split(0, 2, [1, 2], top) == {1: shamir.PRIME - 1, 2: shamir.PRIME - 2}  # type: ignore[arg-type]
