"""A request's header: the API key and version, the correlation id and the client id.

Its own module because both the framing (which reads it) and the exceptions (which carry
it, so the broker can still answer an unsupported version) need it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RequestHeader:
    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None = None
