"""Key agreement, key derivation and authenticated encryption for secure aggregation.

- **Key agreement**: X25519 (`cryptography`). Each user makes two key pairs per session (Bonawitz et al.
  2017, AdvertiseKeys): ``c`` to encrypt the shares it sends through the server, ``s`` whose pairwise
  agreement seeds the pairwise masks.
- **Key derivation**: HKDF-SHA256 of the 32-byte agreement, with an ``info`` naming the purpose
  (``encrypt`` or ``mask``) and the session, so one agreement never keys two things and no key outlives
  its session.
- **AEAD**: AES-256-GCM. Both users of a pair derive the same encryption key, so the 12-byte nonce is
  (sender index, recipient index, 0): each direction has its own nonce and each key seals one message per
  direction. The associated data binds session, sender and recipient, so a ciphertext moved to another
  pair or session fails to open.

Departure from deployment: private keys are drawn from the party's seeded generator (`fedrecsim.seeding`),
not the operating system's entropy, so that a run is reproducible. The maths and the bytes are real.
"""

from __future__ import annotations

import struct

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ...errors import ProtocolViolation
from . import shamir

#: Bytes of an X25519 public or private key.
KEY_BYTES = 32
#: Bytes the AEAD adds to a plaintext (the GCM tag).
TAG_BYTES = 16
_PAIR = struct.Struct("<II")
#: Bytes of the plaintext a user seals for one recipient: owner and recipient indices, then its two shares.
PLAINTEXT_BYTES = _PAIR.size + 2 * shamir.SHARE_BYTES
#: Bytes of one sealed share pair on the wire.
CIPHERTEXT_BYTES = PLAINTEXT_BYTES + TAG_BYTES


class KeyPair:
    """An X25519 key pair made from 32 bytes of the owner's generator; ``private`` is those raw bytes."""

    __slots__ = ("private", "public", "_key")

    def __init__(self, private: bytes) -> None:
        self._key = X25519PrivateKey.from_private_bytes(private)
        self.private = private
        self.public = self._key.public_key().public_bytes_raw()

    @classmethod
    def generate(cls, rng: np.random.Generator) -> KeyPair:
        return cls(rng.bytes(KEY_BYTES))

    def agree(self, peer_public: bytes) -> bytes:
        """The X25519 shared secret with the holder of ``peer_public`` (symmetric in the two parties).

        Raises:
            ProtocolViolation: ``peer_public`` is not a valid X25519 public key.
        """
        try:
            return self._key.exchange(X25519PublicKey.from_public_bytes(peer_public))
        except ValueError as exc:
            raise ProtocolViolation(f"an advertised X25519 public key is invalid: {exc}") from exc


#: A fixed private key to test advertised keys with: its scalar, clamped like every X25519 scalar, is a
#: multiple of the cofactor 8, so its agreement with a point of small order is zero -- what every key
#: agreement with that point gives, and what `cryptography` refuses.
_PROBE = X25519PrivateKey.from_private_bytes(bytes(range(1, KEY_BYTES + 1)))


def public_key_problem(public: bytes) -> str | None:
    """What makes ``public`` unusable as an X25519 public key, or None if every key agreement with it works.

    Refused: another length than `KEY_BYTES`, and the points of small order (the all-zero encoding, 1,
    p - 1, the order-8 points ...), with which every agreement is the all-zero secret, whatever the other
    party's private key -- a key a user cannot agree with. The test is the library's own exchange, so a
    key that passes here never fails `KeyPair.agree`.
    """
    public = bytes(public)
    if len(public) != KEY_BYTES:
        return f"an X25519 public key is {KEY_BYTES} bytes, received {len(public)}"
    try:
        _PROBE.exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError as exc:
        return f"{public.hex()} is no valid X25519 public key ({exc})"
    return None


def derive(agreement: bytes, purpose: bytes, session: int) -> bytes:
    """A 32-byte key for ``purpose`` (``b"encrypt"`` or ``b"mask"``) in ``session`` from an agreement."""
    info = b"fedrecsim secagg " + purpose + b" " + str(session).encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(agreement)


def _nonce(sender: int, recipient: int) -> bytes:
    return _PAIR.pack(sender, recipient) + bytes(4)


def _associated(session: int, sender: int, recipient: int) -> bytes:
    return struct.pack("<q", session) + _PAIR.pack(sender, recipient)


def seal(key: bytes, session: int, sender: int, recipient: int, b_share: int, sk_share: int) -> bytes:
    """Encrypt the two shares ``sender`` made for ``recipient``: `CIPHERTEXT_BYTES` bytes."""
    plaintext = _PAIR.pack(sender, recipient) + shamir.to_bytes(b_share) + shamir.to_bytes(sk_share)
    return AESGCM(key).encrypt(_nonce(sender, recipient), plaintext, _associated(session, sender, recipient))


def open_sealed(key: bytes, session: int, sender: int, recipient: int, ciphertext: bytes) -> tuple[int, int]:
    """The shares ``(b_share, sk_share)`` in a ciphertext `seal` made for this pair and session.

    Raises:
        ProtocolViolation: the ciphertext was tampered with, sealed for another pair or session, or
            names other parties inside (Bonawitz et al.: the recipient checks u and v).
    """
    try:
        plaintext = AESGCM(key).decrypt(_nonce(sender, recipient), bytes(ciphertext), _associated(session, sender, recipient))
    except InvalidTag as exc:
        raise ProtocolViolation(
            f"user:{recipient} could not authenticate the shares user:{sender} sealed for it in session {session}"
        ) from exc
    named = _PAIR.unpack_from(plaintext)
    if named != (sender, recipient) or len(plaintext) != PLAINTEXT_BYTES:
        raise ProtocolViolation(f"user:{recipient} expected shares from user:{sender} for itself, they name {named}")
    start = _PAIR.size
    middle = start + shamir.SHARE_BYTES
    return shamir.from_bytes(plaintext[start:middle]), shamir.from_bytes(plaintext[middle:])


__all__ = ["CIPHERTEXT_BYTES", "KEY_BYTES", "PLAINTEXT_BYTES", "TAG_BYTES", "KeyPair", "derive", "open_sealed", "public_key_problem", "seal"]
