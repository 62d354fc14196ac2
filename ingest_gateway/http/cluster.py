"""This broker's health, its metrics and the cluster's status over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from ingest_gateway.http.errors import error_response

if TYPE_CHECKING:
    from ingest_gateway.observability.metrics import BrokerMetrics


def cluster_routes(
    broker_id: int, metrics: BrokerMetrics | None, cluster_status: Callable[[], dict[str, Any]]
) -> APIRouter:
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "broker_id": broker_id}

    @router.get("/metrics")
    async def exposition() -> Response:
        """Prometheus text exposition of this broker's metrics (docs/operations.md)."""
        if metrics is None:
            return error_response(404, "metrics are disabled on this broker (metrics.enabled=false)")
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @router.get("/cluster")
    async def status() -> dict[str, Any]:
        """Brokers, controller and epoch, leaders/replicas/ISR, under-replicated and offline partitions."""
        return cluster_status()

    return router
