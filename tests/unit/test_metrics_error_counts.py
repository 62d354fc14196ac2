"""The error codes a response is counted with (ErrorsPerSec): a ProduceResponse, counted on
an unrolled path of its own, gets the same counts as the generic walk of the body."""

from __future__ import annotations

from typing import Any

import pytest

from ingest_gateway.observability.metrics import _error_codes, _produce_error_codes
from loglake.errors import ErrorCode


def partition(index: int, code: int) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1 if code else 7,
        "log_append_time_ms": -1,
        "log_start_offset": 0,
        "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}] if code else [],
        "error_message": "bad" if code else None,
        "current_leader": {"leader_id": 2, "leader_epoch": 3},
    }


BODIES = [
    {"responses": [], "throttle_time_ms": 0},
    {"responses": [{"name": "t", "partition_responses": [partition(0, 0)]}], "throttle_time_ms": 0},
    {
        "responses": [
            {"name": "a", "partition_responses": [partition(0, 0), partition(1, ErrorCode.NOT_LEADER_OR_FOLLOWER)]},
            {"name": "b", "partition_responses": [partition(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]},
            {"name": "c", "partition_responses": [partition(4, ErrorCode.CORRUPT_MESSAGE)]},
        ],
        "throttle_time_ms": 5,
        "node_endpoints": [{"node_id": 2, "host": "h", "port": 1, "rack": None}],
    },
]


@pytest.mark.parametrize("body", BODIES)
def test_produce_errors_are_counted_as_the_walk_counts_them(body: dict[str, Any]) -> None:
    walked: dict[int, int] = {}
    unrolled: dict[int, int] = {}
    _error_codes(body, walked)
    _produce_error_codes(body, unrolled)
    assert unrolled == walked
