"""The HTTP API (FastAPI): REST Proxy v2 produce, fetch and consumer instances, topic and
cluster administration, the operators' routes and the web console.

Each route module builds an `APIRouter` from the collaborators it uses; `create_app` puts
them behind the HTTP security middleware and Kafka's error codes mapped to HTTP statuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Response
from loglake.errors import KafkaError

from ingest_gateway.http.acls import acl_routes
from ingest_gateway.http.broker_configs import broker_config_routes
from ingest_gateway.http.cluster import cluster_routes
from ingest_gateway.http.compaction import compaction_routes
from ingest_gateway.http.console import console_routes
from ingest_gateway.http.errors import BadRequest, JSONBytesResponse, error_response, kafka_error_response
from ingest_gateway.http.groups import group_routes
from ingest_gateway.http.reassignments import reassignment_routes
from ingest_gateway.http.records import record_routes
from ingest_gateway.http.replication_throttles import replication_throttle_routes
from ingest_gateway.http.security import BasicAuthenticator, HttpSecurity
from ingest_gateway.http.tiering import tiering_routes
from ingest_gateway.http.topics import topic_routes
from ingest_gateway.http.transactions import transaction_routes
from ingest_gateway.http.users import user_routes

if TYPE_CHECKING:
    from loglake.config import BrokerConfig, LogConfig
    from loglake.coordination.store import MetadataStore
    from loglake.groups import GroupCoordinator
    from loglake.maintenance.log_cleaner import LogCleaner
    from loglake.storage.log_manager import LogManager
    from loglake.transactions import TransactionCoordinator

    from ingest_gateway.apis.acl_apis import AclApis
    from ingest_gateway.apis.authorization import RequestAuthorization
    from ingest_gateway.coordinators.coordinator_locator import CoordinatorLocator
    from ingest_gateway.coordinators.transaction_markers import MarkerWriter
    from ingest_gateway.http.consumers import ConsumerManager
    from ingest_gateway.metadata.admin_manager import AdminManager
    from ingest_gateway.metadata.dynamic_config import DynamicConfigManager
    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.metadata.metadata_thread import MetadataThread
    from ingest_gateway.observability.metrics import BrokerMetrics
    from ingest_gateway.replica.replica_manager import ReplicaManager


@dataclass(frozen=True)
class HttpServices:
    """What the HTTP API uses of the broker."""

    config: BrokerConfig
    store: MetadataStore
    authorization: RequestAuthorization
    # http.authentication.method=BASIC: the SCRAM credentials' checker; None: no authentication.
    authenticator: BasicAuthenticator | None
    cache: MetadataCache
    admin: AdminManager
    replica_manager: ReplicaManager
    log_manager: LogManager
    log_cleaner: LogCleaner
    # The broker's current topic defaults (dynamic broker configs change them).
    log_defaults: Callable[[], LogConfig]
    group_coordinator: GroupCoordinator
    consumers: ConsumerManager
    coordinators: CoordinatorLocator
    transaction_coordinator: TransactionCoordinator
    marker_writer: MarkerWriter
    dynamic_config: DynamicConfigManager
    acl_apis: AclApis
    metrics: BrokerMetrics | None
    # Where the store is called (ZooKeeper kept off the event loop).
    metadata_thread: MetadataThread
    # The store's cluster status, read on the metadata thread.
    cluster_status: Callable[[], Coroutine[Any, Any, dict[str, Any]]]
    # Keeps a task the response does not wait for (an acks=0 append) until it ends.
    in_background: Callable[[asyncio.Task[Any]], None]


def create_app(services: HttpServices) -> FastAPI:
    s = services
    config = s.config
    app = FastAPI(
        title="loglake",
        description="Kafka-compatible streaming platform: produce, fetch and administer topics over HTTP.",
        version="0.1.0",
        default_response_class=JSONBytesResponse,
    )
    app.add_middleware(
        HttpSecurity,
        authorization=s.authorization,
        authenticator=s.authenticator,
        realm=config.raw.get("http.authentication.realm") or "loglake",
    )

    @app.exception_handler(KafkaError)
    async def _kafka_error(request: Request, exc: KafkaError) -> Response:
        return kafka_error_response(exc)

    @app.exception_handler(BadRequest)
    async def _bad_request(request: Request, exc: BadRequest) -> Response:
        return error_response(exc.status, exc.message, sub=exc.sub)

    # Routes are matched in order, one included router after another (~5 µs each): the
    # produce and fetch routes come first, behind only the topic routes that share their
    # paths (so that a wrong method still meets the same route first and gets the same 405).
    # No two routers serve the same method and path, so the order picks nothing else.
    app.include_router(
        topic_routes(
            config.num_partitions,
            config.default_replication_factor,
            s.cache,
            s.admin,
            s.replica_manager,
            s.log_cleaner.manager,
        )
    )
    app.include_router(
        record_routes(
            config.socket_request_max_bytes, s.cache, s.log_defaults, s.replica_manager, s.metrics, s.in_background
        )
    )
    app.include_router(
        group_routes(
            broker_id=config.broker_id,
            coordinator=s.group_coordinator,
            consumers=s.consumers,
            locator=s.coordinators,
            authorization=s.authorization,
            cache=s.cache,
            replica_manager=s.replica_manager,
        )
    )
    app.include_router(tiering_routes(s.replica_manager, s.store, s.metadata_thread))
    app.include_router(
        transaction_routes(config.broker_id, s.transaction_coordinator, s.replica_manager, s.marker_writer)
    )
    app.include_router(reassignment_routes(s.admin))
    app.include_router(replication_throttle_routes(s.replica_manager, s.cache))
    app.include_router(broker_config_routes(s.dynamic_config, s.cache, s.store, s.metadata_thread))
    app.include_router(user_routes(s.store, s.metadata_thread))
    app.include_router(acl_routes(s.acl_apis, s.authorization))
    app.include_router(console_routes(config, s.admin, s.cache, s.metrics, s.cluster_status))
    app.include_router(cluster_routes(config.broker_id, s.metrics, s.cluster_status, s.log_manager, s.replica_manager))
    app.include_router(compaction_routes(config.broker_id, s.replica_manager, s.log_cleaner))
    return app
