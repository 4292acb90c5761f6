"""The messages every protocol shares: a user announcing that it joins or leaves.

Joining and leaving are counted messages to the server; crashing is silence, found by deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..network.party import Party
from ..network.wire import message

if TYPE_CHECKING:
    from .actor import Actor


@message("core.join")
@dataclass(frozen=True)
class Join:
    """I am online and may be selected from now on."""


@message("core.leave")
@dataclass(frozen=True)
class Leave:
    """I am going offline; do not select me."""


def update_members(actor: Actor, members: set[Party], latest: dict[Party, tuple[float, int]] | None = None) -> set[Party]:
    """Apply to ``members`` every join and leave delivered to ``actor`` so far, in the order they were sent.

    With ``latest`` (the caller's record, per party, of the last announcement applied), an announcement
    sent before one already applied -- overtaken on the way, or a copy the network duplicated -- is
    ignored: membership follows each party's newest announcement whatever order they arrive in. (At one
    send instant a join orders before a leave.)

    Returns the parties that left and did not come back in this batch (each was a member when its
    leave was applied), so that a caller can drop what it holds for them without comparing whole sets.
    """
    events = [(envelope, True) for envelope in actor.drain(Join)]
    events += [(envelope, False) for envelope in actor.drain(Leave)]
    events.sort(key=lambda event: event[0].sent_at)
    left: set[Party] = set()
    for envelope, joined in events:
        src = envelope.src
        if latest is not None:
            order = (envelope.sent_at, 0 if joined else 1)
            if src in latest and order <= latest[src]:
                continue
            latest[src] = order
        if joined:
            members.add(src)
            left.discard(src)
        elif src in members:
            members.discard(src)
            left.add(src)
    return left


__all__ = ["Join", "Leave", "update_members"]
