"""The parties: the actor base and the generic behaviour of each role."""

from .actor import Actor, Replies
from .membership import Join, Leave
from .population import Population
from .proxy import Proxy
from .server import Server
from .silo import Silo
from .third_party import ThirdParty
from .user import User

__all__ = ["Actor", "Join", "Leave", "Population", "Proxy", "Replies", "Server", "Silo", "ThirdParty", "User"]
