"""Brokers as a client sees them: each at the endpoint of the listener the client's
connection came in on (Metadata, FindCoordinator, DescribeCluster and KIP-951 answers).
A broker without that listener is left out, as Kafka does."""

from __future__ import annotations

from typing import TypedDict

from loglake.coordination.model import BrokerEndpoint


class NodeEndpoint(TypedDict):
    """A broker in Produce's and Fetch's `node_endpoints` (KIP-951), and Metadata's `brokers`."""

    node_id: int
    host: str
    port: int
    rack: str | None


def node_endpoint(broker: BrokerEndpoint, listener_name: str) -> NodeEndpoint | None:
    endpoint = broker.kafka_endpoint(listener_name)
    if endpoint is None:
        return None
    return {"node_id": broker.broker_id, "host": endpoint[0], "port": endpoint[1], "rack": broker.rack}


def node_endpoints(listener_name: str, brokers: list[BrokerEndpoint]) -> list[NodeEndpoint]:
    return [node for node in (node_endpoint(b, listener_name) for b in brokers) if node is not None]
