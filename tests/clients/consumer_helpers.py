"""Helpers of the KIP-848 client tests: a consumer-protocol member's settings and a raw
ConsumerGroupHeartbeat. (The polling members and the steady producer are bench/rebalance.py's,
the broker's short group timeouts client_helpers'.)"""

from __future__ import annotations

from client_helpers import raw_request
from loglake.protocol import ApiKey


def consumer_config(bootstrap: str, group: str, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **extra,
    }


def heartbeat(bootstrap: str, group: str, **fields: object) -> dict:
    """A raw ConsumerGroupHeartbeat v1: a new member joining with `fields` changed."""
    body = {
        "group_id": group,
        "member_id": "",
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30000,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [],
        **fields,
    }
    return raw_request(bootstrap, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body)
