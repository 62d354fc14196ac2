"""The record-batch codecs: gzip, snappy, lz4 and zstd, in the framings Kafka clients use."""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from loglake.errors import ErrorCode, KafkaError


class CompressionType(IntEnum):
    """The codec id held in the low three bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Kafka's `compression.type` names; `producer` and `uncompressed` mean none here."""
        lowered = name.lower()
        if lowered in ("none", "uncompressed", "producer"):
            return cls.NONE
        try:
            return cls[lowered.upper()]
        except KeyError:
            raise ValueError(f"unknown compression type {name!r}") from None


# The Java client wraps snappy in snappy-java's stream framing ("xerial"): a 16-byte header,
# then blocks each prefixed by their compressed length. librdkafka reads and writes both.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


def _snappy_compress(data: bytes | memoryview) -> bytes:
    out = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    out = []
    pos = len(_XERIAL_HEADER)
    while pos < len(view):
        if pos + 4 > len(view):
            raise ValueError("xerial snappy block length cut short")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise ValueError("xerial snappy block runs past the data")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        pos += size
    return b"".join(out)


def _lz4_compress(data: bytes | memoryview) -> bytes:
    # Kafka's Java reader accepts independent 64 KB blocks without block checksums.
    compressor = cramjam.lz4.Compressor(level=None, content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def compress(codec: int, data: bytes | memoryview) -> bytes:
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec == CompressionType.LZ4:
        return _lz4_compress(data)
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Inflate a batch's records section; a codec error is CORRUPT_MESSAGE."""
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if codec == CompressionType.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == CompressionType.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, ValueError) as exc:
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE, f"cannot decompress {CompressionType(codec).name} records: {exc}"
        ) from None
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
