"""How Kafka error codes read over HTTP: a status and a REST Proxy-style error body.

The body is `{"error_code": <status * 100 + n>, "message": ..., "kafka_error": <name>}`,
the shape Confluent's REST Proxy users already handle, plus Kafka's own error name.
"""

from __future__ import annotations

from fastapi.responses import ORJSONResponse

from loglake.errors import ErrorCode, KafkaError

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
    ErrorCode.NOT_LEADER_OR_FOLLOWER: 503,
    ErrorCode.LEADER_NOT_AVAILABLE: 503,
    ErrorCode.NOT_ENOUGH_REPLICAS: 503,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: 503,
    ErrorCode.NOT_CONTROLLER: 503,
    ErrorCode.REQUEST_TIMED_OUT: 504,
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


def error_response(status: int, message: str, kafka_error: ErrorCode | None = None, sub: int = 1) -> ORJSONResponse:
    body: dict[str, object] = {"error_code": status * 100 + sub, "message": message}
    if kafka_error is not None:
        body["kafka_error"] = kafka_error.name
    return ORJSONResponse(body, status_code=status)


def kafka_error_response(exc: KafkaError) -> ORJSONResponse:
    status = http_status(exc.code)
    # REST Proxy tells "topic not found" (40401) from "partition not found" (40402).
    sub = 2 if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "partition" in exc.message else 1
    return error_response(status, exc.message, exc.code, sub)
