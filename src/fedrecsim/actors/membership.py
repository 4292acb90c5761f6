"""The messages every protocol shares: a user announcing that it joins or leaves.

Joining and leaving are counted messages to the server; crashing is silence, found by deadline.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..network.wire import message


@message("core.join")
@dataclass(frozen=True)
class Join:
    """I am online and may be selected from now on."""


@message("core.leave")
@dataclass(frozen=True)
class Leave:
    """I am going offline; do not select me."""


__all__ = ["Join", "Leave"]
