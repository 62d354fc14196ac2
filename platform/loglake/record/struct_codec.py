"""Kafka's classic (non-flexible) struct encoding, as the internal topics' records use it:
int16/int32/int64 big-endian, strings as int16 length + UTF-8 (-1: null), bytes and
arrays with an int32 length (-1: null)."""

from __future__ import annotations

import struct


class StructWriter:
    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int8(self, v: int) -> StructWriter:
        self._parts.append(struct.pack(">b", v))
        return self

    def int16(self, v: int) -> StructWriter:
        self._parts.append(struct.pack(">h", v))
        return self

    def int32(self, v: int) -> StructWriter:
        self._parts.append(struct.pack(">i", v))
        return self

    def int64(self, v: int) -> StructWriter:
        self._parts.append(struct.pack(">q", v))
        return self

    def string(self, v: str | None) -> StructWriter:
        if v is None:
            return self.int16(-1)
        data = v.encode()
        self.int16(len(data))
        self._parts.append(data)
        return self

    def bytes_(self, v: bytes | None) -> StructWriter:
        if v is None:
            return self.int32(-1)
        self.int32(len(v))
        self._parts.append(bytes(v))
        return self

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class StructReader:
    """Raises ValueError on anything cut short or null where a value is required."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self._pos + n > len(self._data):
            raise ValueError("truncated record")
        view = self._data[self._pos : self._pos + n]
        self._pos += n
        return view

    def int8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else str(self._take(n), "utf-8")

    def string(self) -> str:
        v = self.nullable_string()
        if v is None:
            raise ValueError("null where a string is required")
        return v

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else bytes(self._take(n))

    def bytes_(self) -> bytes:
        v = self.nullable_bytes()
        if v is None:
            raise ValueError("null where bytes are required")
        return v
