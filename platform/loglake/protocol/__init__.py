"""Kafka's wire protocol: frames, headers and message bodies for every version in the specs.

Bodies are plain dicts keyed by Kafka's field names in snake_case (see schema.py). The
message definitions in messages.py are generated from Kafka's JSON specs by
scripts/gen_protocol.py.
"""

from loglake.protocol.api import (
    SPEC_VERSIONS,
    ApiKey,
    IsolationLevel,
    api_name,
    is_flexible,
    request_header_version,
    response_header_version,
)
from loglake.protocol.errors import ProtocolDecodeError, ProtocolEncodeError, UnsupportedVersionError
from loglake.protocol.framing import (
    MAX_FRAME_SIZE,
    Chunk,
    RequestHeader,
    chunks_size,
    decode_request,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    read_frame_size,
)
from loglake.protocol.schema import MessageCodec, codec, request_codec, response_codec
from loglake.protocol.types import RecordsRef

__all__ = [
    "MAX_FRAME_SIZE",
    "SPEC_VERSIONS",
    "ApiKey",
    "Chunk",
    "IsolationLevel",
    "MessageCodec",
    "ProtocolDecodeError",
    "ProtocolEncodeError",
    "RecordsRef",
    "RequestHeader",
    "UnsupportedVersionError",
    "api_name",
    "chunks_size",
    "codec",
    "decode_request",
    "decode_request_body",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "is_flexible",
    "read_frame_size",
    "request_codec",
    "request_header_version",
    "response_codec",
    "response_header_version",
]
