"""How Kafka error codes read over HTTP: a status and a REST Proxy-style error body.

The body is `{"error_code": <status * 100 + n>, "message": ..., "kafka_error": <name>}`,
the shape Confluent's REST Proxy users already handle, plus Kafka's own error name.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response
from loglake.errors import ErrorCode, KafkaError


class JSONBytesResponse(Response):
    """JSON rendered by orjson (FastAPI's JSONBytesResponse is deprecated)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


_STATUS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.OFFSET_OUT_OF_RANGE: 416,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
    ErrorCode.RECORD_LIST_TOO_LARGE: 413,
    ErrorCode.TOPIC_ALREADY_EXISTS: 409,
    ErrorCode.INVALID_TOPIC_EXCEPTION: 422,
    ErrorCode.INVALID_CONFIG: 422,
    ErrorCode.INVALID_PARTITIONS: 422,
    ErrorCode.INVALID_REPLICATION_FACTOR: 422,
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.INVALID_REQUIRED_ACKS: 422,
    ErrorCode.CORRUPT_MESSAGE: 422,
    ErrorCode.INVALID_RECORD: 422,
    ErrorCode.POLICY_VIOLATION: 422,
    ErrorCode.TOPIC_DELETION_DISABLED: 403,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: 403,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: 403,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: 403,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: 403,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: 503,
    ErrorCode.LEADER_NOT_AVAILABLE: 503,
    ErrorCode.NOT_ENOUGH_REPLICAS: 503,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: 503,
    ErrorCode.NOT_CONTROLLER: 503,
    ErrorCode.REQUEST_TIMED_OUT: 504,
    ErrorCode.UNKNOWN_MEMBER_ID: 404,
    ErrorCode.GROUP_ID_NOT_FOUND: 404,
    ErrorCode.NON_EMPTY_GROUP: 409,
    ErrorCode.REBALANCE_IN_PROGRESS: 409,
    ErrorCode.ILLEGAL_GENERATION: 409,
    ErrorCode.INVALID_GROUP_ID: 422,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: 503,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: 503,
    ErrorCode.NOT_COORDINATOR: 503,
    # The partition's log dir is offline (a full or failing disk): WebDAV's Insufficient
    # Storage says what it is; a client retries once the leadership moved.
    ErrorCode.KAFKA_STORAGE_ERROR: 507,
    ErrorCode.LOG_DIR_NOT_FOUND: 404,
}

RETRIABLE = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


class BadRequest(Exception):
    """A request the API cannot take: answered with `status` and `message`."""

    def __init__(self, status: int, message: str, sub: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.sub = sub


def http_status(code: ErrorCode) -> int:
    return _STATUS.get(code, 500)


def error_response(status: int, message: str, kafka_error: ErrorCode | None = None, sub: int = 1) -> JSONBytesResponse:
    body: dict[str, object] = {"error_code": status * 100 + sub, "message": message}
    if kafka_error is not None:
        body["kafka_error"] = kafka_error.name
    return JSONBytesResponse(body, status_code=status)


def kafka_error_response(exc: KafkaError) -> JSONBytesResponse:
    status = http_status(exc.code)
    # REST Proxy tells "topic not found" (40401) from "partition not found" (40402).
    sub = 2 if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "partition" in exc.message else 1
    return error_response(status, exc.message, exc.code, sub)


async def json_object(request: Request) -> dict[str, Any]:
    """The request's body, which must be a JSON object (400 if not JSON, 422 if not an object)."""
    try:
        doc = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest(422, "request body must be a JSON object", 2)
    return doc
