"""A segment's `.log` file of magic-2 record batches, and slices of it for fetches.

Writes are positional (`pwritev`) and reads are `pread`s, so the file offset is never
shared state: appends and any number of concurrent readers need no common lock. Only
batch headers are parsed; records are looked at solely to answer a timestamp search.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from loglake.errors import ErrorCode, KafkaError
from loglake.record.header import HEADER_SIZE, LOG_OVERHEAD, RecordBatchHeader

# Bytes read at a time when walking batch headers: a few index intervals' worth.
SCAN_CHUNK = 16 * 1024

Bytes = bytes | bytearray | memoryview

# baseOffset, batchLength, (epoch, magic, crc, attributes), lastOffsetDelta, (baseTimestamp), maxTimestamp
_LOCATION = struct.Struct(">qi11xi8xq")


class BatchLocation(NamedTuple):
    """Where a batch lies in a segment file, with the header fields lookups need."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int

    @property
    def end(self) -> int:
        return self.position + self.size

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


class FileRecords:
    """The open `.log` file. Its descriptor lives as long as the object, so a LogSlice
    taken before the segment was deleted can still be read; `close` ends it early."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        # For loop.sock_sendfile(sock, file, position, size): it wants a binary file object.
        self.file: io.FileIO = open(self._fd, "rb", buffering=0, closefd=False)  # noqa: SIM115 - lives as long as the segment

    def __del__(self) -> None:
        self.close()

    @property
    def size(self) -> int:
        """Bytes written so far (the whole file once opened; appends move it forward)."""
        return self._size

    @property
    def fd(self) -> int:
        return self._fd

    def append(self, buffers: Sequence[Bytes], size: int | None = None) -> int:
        """Write `buffers` back to back at the end (`size`: their bytes, if the caller knows);
        returns the position they start at."""
        position = self._size
        # len() counts bytes for every buffer here but a memoryview of wider items.
        total = sum([b.nbytes if b.__class__ is memoryview else len(b) for b in buffers]) if size is None else size
        try:
            written = os.pwritev(self._fd, buffers, position)
            if written < total:  # a short write (a disk filling up): finish it, or fail below
                rest = memoryview(b"".join(buffers))[written:]
                while rest:
                    n = os.pwrite(self._fd, rest, position + total - len(rest))
                    rest = rest[n:]
        except OSError:
            # Whatever part got written goes, so the file never holds half a batch that a
            # later append or a clean restart could take for data.
            os.ftruncate(self._fd, position)
            raise
        self._size = position + total
        return position

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def batches(self, start: int, end: int) -> Iterator[BatchLocation]:
        """Where each batch that starts in [start, end) with its header below `end` lies.

        The bytes are trusted (they were validated when appended or recovered), so only
        the few header fields needed are unpacked; a length that would not move forward
        is refused.
        """
        position = start
        chunk, chunk_start = b"", start
        while position + HEADER_SIZE <= end:
            if position + HEADER_SIZE > chunk_start + len(chunk):
                chunk_start = position
                chunk = self.read(position, min(SCAN_CHUNK, end - position))
                if len(chunk) < HEADER_SIZE:
                    return
            base_offset, length, last_offset_delta, max_timestamp = _LOCATION.unpack_from(chunk, position - chunk_start)
            size = length + LOG_OVERHEAD
            if size < HEADER_SIZE:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.path}: batch at {position} claims {size} bytes")
            yield BatchLocation(position, size, base_offset, base_offset + last_offset_delta, max_timestamp)
            position += size

    def search_for_timestamp(
        self, timestamp: int, start: int, end: int, starting_offset: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp` and
        `starting_offset`, scanning batches in [start, end); None if there is none."""
        for batch in self.batches(start, end):
            if batch.max_timestamp < timestamp or batch.last_offset < starting_offset:
                continue
            data = self.read(batch.position, batch.size)
            header = RecordBatchHeader.parse(data)
            if header.is_log_append_time or header.compression:
                # Every record of a LogAppendTime batch carries its max timestamp. A compressed
                # batch would have to be inflated to look inside: answer with its first offset,
                # which a consumer seeking by time may safely start from.
                return max(header.base_offset, starting_offset), header.max_timestamp
            for offset, record_timestamp in _record_offsets_and_timestamps(data, header):
                if record_timestamp >= timestamp and offset >= starting_offset:
                    return offset, record_timestamp
        return None

    def truncate_to(self, size: int) -> int:
        """Cut the file to `size` bytes; returns how many were removed."""
        if size > self._size:
            raise ValueError(f"cannot truncate {self.path} of {self._size} bytes to {size}")
        removed = self._size - size
        os.ftruncate(self._fd, size)
        self._size = size
        return removed

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            self.file.close()
            os.close(fd)

    def delete(self) -> None:
        """Unlink the file; the descriptor closes when the last reader lets go of it."""
        self.path.unlink(missing_ok=True)


def _read_varint(buf: Bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at `pos`: (value, position after it)."""
    raw = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _record_offsets_and_timestamps(batch: bytes, header: RecordBatchHeader) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record in an uncompressed batch.

    A record is: length varint, attributes int8, timestamp delta varlong, offset delta
    varint, then key/value/headers, which are skipped by length.
    """
    records = memoryview(batch)[HEADER_SIZE:]
    pos = 0
    for _ in range(header.record_count):
        length, body = _read_varint(records, pos)
        timestamp_delta, after = _read_varint(records, body + 1)
        offset_delta, _ = _read_varint(records, after)
        yield header.base_offset + offset_delta, header.base_timestamp + timestamp_delta
        pos = body + length


@dataclass(frozen=True, slots=True)
class LogSlice:
    """Whole record batches, a byte range of one segment file: what a fetch sends.

    Send it with `loop.sock_sendfile(sock, slice.file, slice.position, slice.size)` (or
    `os.sendfile(out, slice.fd, ...)`), or take the bytes with `read_bytes()`.
    `first_offset` is the base offset of the first batch, which may be below the offset
    asked for (the batch holding it is sent whole); `next_offset` is the offset after the
    last batch, where the next fetch continues. An empty slice has size 0 and no file.
    """

    records: FileRecords | None
    position: int
    size: int
    first_offset: int
    next_offset: int

    @classmethod
    def empty(cls, offset: int) -> LogSlice:
        return cls(None, 0, 0, offset, offset)

    @property
    def file(self) -> io.FileIO | None:
        return None if self.records is None else self.records.file

    @property
    def fd(self) -> int:
        return -1 if self.records is None else self.records.fd

    def read_bytes(self) -> bytes:
        if self.records is None or not self.size:
            return b""
        return self.records.read(self.position, self.size)
