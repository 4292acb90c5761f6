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


def update_members(actor: Actor, members: set[Party]) -> set[Party]:
    """Apply to ``members`` every join and leave delivered to ``actor`` so far, in the order they were sent.

    Returns the parties that left and did not come back in this batch (each was a member when its
    leave was applied), so that a caller can drop what it holds for them without comparing whole sets.
    """
    events = [(envelope, True) for envelope in actor.drain(Join)]
    events += [(envelope, False) for envelope in actor.drain(Leave)]
    events.sort(key=lambda event: event[0].sent_at)
    left: set[Party] = set()
    for envelope, joined in events:
        if joined:
            members.add(envelope.src)
            left.discard(envelope.src)
        elif envelope.src in members:
            members.discard(envelope.src)
            left.add(envelope.src)
    return left


__all__ = ["Join", "Leave", "update_members"]
