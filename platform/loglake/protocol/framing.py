"""Frames and headers: what surrounds a message body on a Kafka connection.

A frame is an int32 size and that many bytes. A request frame holds a request header and
the body; a response frame holds a response header (the correlation id, plus an empty
tagged-field section in v1) and the body. Which header version applies is decided by the
API key and version (api.request_header_version / response_header_version).

The broker reads 4 bytes, `read_frame_size()`, reads the payload, `decode_request()`, and
writes the chunks of `encode_response()` (in-memory bytes, and RecordsRef file ranges to
send with os.sendfile).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from loglake.protocol import types as t
from loglake.protocol.api import request_header_version, response_header_version
from loglake.protocol.errors import ProtocolDecodeError, ProtocolEncodeError, UnsupportedVersionError
from loglake.protocol.header import RequestHeader
from loglake.protocol.schema import request_codec, response_codec
from loglake.protocol.types import Buffer, RecordsRef

__all__ = [
    "MAX_FRAME_SIZE",
    "Chunk",
    "RequestHeader",
    "chunks_size",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "read_frame_size",
]

# Kafka's socket.request.max.bytes default.
MAX_FRAME_SIZE = 100 * 1024 * 1024

Chunk = bytes | RecordsRef
_HEADER = struct.Struct(">hhi")  # request_api_key, request_api_version, correlation_id


def read_frame_size(prefix: Buffer, max_size: int = MAX_FRAME_SIZE) -> int:
    """The size in a frame's 4-byte prefix, checked against `max_size`."""
    if len(prefix) != 4:
        raise ProtocolDecodeError(f"frame size prefix is {len(prefix)} bytes, not 4")
    size = t.INT32.unpack(prefix)[0]
    if size < 0 or size > max_size:
        raise ProtocolDecodeError(f"frame size {size} outside 0..{max_size}")
    return size


def decode_request_header(payload: Buffer) -> tuple[RequestHeader, int]:
    """Parse the header at the start of a request payload (the frame without its size).

    Returns the header and the offset of the body. Unknown API keys parse as header v1,
    so the correlation id is known even for requests that cannot be served.
    """
    buf = payload if isinstance(payload, memoryview) else memoryview(payload)
    try:
        api_key, api_version, correlation_id = _HEADER.unpack_from(buf, 0)
        header = RequestHeader(api_key, api_version, correlation_id)
        version = request_header_version(api_key, api_version)
        pos = _HEADER.size
        if version >= 1:
            # Never compact, even in v2: old brokers must read any ApiVersions header.
            header.client_id, pos = t.read_nullable_string(buf, pos)
        if version >= 2:
            _, pos = t.read_tagged_fields(buf, pos)  # the header defines no tags yet
    except ProtocolDecodeError as e:
        raise ProtocolDecodeError(f"request header: {e}") from e
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as e:
        raise ProtocolDecodeError(f"request header: truncated or malformed ({e})") from e
    return header, pos


def decode_request(payload: Buffer) -> tuple[RequestHeader, dict]:
    """Header and body of a request payload (the frame without its size prefix).

    "records" values in the body are memoryview slices of `payload` (no copy).
    Raises UnsupportedVersionError (with `.header` set) for an API key or version the specs
    lack, and ProtocolDecodeError for anything malformed.
    """
    header, pos = decode_request_header(payload)
    return header, decode_request_body(header, payload, pos)


def decode_request_body(header: RequestHeader, payload: Buffer, pos: int) -> dict:
    """The body of a request payload whose header `decode_request_header` gave (with the
    body's offset `pos`): for a server that looks at the header before the body."""
    try:
        codec = request_codec(header.request_api_key, header.request_api_version)
    except UnsupportedVersionError as e:
        e.header = header
        raise
    return codec.decode(payload, pos)


def _header_bytes(api_key: int, api_version: int, correlation_id: int) -> bytes:
    if response_header_version(api_key, api_version) >= 1:
        return t.INT32.pack(correlation_id) + b"\x00"
    return t.INT32.pack(correlation_id)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]) -> list[Chunk]:
    """A whole response frame (size prefix, header, body) as chunks to send in order.

    Without RecordsRef values this is one bytes object. With them, the bytes between them
    are joined and each RecordsRef stands alone, for the server to send with os.sendfile.
    """
    pieces: list = [b"", _header_bytes(api_key, api_version, correlation_id)]
    response_codec(api_key, api_version).encode_into(pieces, body)
    return _frame(pieces)


def _frame(pieces: list) -> list[Chunk]:
    # pieces[0] is the place of the size prefix.
    try:
        pieces[0] = t.INT32.pack(sum(map(len, pieces)))
        return [b"".join(pieces)]
    except TypeError:  # a RecordsRef: not in memory
        pass
    pieces[0] = t.INT32.pack(sum(t.records_size(p) for p in pieces[1:]))
    chunks: list[Chunk] = []
    run: list = []
    for p in pieces:
        if isinstance(p, (bytes, bytearray, memoryview)):
            run.append(p)
        else:
            if run:
                chunks.append(b"".join(run))
                run = []
            chunks.append(p)
    if run:
        chunks.append(b"".join(run))
    return chunks


def chunks_size(chunks: list[Chunk]) -> int:
    """Bytes on the wire for a chunk list (RecordsRef counts its size)."""
    return sum(t.records_size(c) for c in chunks)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: dict[str, Any]
) -> bytes:
    """A whole request frame, as a client sends it (inter-broker calls, tests)."""
    codec = request_codec(api_key, api_version)
    header_version = request_header_version(api_key, api_version)
    pieces: list = [b"", _HEADER.pack(api_key, api_version, correlation_id)]
    if header_version >= 1:
        t.write_nullable_string(pieces, client_id)
    if header_version >= 2:
        pieces.append(b"\x00")
    codec.encode_into(pieces, body)
    frame = _frame(pieces)
    if len(frame) != 1:
        raise ProtocolEncodeError("a request's records must be in memory")
    return frame[0]  # type: ignore[return-value]


def decode_response(api_key: int, api_version: int, payload: Buffer) -> tuple[int, dict]:
    """Correlation id and body of a response payload (the frame without its size prefix)."""
    codec = response_codec(api_key, api_version)
    buf = payload if isinstance(payload, memoryview) else memoryview(payload)
    try:
        correlation_id = t.INT32.unpack_from(buf, 0)[0]
        pos = 4
        if response_header_version(api_key, api_version) >= 1:
            _, pos = t.read_tagged_fields(buf, pos)
    except ProtocolDecodeError as e:
        raise ProtocolDecodeError(f"response header: {e}") from e
    except (IndexError, struct.error) as e:
        raise ProtocolDecodeError(f"response header: truncated ({e})") from e
    return correlation_id, codec.decode(buf, pos)
