"""Who sent a request and how (Kafka's RequestContext), and how a handler closes a connection.

Kept apart from the listener so that handlers, SASL and the HTTP API depend on the context,
not on the socket code. The context is an argument: the router builds one per request and
hands it to the handler, which passes it on to what needs it (authorization, quotas, the
endpoints of the client's listener).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from loglake.protocol import Chunk, RequestHeader
from loglake.security.listeners import SecurityProtocol
from loglake.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from loglake.security.quotas import ClientQuotaManager


class Requester(Protocol):
    """Who asks, as an authorizer sees it: a Kafka request's context or an HTTP request's connection."""

    @property
    def principal(self) -> KafkaPrincipal: ...

    @property
    def client_host(self) -> str: ...


@dataclass
class ClientConnection:
    """One client connection (for the HTTP API, one request's): its listener and who is on
    it. The principal is set once TLS or SASL authenticated the connection."""

    connection_id: str  # Kafka's form: local host:port-remote host:port-index
    listener_name: str
    security_protocol: SecurityProtocol
    client_address: str  # host:port
    principal: KafkaPrincipal = ANONYMOUS
    # Set by a handler whose quota the request overdrew: the connection is muted that long
    # after the response (KIP-219).
    throttle_ms: int = 0

    @property
    def client_host(self) -> str:
        return self.client_address.rpartition(":")[0]


@dataclass(frozen=True)
class RequestContext:
    """One request: its header and the connection it came on (Kafka's RequestContext), with
    what handlers ask most of the connection at hand."""

    header: RequestHeader
    connection: ClientConnection

    @property
    def principal(self) -> KafkaPrincipal:
        return self.connection.principal

    @property
    def listener_name(self) -> str:
        return self.connection.listener_name

    @property
    def client_address(self) -> str:
        return self.connection.client_address

    @property
    def client_host(self) -> str:
        return self.connection.client_host

    def charge(self, quotas: ClientQuotaManager, nbytes: int) -> int:
        """Charge the request's bytes to its client quota (by principal and client id); the
        throttle time, which also mutes the connection after the response."""
        connection = self.connection
        throttle_ms = quotas.record(connection.principal.name, self.header.client_id or "", nbytes)
        connection.throttle_ms = max(connection.throttle_ms, throttle_ms)
        return throttle_ms


class CloseConnection(Exception):
    """Raised by a request handler: close the connection, after `response` if one is given
    (Kafka closes silently after a failed acks=0 produce, and after answering a failed
    SASL authentication)."""

    def __init__(self, reason: str, response: list[Chunk] | None = None) -> None:
        super().__init__(reason)
        self.response = response


# Set (in the connection task's context) by a Produce handler whose appends are all done and
# which now waits for the ISR alone: the listener may go on to the connection's next Produce
# meanwhile, the answers still going out in order (kafka_server.py).
_replication_only: ContextVar[bool] = ContextVar("loglake_replication_only", default=False)


def only_replication_left() -> None:
    """The handler's appends are done; what is left is waiting for the followers."""
    _replication_only.set(True)


def take_only_replication_left() -> bool:
    """For the listener, after a handler's first step: whether it said
    `only_replication_left` (cleared for the next request)."""
    if _replication_only.get():
        _replication_only.set(False)
        return True
    return False
