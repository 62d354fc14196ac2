"""The request router: each handler declares its API's versions (`@handles`) and ApiVersions
answers from those declarations; the router hands each handler the request's context (the
header and the connection: listener, security protocol, client address, principal,
connection id), which handlers pass on to the authorizer."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from kafka_release import release_versions
from protocol_helpers import plaintext_connection

from ingest_gateway.apis.acl_apis import AclApis
from ingest_gateway.apis.admin_apis import AdminApis
from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.apis.client_entity_apis import ClientEntityApis
from ingest_gateway.apis.config_apis import ConfigApis
from ingest_gateway.apis.controller_apis import ControllerApis
from ingest_gateway.apis.fetch_apis import FetchApis
from ingest_gateway.apis.group_apis import GroupApis
from ingest_gateway.apis.kafka_apis import KafkaApis
from ingest_gateway.apis.log_dir_apis import LogDirApis
from ingest_gateway.apis.request_router import RequestRouter, declared_handlers, handles
from ingest_gateway.apis.txn_apis import TxnApis
from ingest_gateway.network.kafka_server import KafkaServer
from ingest_gateway.network.request_context import ClientConnection, RequestContext
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey, ProtocolDecodeError, decode_response, encode_request
from loglake.security.acls import AccessControlEntry, AclOperation, AclPermissionType, Authorizer
from loglake.security.acls import PatternType, ResourcePattern, ResourceType
from loglake.security.listeners import SecurityProtocol
from loglake.security.principal import ANONYMOUS, KafkaPrincipal

API_MODULES = (
    RequestRouter,  # ApiVersions
    KafkaApis,
    FetchApis,
    GroupApis,
    TxnApis,
    AclApis,
    ConfigApis,
    AdminApis,
    ClientEntityApis,
    LogDirApis,
    ControllerApis,
)


def _call(router: RequestRouter, connection: ClientConnection, key: ApiKey, version: int, body: dict) -> dict:
    frame = encode_request(key, version, 7, "router-test", body)
    chunks = asyncio.run(router.handle(connection, memoryview(frame)[4:]))
    assert chunks is not None
    return decode_response(key, version, b"".join(chunks)[4:])[1]


def test_the_declared_ranges_are_one_release() -> None:
    """Every handler's declared range is Kafka 3.9.0's (with Kafka 4.0's floors and
    ceilings), and each API has one handler."""
    declared: dict[int, tuple[int, int]] = {}
    for module in API_MODULES:
        for name, ranges in declared_handlers(module).items():
            for api in ranges:
                assert api.api_key not in declared, f"{api.api_key.name}: a second handler in {module.__name__}.{name}"
                declared[api.api_key] = (api.min_version, api.max_version)
    assert ApiKey.PRODUCE in declared and ApiKey.LEADER_AND_ISR in declared and ApiKey.API_VERSIONS in declared
    assert declared == {key: release_versions(key) for key in declared}


class ListGroupsRecorder:
    """A ListGroups handler declaring a narrower range than the release's, keeping each
    request's context."""

    def __init__(self) -> None:
        self.contexts: list[RequestContext] = []

    @handles(ApiKey.LIST_GROUPS, 2, 3)
    async def list_groups(self, context: RequestContext, body: Any) -> dict:
        self.contexts.append(context)
        return {"throttle_time_ms": 0, "error_code": 0, "groups": []}


def test_api_versions_answers_the_declared_ranges() -> None:
    router = RequestRouter(RequestAuthorization(None), None, "INTERNAL")
    module = ListGroupsRecorder()
    router.register_module(module)
    connection = plaintext_connection()
    table = _call(router, connection, ApiKey.API_VERSIONS, 3, {})["api_keys"]
    ranges = {e["api_key"]: (e["min_version"], e["max_version"]) for e in table}
    assert ranges == {ApiKey.API_VERSIONS: release_versions(ApiKey.API_VERSIONS), ApiKey.LIST_GROUPS: (2, 3)}
    assert _call(router, connection, ApiKey.LIST_GROUPS, 3, {"states_filter": []})["error_code"] == 0
    with pytest.raises(ProtocolDecodeError, match="LIST_GROUPS v1 is not supported"):
        _call(router, connection, ApiKey.LIST_GROUPS, 1, {})
    (context,) = module.contexts
    assert context.header.request_api_version == 3 and context.header.client_id == "router-test"
    assert context.connection is connection
    with pytest.raises(ValueError, match="LIST_GROUPS has two handlers"):
        router.register_module(ListGroupsRecorder())


class ReadsTopicT:
    """Answers whether the request's principal may READ topic "t", after both requests of
    the test are in (so their handlers interleave on the loop)."""

    def __init__(self, auth: RequestAuthorization) -> None:
        self._auth = auth
        self.arrived = 0
        self.both_in = asyncio.Event()

    @handles(ApiKey.LIST_GROUPS, 0, 5)
    async def list_groups(self, context: RequestContext, body: Any) -> dict:
        self.arrived += 1
        if self.arrived == 2:
            self.both_in.set()
        await self.both_in.wait()
        allowed = self._auth.allowed(context, AclOperation.READ, ResourceType.TOPIC, "t")
        error = ErrorCode.NONE if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return {"throttle_time_ms": 0, "error_code": error, "groups": []}


def test_interleaved_requests_are_authorized_as_their_own_principal() -> None:
    authorizer = Authorizer([])
    pattern = ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL)
    authorizer.replace_acls({pattern: [AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)]})
    auth = RequestAuthorization(authorizer)
    router = RequestRouter(auth, None, "INTERNAL")
    router.register_module(ReadsTopicT(auth))
    alice, bob = plaintext_connection(), plaintext_connection()
    alice.principal, bob.principal = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")
    frame = encode_request(ApiKey.LIST_GROUPS, 4, 1, "c", {"states_filter": []})

    async def both() -> list[int]:
        answers = await asyncio.gather(
            router.handle(bob, memoryview(frame)[4:]), router.handle(alice, memoryview(frame)[4:])
        )
        return [decode_response(ApiKey.LIST_GROUPS, 4, b"".join(a or ())[4:])[1]["error_code"] for a in answers]

    assert asyncio.run(both()) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.NONE]


def test_each_connection_gives_its_requests_its_context() -> None:
    """Through the listener: each request's context names its connection (Kafka's connection
    id, local-remote-index), the listener, the security protocol and the client's address."""
    router = RequestRouter(RequestAuthorization(None), None, "INTERNAL")
    recorder = ListGroupsRecorder()
    router.register_module(recorder)
    frame = encode_request(ApiKey.LIST_GROUPS, 3, 1, "c", {"states_filter": []})

    def exchange(sock: socket.socket) -> None:
        sock.sendall(frame)
        size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
        sock.recv(size, socket.MSG_WAITALL)

    async def main() -> list[str]:
        server = KafkaServer("127.0.0.1", 0, router.handle, 1 << 20)
        await server.start()
        try:
            clients = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
            try:
                for sock in (*clients, clients[0]):
                    await asyncio.to_thread(exchange, sock)
                return [f"{h}:{p}" for h, p in (s.getsockname() for s in clients)]
            finally:
                for sock in clients:
                    sock.close()
        finally:
            await server.stop()

    first, second = asyncio.run(main())
    a1, b, a2 = recorder.contexts
    assert [c.client_address for c in (a1, b, a2)] == [first, second, first]
    assert a1.connection is a2.connection and a1.connection is not b.connection
    assert a1.connection.connection_id.endswith(f"-{first}-0")
    assert b.connection.connection_id.endswith(f"-{second}-1")
    assert {(c.listener_name, c.connection.security_protocol, c.principal) for c in (a1, b)} == {
        ("PLAINTEXT", SecurityProtocol.PLAINTEXT, ANONYMOUS)
    }
