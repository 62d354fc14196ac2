"""This broker's health, its metrics and the cluster's status over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from ingest_gateway.http.errors import JSONBytesResponse, error_response

if TYPE_CHECKING:
    from loglake.storage.log_manager import LogManager

    from ingest_gateway.observability.metrics import BrokerMetrics
    from ingest_gateway.replica.replica_manager import ReplicaManager


def cluster_routes(
    broker_id: int,
    metrics: BrokerMetrics | None,
    cluster_status: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
    log_manager: LogManager,
    replica_manager: ReplicaManager,
) -> APIRouter:
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> Response:
        """ "ok"; "degraded" (200) while some log dir is offline and the others serve;
        "offline" (503) when every log dir is."""
        body: dict[str, Any] = {"status": "ok", "broker_id": broker_id}
        offline = log_manager.failure_channel.offline_dirs()
        if not offline:
            return JSONBytesResponse(body)
        body["offline_log_dirs"] = {str(d): why for d, why in offline.items()}
        body["offline_partitions"] = len(replica_manager.offline_partitions)
        if log_manager.live_dirs:
            body["status"] = "degraded"
            return JSONBytesResponse(body)
        body["status"] = "offline"
        body["message"] = f"every log dir is offline: {', '.join(map(str, offline))}"
        return JSONBytesResponse(body, status_code=503)

    @router.get("/metrics")
    async def exposition() -> Response:
        """Prometheus text exposition of this broker's metrics (docs/operations.md)."""
        if metrics is None:
            return error_response(404, "metrics are disabled on this broker (metrics.enabled=false)")
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @router.get("/cluster")
    async def status() -> dict[str, Any]:
        """Brokers, controller and epoch, leaders/replicas/ISR, under-replicated and offline partitions."""
        return await cluster_status()

    return router
