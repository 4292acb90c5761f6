"""The proxy role: a hop of the anonymizing network; what it forwards carries the proxy as sender."""

from __future__ import annotations

from typing import ClassVar

from ..network.party import Role
from .actor import Actor


class Proxy(Actor):
    role: ClassVar[Role] = Role.PROXY
