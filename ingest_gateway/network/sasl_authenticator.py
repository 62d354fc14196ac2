"""SASL on a connection (Kafka's SaslServerAuthenticator): SaslHandshake then
SaslAuthenticate exchanges, before any other request but ApiVersions, and again when the
client re-authenticates (KIP-368, `connections.max.reauth.ms`). After a SaslHandshake v0
the tokens come as bare size-prefixed frames instead, as old clients send them.

A failed exchange is answered SASL_AUTHENTICATION_FAILED (an unknown mechanism
UNSUPPORTED_SASL_MECHANISM, with the enabled ones) and the connection is closed, as Kafka
does; nothing about the credentials is logged. Credentials are read from the metadata
store per exchange, on the broker's `AuthenticationThreads` (ZooKeeper reads block; PBKDF2
takes milliseconds); an exchange whose check does not complete in time fails with that message.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Mapping
from typing import Any

from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import (
    ApiKey,
    Chunk,
    ProtocolDecodeError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    decode_request_header,
    encode_response,
)
from loglake.protocol.bodies import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from loglake.security.principal import KafkaPrincipal
from loglake.security.sasl import CredentialsOf, SaslError, SaslServer, sasl_server

from ingest_gateway.network.authentication_threads import AuthenticationThreads
from ingest_gateway.network.request_context import CloseConnection

log = logging.getLogger(__name__)

SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


class SaslAuthenticator:
    """One connection's SASL state."""

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        credentials_of: CredentialsOf,
        reauth_ms: int,
        threads: AuthenticationThreads,
    ) -> None:
        self._mechanisms = mechanisms
        self._credentials_of = credentials_of
        self._threads = threads
        self._reauth_ms = reauth_ms
        self._server: SaslServer | None = None
        self.principal: KafkaPrincipal | None = None
        self._raw_tokens = False
        self._expires_at: float | None = None

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def check_session(self, api_key: int, now: float | None = None) -> None:
        """Before a request: unauthenticated connections may only ask ApiVersions and SASL;
        an expired session (connections.max.reauth.ms) must re-authenticate first."""
        if api_key in SASL_APIS:
            return
        if self.principal is None:
            if api_key == ApiKey.API_VERSIONS:
                return
            raise CloseConnection(f"unexpected {_name(api_key)} request before SASL authentication")
        if self._expires_at is not None and (now or time.monotonic()) > self._expires_at:
            raise CloseConnection(f"SASL session of {self.principal} expired without re-authentication")

    async def intercept(self, payload: memoryview) -> list[Chunk] | None:
        """The answer to a SASL request; None for any other request, which the connection
        may send now (else CloseConnection)."""
        if self._raw_tokens:
            return await self._raw_token(bytes(payload))
        header, _ = decode_request_header(payload)
        self.check_session(header.request_api_key)
        if header.request_api_key not in SASL_APIS:
            return None
        try:
            header, body = decode_request(payload)
        except UnsupportedVersionError as exc:
            raise ProtocolDecodeError(str(exc)) from exc
        return await self.handle(header, body)

    async def handle(self, header: RequestHeader, body: Any) -> list[Chunk]:
        """Answer SaslHandshake / SaslAuthenticate (a failure raises CloseConnection carrying its answer)."""
        if header.request_api_key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(header, body)
        return await self._authenticate(header, body)

    def _handshake(self, header: RequestHeader, body: SaslHandshakeRequest) -> list[Chunk]:
        mechanism = body["mechanism"]
        answer: SaslHandshakeResponse = {"error_code": ErrorCode.NONE, "mechanisms": list(self._mechanisms)}
        if self._server is not None and not self._server.complete:
            answer["error_code"] = ErrorCode.ILLEGAL_SASL_STATE
            raise CloseConnection("SaslHandshake during an exchange", _respond(header, answer))
        if mechanism not in self._mechanisms:
            answer["error_code"] = ErrorCode.UNSUPPORTED_SASL_MECHANISM
            raise CloseConnection(f"unsupported SASL mechanism {mechanism!r}", _respond(header, answer))
        self._server = sasl_server(mechanism, self._credentials_of)
        # SaslHandshake v0: the tokens follow as bare size-prefixed frames, not SaslAuthenticate.
        self._raw_tokens = header.request_api_version == 0
        return _respond(header, answer)

    async def _raw_token(self, token: bytes) -> list[Chunk]:
        server = self._server
        assert server is not None
        try:
            reply = await self._threads.run(server.evaluate, token)
        except SaslError:
            raise CloseConnection(f"SASL/{server.mechanism} authentication failed") from None
        except KafkaError as exc:
            raise CloseConnection(f"SASL/{server.mechanism}: {exc.message}") from None
        if server.complete:
            self.principal = KafkaPrincipal.user(server.username or "")
            self._raw_tokens = False
        return [struct.pack(">i", len(reply)) + reply]

    async def _authenticate(self, header: RequestHeader, body: SaslAuthenticateRequest) -> list[Chunk]:
        server = self._server
        answer: SaslAuthenticateResponse = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "auth_bytes": b"",
            "session_lifetime_ms": 0,
        }
        if server is None or server.complete:
            answer["error_code"] = ErrorCode.ILLEGAL_SASL_STATE
            answer["error_message"] = "SaslAuthenticate without a SaslHandshake first"
            raise CloseConnection("SaslAuthenticate before SaslHandshake", _respond(header, answer))
        try:
            answer["auth_bytes"] = await self._threads.run(server.evaluate, bytes(body["auth_bytes"]))
        except KafkaError as exc:  # the credential check did not complete in time
            answer["error_code"] = ErrorCode.SASL_AUTHENTICATION_FAILED
            answer["error_message"] = exc.message
            raise CloseConnection(f"SASL/{server.mechanism}: {exc.message}", _respond(header, answer)) from None
        except SaslError as exc:
            answer["error_code"] = ErrorCode.SASL_AUTHENTICATION_FAILED
            answer["error_message"] = (
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{server.mechanism}"
                if "credentials" in str(exc) or "password" in str(exc)
                else str(exc)
            )
            raise CloseConnection(f"SASL/{server.mechanism} authentication failed", _respond(header, answer)) from None
        if server.complete:
            principal = KafkaPrincipal.user(server.username or "")
            if self.principal is not None and principal != self.principal:
                answer["error_code"] = ErrorCode.SASL_AUTHENTICATION_FAILED
                answer["error_message"] = "Re-authentication must keep the principal"
                raise CloseConnection("re-authentication as another principal", _respond(header, answer))
            self.principal = principal
            if self._reauth_ms > 0:
                answer["session_lifetime_ms"] = self._reauth_ms
                self._expires_at = time.monotonic() + self._reauth_ms / 1000
        return _respond(header, answer)


def _respond(header: RequestHeader, body: Mapping[str, Any]) -> list[Chunk]:
    return encode_response(header.request_api_key, header.request_api_version, header.correlation_id, body)


def _name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
