"""Who sent a request and how (Kafka's RequestContext), and how a handler closes a connection.

Kept apart from the listener so that handlers, SASL and the HTTP API depend on the context,
not on the socket code.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loglake.protocol import Chunk
from loglake.security.listeners import SecurityProtocol
from loglake.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from loglake.security.quotas import ClientQuotaManager


@dataclass
class RequestContext:
    """Who sent a request, and how (Kafka's RequestContext)."""

    listener_name: str
    security_protocol: SecurityProtocol
    peer: str  # host:port
    principal: KafkaPrincipal = ANONYMOUS
    # Set by a handler whose quota the request overdrew: the connection is muted that long
    # after the response (KIP-219).
    throttle_ms: int = 0

    @property
    def client_host(self) -> str:
        return self.peer.rpartition(":")[0]

    def charge(self, quotas: ClientQuotaManager, client_id: str, nbytes: int) -> int:
        """Charge a request's bytes to its client quota (by principal and client id); the
        throttle time, which also mutes this connection after the response."""
        throttle_ms = quotas.record(self.principal.name, client_id, nbytes)
        self.throttle_ms = max(self.throttle_ms, throttle_ms)
        return throttle_ms


# The context of the request being handled: each connection's task sets its own.
_current_request: ContextVar[RequestContext] = ContextVar("loglake_request_context")
_NO_CONNECTION = RequestContext("PLAINTEXT", SecurityProtocol.PLAINTEXT, "0.0.0.0:0")


def current_request() -> RequestContext:
    """Who sent the request being handled (a PLAINTEXT anonymous one outside a connection)."""
    return _current_request.get(_NO_CONNECTION)


def bind_request(context: RequestContext) -> None:
    """Make `context` the current request's for the rest of this task (a connection's, or
    one HTTP request's)."""
    _current_request.set(context)


class CloseConnection(Exception):
    """Raised by a request handler: close the connection, after `response` if one is given
    (Kafka closes silently after a failed acks=0 produce, and after answering a failed
    SASL authentication)."""

    def __init__(self, reason: str, response: list[Chunk] | None = None) -> None:
        super().__init__(reason)
        self.response = response
