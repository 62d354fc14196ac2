"""The protocol layer's exceptions: every malformed input surfaces as ProtocolDecodeError."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loglake.protocol.header import RequestHeader


class ProtocolDecodeError(ValueError):
    """Truncated, oversized or malformed bytes: the connection that sent them is broken."""


class UnsupportedVersionError(ProtocolDecodeError):
    """An API key or version outside the specs. `header` is set when the request header parsed,
    so the broker can still answer (Kafka answers ApiVersions with a v0 UNSUPPORTED_VERSION)."""

    def __init__(self, message: str, api_key: int, api_version: int, header: RequestHeader | None = None) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.header = header


class ProtocolEncodeError(ValueError):
    """A message body that cannot be encoded at the asked version (a value of the wrong type or range)."""
