"""Brokers as a client sees them: each at the endpoint of the listener the client's
connection came in on (Metadata, FindCoordinator, DescribeCluster and KIP-951 answers).
A broker without that listener is left out, as Kafka does."""

from __future__ import annotations

from typing import Any

from loglake.coordination.model import BrokerEndpoint

from ingest_gateway.network.request_context import current_request


def node_endpoint(broker: BrokerEndpoint) -> dict[str, Any] | None:
    endpoint = broker.kafka_endpoint(current_request().listener_name)
    if endpoint is None:
        return None
    return {"node_id": broker.broker_id, "host": endpoint[0], "port": endpoint[1], "rack": broker.rack}


def node_endpoints(brokers: list[BrokerEndpoint]) -> list[dict[str, Any]]:
    return [node for node in map(node_endpoint, brokers) if node is not None]
