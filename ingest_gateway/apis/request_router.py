"""Kafka request frames to the handler of their API, per listener (the dispatch half of
Kafka's KafkaApis, with its ApiVersionManager).

Each handler declares the API and the versions it answers next to its code (`@handles`,
Redpanda's handler model); `register_module` serves a module's handlers, and ApiVersions is
answered from those registrations. The ranges are Kafka 3.9.0's, the release of the message
definitions the broker ships, so that a client that infers a release from them (or pins
one) sees one real release, with Kafka 4.0's changes: versions that can only carry message
formats v0/v1 are not served (Produce v0-2, Fetch v0-3, ListOffsets v0, KIP-896: the log
holds record batches v2 only), and ConsumerGroupHeartbeat and ConsumerGroupDescribe go up
to v1 (KIP-848 GA: the regex subscription; KIP-1099: each member's type).
tests/component/test_request_router.py holds the handlers to that release.

The table a client sees depends on the listener it came in on: the controller-to-broker
APIs (LeaderAndIsr, StopReplica, UpdateMetadata) and WriteTxnMarkers are what brokers send
each other, so they are offered and served only on `inter.broker.listener.name`. A client
listener neither advertises nor answers them, whatever ACLs say. (Kafka in ZooKeeper mode
serves them everywhere behind ClusterAction; one gate more costs nothing and keeps a public
listener from ever reaching them.)

For every request: decode, build its `RequestContext` (the header and the connection), the
request-level authorization check, the handler (given the context), the error codes the
request's version predates replaced by Kafka's older ones (error_responses.py), error counting
for the metrics, encode. A handler that fails answers its request with the error in the API's
own shape (error_responses.py), and the connection serves the next request.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import (
    ApiKey,
    Chunk,
    ProtocolDecodeError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request_body,
    decode_request_header,
    encode_response,
)

from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.apis.error_responses import downgrade_errors, error_response
from ingest_gateway.network.request_context import ClientConnection, CloseConnection, RequestContext

if TYPE_CHECKING:
    from ingest_gateway.observability.metrics import BrokerMetrics

log = logging.getLogger(__name__)

Body = dict[str, Any]
# Kafka's message for UNKNOWN_SERVER_ERROR (the details stay in the broker's log).
UNKNOWN_SERVER_ERROR_MESSAGE = "The server experienced an unexpected error when processing the request."
# Each API's handler takes and returns its own TypedDicts (loglake.protocol.bodies); the router
# only decodes and encodes, so it sees a request of any shape and a response as a mapping.
Handler = Callable[[RequestContext, Any], Awaitable[Mapping[str, Any] | None]]
_H = TypeVar("_H", bound=Callable[..., Any])

# Sent only by brokers to brokers: served on the inter-broker listener alone.
INTER_BROKER_APIS = frozenset(
    {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.WRITE_TXN_MARKERS}
)


@dataclass(frozen=True)
class ApiRange:
    """The versions of one API a handler answers."""

    api_key: ApiKey
    min_version: int
    max_version: int


# The attribute `@handles` leaves on a handler: its ApiRanges.
_HANDLES = "_loglake_handles"


def handles(api_key: ApiKey, min_version: int, max_version: int) -> Callable[[_H], _H]:
    """Declare a method the handler of `api_key` at versions `min_version`..`max_version`
    (stackable: one handler may answer several APIs)."""

    def declare(handler: _H) -> _H:
        handler.__dict__.setdefault(_HANDLES, []).append(ApiRange(api_key, min_version, max_version))
        return handler

    return declare


def declared_handlers(module_type: type) -> dict[str, list[ApiRange]]:
    """A module class's handler methods by name, with the ranges each declares."""
    return {
        name: ranges
        for name in dir(module_type)
        if (ranges := getattr(inspect.getattr_static(module_type, name), _HANDLES, None))
    }


@dataclass(frozen=True)
class _Api:
    versions: tuple[int, int]
    handler: Handler
    inter_broker_only: bool


class RequestRouter:
    def __init__(
        self,
        authorization: RequestAuthorization,
        metrics: BrokerMetrics | None,
        inter_broker_listener: str,
    ) -> None:
        self._authorization = authorization
        self._metrics = metrics
        self._inter_broker_listener = inter_broker_listener
        self._apis: dict[int, _Api] = {}
        self._tables: dict[bool, list[Body]] = {}
        self.register_module(self)

    def register(self, api_key: ApiKey, versions: tuple[int, int], handler: Handler) -> None:
        self._apis[api_key] = _Api(versions, handler, api_key in INTER_BROKER_APIS)
        self._tables.clear()

    def register_module(self, module: object) -> None:
        """Serve each handler `module` declares (`@handles`) at its versions; an API has one handler."""
        for name, ranges in declared_handlers(type(module)).items():
            for api in ranges:
                if api.api_key in self._apis:
                    raise ValueError(
                        f"{api.api_key.name} has two handlers (the second: {type(module).__name__}.{name})"
                    )
                self.register(api.api_key, (api.min_version, api.max_version), getattr(module, name))

    def _served(self, api: _Api | None, version: int, inter_broker: bool) -> bool:
        return (
            api is not None
            and api.versions[0] <= version <= api.versions[1]
            and (inter_broker or not api.inter_broker_only)
        )

    def api_keys(self, inter_broker: bool) -> list[Body]:
        """The ApiVersions table of a listener (inter-broker or not)."""
        table = self._tables.get(inter_broker)
        if table is None:
            table = self._tables[inter_broker] = [
                {"api_key": int(k), "min_version": api.versions[0], "max_version": api.versions[1]}
                for k, api in sorted(self._apis.items())
                if inter_broker or not api.inter_broker_only
            ]
        return table

    async def handle(self, connection: ClientConnection, payload: memoryview) -> list[Chunk] | None:
        """One request frame's payload, from `connection`, to its response frame (None: send nothing)."""
        header, pos = decode_request_header(payload)
        key, version = header.request_api_key, header.request_api_version
        inter_broker = connection.listener_name == self._inter_broker_listener
        api = self._apis.get(key)
        if not self._served(api, version, inter_broker):
            if key == ApiKey.API_VERSIONS:
                # KIP-511: answer a too-new ApiVersions in v0 so the client can downgrade.
                body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": self.api_keys(inter_broker)}
                return encode_response(key, 0, header.correlation_id, body)
            name = ApiKey(key).name if key in ApiKey._value2member_map_ else key
            raise ProtocolDecodeError(f"{name} v{version} is not supported on this listener")
        assert api is not None
        try:
            body = decode_request_body(header, payload, pos)
        except UnsupportedVersionError as exc:
            raise ProtocolDecodeError(str(exc)) from exc
        header.client_id = header.client_id or ""
        context = RequestContext(header, connection)
        try:
            response: Mapping[str, Any] | None = self._authorization.denied_response(context, body)
            if response is None:
                response = await api.handler(context, body)
            if response is None:
                return None
            return self._encode(header, response)
        except (CloseConnection, ProtocolDecodeError):
            raise
        except Exception as exc:  # noqa: BLE001 - any handler's bug is this request's error
            return self._failed(context, body, exc)

    def _encode(self, header: RequestHeader, response: Mapping[str, Any]) -> list[Chunk]:
        key, version = header.request_api_key, header.request_api_version
        # No error code the request's version predates (error_responses.ERROR_DOWNGRADES).
        response = downgrade_errors(key, version, response)
        chunks = encode_response(key, version, header.correlation_id, response)
        if self._metrics is not None:
            self._metrics.count_errors(key, response)
        return chunks

    def _failed(self, context: RequestContext, body: Body, exc: Exception) -> list[Chunk]:
        """A handler failed: the request's answer is the error, in its API's shape, as
        Kafka's KafkaApis.handleError does; the connection stays open. A KafkaError keeps
        its code; anything else is UNKNOWN_SERVER_ERROR, logged once with the header."""
        header = context.header
        key, version = header.request_api_key, header.request_api_version
        request = (
            f"{ApiKey(key).name} v{version} (correlation id {header.correlation_id}, "
            f"client id {header.client_id!r}, from {context.client_address})"
        )
        if isinstance(exc, KafkaError):
            error, message = exc.code, exc.message
            log.info("%s failed: %s %s", request, error.name, message)
        else:
            error, message = ErrorCode.UNKNOWN_SERVER_ERROR, UNKNOWN_SERVER_ERROR_MESSAGE
            log.error("%s failed; answered %s", request, error.name, exc_info=exc)
        if key == ApiKey.PRODUCE and body.get("acks") == 0:
            # No answer is read after an acks=0 produce: Kafka closes the connection instead.
            raise CloseConnection(f"{request} failed with {error.name} (acks=0)") from exc
        return self._encode(header, error_response(key, version, body, error, message))

    @handles(ApiKey.API_VERSIONS, 0, 4)
    async def _api_versions(self, context: RequestContext, body: Body) -> Body:
        inter_broker = context.listener_name == self._inter_broker_listener
        return {"error_code": 0, "api_keys": self.api_keys(inter_broker), "throttle_time_ms": 0}
