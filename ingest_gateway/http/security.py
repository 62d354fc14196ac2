"""Who an HTTP request comes from, and whether the ACLs let it (the HTTP side of
docs/security.md).

`http.authentication.method=BASIC` (Confluent REST Proxy's setting, `NONE` by default)
asks every request but `GET /healthz` for HTTP Basic credentials, checked against the
same SCRAM credentials as SASL (`loglake users`): a missing or wrong one is answered 401
with REST Proxy's error shape. The user becomes the request's principal (`User:alice`;
without authentication `User:ANONYMOUS`) on the request's `ClientConnection`, as on a
Kafka connection, so the one authorizer decides for both protocols: each route needs an
ACL operation on a resource (`route_check`), and a denial is answered 403. A route that
asks the authorizer more (a consumer's topics) finds the connection with `requester`.

On an `https://` listener with `ssl.client.auth`, a verified client certificate names the
principal as on a Kafka SSL listener (`User:CN=alice,OU=eng,O=example`, from the ASGI TLS
extension that http/tls.py adds), and counts as authentication under BASIC too. Basic
credentials, when sent, take precedence: they name a user, while a certificate names the
connection's holder, which may be a gateway passing its users' credentials on (the console
does); wrong credentials are answered 401 even with a certificate.

A verified password is remembered with the stored credential it matched (PBKDF2 costs
milliseconds per request otherwise); the stored credential is read for every request, so a
changed or removed one stops the old password at once. Both run on the broker's
`AuthenticationThreads`; a check that does not complete in time is answered 504.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from loglake.errors import KafkaError
from loglake.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from loglake.security.listeners import SecurityProtocol
from loglake.security.principal import ANONYMOUS, KafkaPrincipal
from loglake.security.sasl import CredentialsOf, PlainServer, SaslError
from loglake.security.scram import ScramCredential

from ingest_gateway.apis.authorization import AUTHORIZATION_ERRORS, RequestAuthorization
from ingest_gateway.http.errors import error_response, kafka_error_response
from ingest_gateway.network.authentication_threads import AuthenticationThreads
from ingest_gateway.network.request_context import ClientConnection

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]

_OP, _RT = AclOperation, ResourceType


@dataclass(frozen=True)
class RouteCheck:
    operation: AclOperation
    resource_type: ResourceType
    name: str  # a path parameter's name, or the cluster's


# (method, path pattern) -> what the route needs; the first match decides. Routes not listed
# are administration: DESCRIBE on the cluster to read, ALTER to change.
_ROUTES: list[tuple[str, re.Pattern[str], RouteCheck]] = [
    (m, re.compile(p), c)
    for m, p, c in (
        ("POST", r"^/topics/(?P<topic>[^/]+)(/partitions/\d+)?$", RouteCheck(_OP.WRITE, _RT.TOPIC, "topic")),
        ("GET", r"^/topics/(?P<topic>[^/]+)/partitions/\d+/records$", RouteCheck(_OP.READ, _RT.TOPIC, "topic")),
        ("GET", r"^/topics/(?P<topic>[^/]+)(/.*)?$", RouteCheck(_OP.DESCRIBE, _RT.TOPIC, "topic")),
        ("PATCH", r"^/topics/(?P<topic>[^/]+)$", RouteCheck(_OP.ALTER, _RT.TOPIC, "topic")),
        ("DELETE", r"^/topics/(?P<topic>[^/]+)$", RouteCheck(_OP.DELETE, _RT.TOPIC, "topic")),
        ("POST", r"^/topics$", RouteCheck(_OP.CREATE, _RT.CLUSTER, CLUSTER_NAME)),
        ("GET", r"^/topics$", RouteCheck(_OP.DESCRIBE, _RT.CLUSTER, CLUSTER_NAME)),
        ("*", r"^/consumers/(?P<group>[^/]+)(/.*)?$", RouteCheck(_OP.READ, _RT.GROUP, "group")),
        ("GET", r"^/groups/(?P<group>[^/]+)$", RouteCheck(_OP.DESCRIBE, _RT.GROUP, "group")),
        ("POST", r"^/groups/(?P<group>[^/]+)/reset-offsets$", RouteCheck(_OP.READ, _RT.GROUP, "group")),
        ("DELETE", r"^/groups/(?P<group>[^/]+)$", RouteCheck(_OP.DELETE, _RT.GROUP, "group")),
    )
]
_READS = ("GET", "HEAD")


def route_check(method: str, path: str) -> tuple[RouteCheck, str]:
    """What a request needs: the check and the resource name."""
    for m, pattern, check in _ROUTES:
        if m in ("*", method):
            found = pattern.match(path)
            if found:
                return check, found.group(check.name) if check.resource_type != _RT.CLUSTER else CLUSTER_NAME
    operation = _OP.DESCRIBE if method in _READS else _OP.ALTER
    return RouteCheck(operation, _RT.CLUSTER, CLUSTER_NAME), CLUSTER_NAME


class BasicAuthenticator:
    """HTTP Basic credentials against the SCRAM credentials (as SASL/PLAIN checks them)."""

    def __init__(self, credentials_of: CredentialsOf, threads: AuthenticationThreads) -> None:
        self._credentials_of = credentials_of
        self._threads = threads
        # (user, password digest, the stored credentials it matched)
        self._verified: set[tuple[str, bytes, tuple[tuple[str, ScramCredential], ...]]] = set()

    async def principal(self, header: str | None) -> KafkaPrincipal | None:
        """The user of a valid `Authorization: Basic ...` header, else None."""
        if not header or not header.lower().startswith("basic "):
            return None
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep or not user:
            return None
        # The stored credential is read on every request (a changed or removed one stops
        # working at once), off the event loop: it comes from the metadata store.
        credentials = await self._threads.run(self._credentials_of, user)
        key = (user, hashlib.sha256(password.encode()).digest(), tuple(sorted(credentials.items())))
        if key in self._verified:
            return KafkaPrincipal.user(user)
        try:
            # PBKDF2 takes milliseconds: off the event loop too.
            await self._threads.run(PlainServer(lambda _: credentials).evaluate, f"\0{user}\0{password}".encode())
        except SaslError:
            return None
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified.add(key)
        return KafkaPrincipal.user(user)


# Where HttpSecurity leaves the request's connection in the ASGI scope's state.
_CONNECTION = "client_connection"


def requester(request: Request) -> ClientConnection:
    """The connection (and so the principal) of an HTTP request `HttpSecurity` let through."""
    return request.state.client_connection


class HttpSecurity:
    """ASGI middleware: authenticate, set the request's context, authorize its route."""

    def __init__(
        self,
        app: ASGIApp,
        authorization: RequestAuthorization,
        authenticator: BasicAuthenticator | None,
        realm: str = "loglake",
    ) -> None:
        self.app = app
        self._authorization = authorization
        self._authenticator = authenticator
        self._realm = realm

    async def _principal(self, scope: Scope) -> KafkaPrincipal | None:
        """Basic credentials when sent (None if wrong), else the verified client certificate's
        subject, else ANONYMOUS without authentication (None: required but missing)."""
        raw = dict(scope.get("headers") or ()).get(b"authorization")
        if self._authenticator is not None and raw:
            return await self._authenticator.principal(raw.decode("latin-1"))
        tls = (scope.get("extensions") or {}).get("tls") or {}
        if tls.get("client_cert_name"):
            return KafkaPrincipal.user(tls["client_cert_name"])
        return None if self._authenticator is not None else ANONYMOUS

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client") or ("0.0.0.0", 0)
        protocol = SecurityProtocol.SSL if scope.get("scheme") == "https" else SecurityProtocol.PLAINTEXT
        server = scope.get("server") or ("0.0.0.0", 0)
        peer = f"{client[0]}:{client[1]}"
        connection = ClientConnection(f"{server[0]}:{server[1]}-{peer}", "HTTP", protocol, peer)
        scope.setdefault("state", {})[_CONNECTION] = connection
        path, method = scope["path"], scope["method"]
        if path == "/healthz":
            await self.app(scope, receive, send)
            return
        try:
            principal = await self._principal(scope)
        except KafkaError as exc:  # the credential check did not complete in time
            await kafka_error_response(exc)(scope, receive, send)
            return
        if principal is None:
            response = error_response(401, "Unauthorized: valid HTTP Basic credentials are required")
            response.headers["WWW-Authenticate"] = f'Basic realm="{self._realm}"'
            await response(scope, receive, send)
            return
        connection.principal = principal
        if self._authorization.enabled:
            check, name = route_check(method, path)
            if not self._authorization.allowed(connection, check.operation, check.resource_type, name):
                message = f"Forbidden: {connection.principal} may not {check.operation.name} {check.resource_type.name} {name}"
                error = AUTHORIZATION_ERRORS[check.resource_type]
                await error_response(403, message, error)(scope, receive, send)
                return
        await self.app(scope, receive, send)
