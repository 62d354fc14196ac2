"""Kafka request frames to the handler of their API, per listener (the dispatch half of
Kafka's KafkaApis, with its ApiVersionManager).

Each API module registers its handlers with the versions it answers. The table a client
sees depends on the listener it came in on: the controller-to-broker APIs (LeaderAndIsr,
StopReplica, UpdateMetadata) and WriteTxnMarkers are what brokers send each other, so
they are offered and served only on `inter.broker.listener.name`. A client listener
neither advertises nor answers them, whatever ACLs say. (Kafka in ZooKeeper mode serves
them everywhere behind ClusterAction; one gate more costs nothing and keeps a public
listener from ever reaching them.)

For every request: decode, the request-level authorization check, the handler, error
counting for the metrics, encode. A handler that fails answers its request with the error
in the API's own shape (error_responses.py), and the connection serves the next request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

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
from loglake.protocol.release import release_versions

from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.apis.error_responses import error_response
from ingest_gateway.network.request_context import CloseConnection, current_request

if TYPE_CHECKING:
    from ingest_gateway.observability.metrics import BrokerMetrics

log = logging.getLogger(__name__)

Body = dict[str, Any]
# Kafka's message for UNKNOWN_SERVER_ERROR (the details stay in the broker's log).
UNKNOWN_SERVER_ERROR_MESSAGE = "The server experienced an unexpected error when processing the request."
# Each API's handler takes and returns its own TypedDicts (loglake.protocol.bodies); the router
# only decodes and encodes, so it sees a request of any shape and a response as a mapping.
Handler = Callable[[RequestHeader, Any], Awaitable[Mapping[str, Any] | None]]

# Sent only by brokers to brokers: served on the inter-broker listener alone.
INTER_BROKER_APIS = frozenset(
    {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.WRITE_TXN_MARKERS}
)


class ApiModule(Protocol):
    """An API family's handlers (KafkaApis, GroupApis, TxnApis, ...): each module registers
    its handlers, one per API, at the versions it answers (`register_all`: the release's)."""

    def register(self, router: RequestRouter) -> None: ...


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
        self.register(ApiKey.API_VERSIONS, release_versions(ApiKey.API_VERSIONS), self._api_versions)

    def register(self, api_key: ApiKey, versions: tuple[int, int], handler: Handler) -> None:
        self._apis[api_key] = _Api(versions, handler, api_key in INTER_BROKER_APIS)
        self._tables.clear()

    def register_all(self, handlers: Mapping[ApiKey, Handler]) -> None:
        """Serve each API at the versions of the release (`loglake.protocol.release`)."""
        for key, handler in handlers.items():
            self.register(key, release_versions(key), handler)

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

    async def handle(self, payload: memoryview) -> list[Chunk] | None:
        """One request frame's payload to its response frame (None: send nothing)."""
        header, pos = decode_request_header(payload)
        key, version = header.request_api_key, header.request_api_version
        inter_broker = self._on_inter_broker_listener()
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
        try:
            response: Mapping[str, Any] | None = self._authorization.denied_response(key, version, body)
            if response is None:
                response = await api.handler(header, body)
            if response is None:
                return None
            return self._encode(header, response)
        except (CloseConnection, ProtocolDecodeError):
            raise
        except Exception as exc:  # noqa: BLE001 - any handler's bug is this request's error
            return self._failed(header, body, exc)

    def _encode(self, header: RequestHeader, response: Mapping[str, Any]) -> list[Chunk]:
        key = header.request_api_key
        chunks = encode_response(key, header.request_api_version, header.correlation_id, response)
        if self._metrics is not None:
            self._metrics.count_errors(key, response)
        return chunks

    def _failed(self, header: RequestHeader, body: Body, exc: Exception) -> list[Chunk]:
        """A handler failed: the request's answer is the error, in its API's shape, as
        Kafka's KafkaApis.handleError does; the connection stays open. A KafkaError keeps
        its code; anything else is UNKNOWN_SERVER_ERROR, logged once with the header."""
        key, version = header.request_api_key, header.request_api_version
        request = (
            f"{ApiKey(key).name} v{version} (correlation id {header.correlation_id}, "
            f"client id {header.client_id!r}, from {current_request().peer})"
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

    def _on_inter_broker_listener(self) -> bool:
        return current_request().listener_name == self._inter_broker_listener

    async def _api_versions(self, header: RequestHeader, body: Body) -> Body:
        return {"error_code": 0, "api_keys": self.api_keys(self._on_inter_broker_listener()), "throttle_time_ms": 0}
