"""Message bodies to and from bytes, driven by the generated definitions in messages.py.

A message decodes to a dict keyed by the spec's field names in snake_case, nested structs
to dicts and arrays to lists. Every field of the spec is a key: fields the version lacks,
and tagged fields the sender left out, hold their defaults. Encoding reads the same shape;
a missing key takes the field's default and keys the version lacks are ignored.

Each (message, version) is compiled once into a plan of closures (`codec()` is cached):
runs of fixed-width fields become one struct.unpack/pack, so the per-request cost is one
Python call per variable-width field, not a walk over the spec.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping
from typing import Any

from loglake.protocol import types as t
from loglake.protocol.api import api_name, parse_versions
from loglake.protocol.errors import ProtocolDecodeError, ProtocolEncodeError, UnsupportedVersionError
from loglake.protocol.fast import produce_request_reader, produce_response_writer
from loglake.protocol.fast_fetch import (
    fetch_request_reader,
    fetch_request_writer,
    fetch_response_reader,
    fetch_response_writer,
)
from loglake.protocol.messages import MESSAGES
from loglake.protocol.types import Buffer, Reader, Writer

__all__ = ["MessageCodec", "codec", "decode", "encode", "request_codec", "response_codec"]

# Decode steps read fields into the struct's dict and return the new position; encode steps
# append the fields' bytes to the output list.
DecodeStep = Callable[[Buffer, int, dict], int]
EncodeStep = Callable[[list, dict], None]

_FIXED_CODES = {
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
    "bool": "?",
}
_TYPE_DEFAULTS: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "uint32": 0,
    "int64": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": t.ZERO_UUID,
}
# (type, compact, nullable) -> (reader, writer) for the variable-width primitives.
_VARIABLE: dict[tuple[str, bool, bool], tuple[Reader, Writer]] = {
    ("string", False, False): (t.read_string, t.write_string),
    ("string", False, True): (t.read_nullable_string, t.write_nullable_string),
    ("string", True, False): (t.read_compact_string, t.write_compact_string),
    ("string", True, True): (t.read_compact_nullable_string, t.write_compact_nullable_string),
    ("bytes", False, False): (t.read_bytes, t.write_bytes),
    ("bytes", False, True): (t.read_nullable_bytes, t.write_nullable_bytes),
    ("bytes", True, False): (t.read_compact_bytes, t.write_compact_bytes),
    ("bytes", True, True): (t.read_compact_nullable_bytes, t.write_compact_nullable_bytes),
    # Records are nullable on the wire whatever the spec says (an absent batch set is -1).
    ("records", False, False): (t.read_records, t.write_records),
    ("records", False, True): (t.read_records, t.write_records),
    ("records", True, False): (t.read_compact_records, t.write_compact_records),
    ("records", True, True): (t.read_compact_records, t.write_compact_records),
}
_MISSING = object()
_EMPTY_STRUCT: dict = {}


def _contains(spec: str | None, version: int) -> bool:
    r = parse_versions(spec)
    return r is not None and r[0] <= version <= r[1]


class _Struct:
    """One struct at one version: its reader, its writer and a maker of its default value."""

    __slots__ = ("new_default", "read", "write")

    def __init__(self, read: Reader, write: Writer, new_default: Callable[[], dict]) -> None:
        self.read = read
        self.write = write
        self.new_default = new_default


def _compile_struct(fields: tuple[dict, ...], version: int, flexible: bool, where: str) -> _Struct:
    template: dict[str, Any] = {}  # every field in spec order, holding its default
    # Mutable defaults (lists, struct dicts) are made anew: all of them for a default value,
    # on decode only those of fields the version lacks or the sender may leave out (tagged).
    fresh_all: list[tuple[str, Callable[[], Any]]] = []
    fresh_read: list[tuple[str, Callable[[], Any]]] = []
    decode_steps: list[DecodeStep] = []
    encode_steps: list[EncodeStep] = []
    tagged_readers: dict[int, tuple[str, Reader]] = {}
    tagged_writers: list[tuple[int, str, Writer, bytes]] = []
    fixed_run: list[tuple[str, str, Any]] = []  # consecutive fixed-width fields: (key, code, default)

    def flush_fixed() -> None:
        if fixed_run:
            decode_steps.append(_fixed_decode_step(fixed_run))
            encode_steps.append(_fixed_encode_step(fixed_run))
            fixed_run.clear()

    for f in fields:
        key = f["name"]
        ftype = f["type"]
        nullable = _contains(f.get("nullableVersions"), version)
        # A field's own flexibleVersions overrides the message's (RequestHeader's ClientId
        # keeps its int16 length even in flexible headers).
        compact = _contains(f["flexibleVersions"], version) if "flexibleVersions" in f else flexible
        nested = _compile_struct(f["fields"], version, flexible, f"{where}.{key}") if "fields" in f else None
        present = _contains(f["versions"], version)
        tagged = present and flexible and _contains(f.get("taggedVersions"), version)
        make: Callable[[], Any] | None = None
        default: Any
        is_array = ftype.startswith("[]")
        if is_array:
            # An array's default is empty, or null where the spec says so.
            default = None if f.get("default", _MISSING) is None else ()
            make = None if default is None else list
        elif nested is not None:
            if nullable:
                default = None  # a nullable struct (ConsumerGroupHeartbeatResponse.Assignment) is null by default
            else:
                default = _EMPTY_STRUCT
                make = nested.new_default
        elif ftype in _TYPE_DEFAULTS:
            default = f.get("default", _TYPE_DEFAULTS[ftype])
        else:
            raise ValueError(f"{where}.{key}: unknown type {ftype}")
        template[key] = None if make is not None else default
        if make is not None:
            fresh_all.append((key, make))
            if not present or tagged:  # the default survives decoding
                fresh_read.append((key, make))
        if not present:
            continue
        reader, writer = _field_codec(ftype, nested, compact, nullable)
        if tagged:
            # A tagged field is written only when it differs from its default; comparing the
            # encodings makes "differs" exact for structs given as partial dicts.
            default_bytes: list = []
            writer(default_bytes, default)
            tagged_readers[f["tag"]] = (key, reader)
            tagged_writers.append((f["tag"], key, writer, b"".join(default_bytes)))
            continue
        code = None if is_array else _FIXED_CODES.get(ftype)
        if code is not None:
            fixed_run.append((key, code, default))
            continue
        flush_fixed()
        decode_steps.append(_decode_step(key, reader))
        encode_steps.append(_encode_step(key, writer, default))
    flush_fixed()
    if flexible:
        decode_steps.append(_tagged_decode_step(tagged_readers, where))
        tagged_writers.sort()
        encode_steps.append(_tagged_encode_step(tagged_writers) if tagged_writers else _empty_tags)

    copy_template = template.copy

    def new_default() -> dict:
        d = copy_template()
        for key, make in fresh_all:
            d[key] = make()
        return d

    def read(buf: Buffer, pos: int) -> tuple[dict, int]:
        d = copy_template()
        for key, make in fresh_read:
            d[key] = make()
        for step in decode_steps:
            pos = step(buf, pos, d)
        return d, pos

    def write(out: list, d: dict) -> None:
        for step in encode_steps:
            step(out, d)

    return _Struct(read, write, new_default)


def _nullable_struct(nested: _Struct) -> tuple[Reader, Writer]:
    """Kafka writes a nullable struct as an int8 marker (-1: null, 1: present) then the struct."""

    def read(buf: Buffer, pos: int) -> tuple[dict | None, int]:
        marker, pos = t.read_int8(buf, pos)
        return (None, pos) if marker < 0 else nested.read(buf, pos)

    def write(out: list, d: dict | None) -> None:
        t.write_int8(out, -1 if d is None else 1)
        if d is not None:
            nested.write(out, d)

    return read, write


def _field_codec(ftype: str, nested: _Struct | None, compact: bool, nullable: bool) -> tuple[Reader, Writer]:
    if ftype.startswith("[]"):
        element = ftype[2:]
        if nested is not None:
            return (t.array_reader(nested.read, compact, nullable), t.array_writer(nested.write, compact, nullable))
        code = _FIXED_CODES.get(element)
        if code is not None:
            return t.fixed_array_reader(code, compact, nullable), t.fixed_array_writer(code, compact, nullable)
        read, write = _field_codec(element, None, compact, False)
        return t.array_reader(read, compact, nullable), t.array_writer(write, compact, nullable)
    if nested is not None:
        return _nullable_struct(nested) if nullable else (nested.read, nested.write)
    if ftype == "uuid":
        return t.read_uuid, t.write_uuid
    code = _FIXED_CODES.get(ftype)
    if code is not None:
        st = struct.Struct(">" + code)
        unpack_from, pack, size = st.unpack_from, st.pack, st.size
        return (lambda buf, pos: (unpack_from(buf, pos)[0], pos + size)), (lambda out, v: out.append(pack(v)))
    return _VARIABLE[(ftype, compact, nullable)]


def _fixed_decode_step(run: list[tuple[str, str, Any]]) -> DecodeStep:
    keys = tuple(key for key, _, _ in run)
    st = struct.Struct(">" + "".join(code for _, code, _ in run))
    unpack_from, size = st.unpack_from, st.size

    def step(buf: Buffer, pos: int, d: dict) -> int:
        d.update(zip(keys, unpack_from(buf, pos), strict=True))
        return pos + size

    return step


def _fixed_encode_step(run: list[tuple[str, str, Any]]) -> EncodeStep:
    keyed_defaults = tuple((key, default) for key, _, default in run)
    pack = struct.Struct(">" + "".join(code for _, code, _ in run)).pack

    def step(out: list, d: dict) -> None:
        get = d.get
        out.append(pack(*[get(key, default) for key, default in keyed_defaults]))

    return step


def _decode_step(key: str, read: Reader) -> DecodeStep:
    def step(buf: Buffer, pos: int, d: dict) -> int:
        d[key], pos = read(buf, pos)
        return pos

    return step


def _encode_step(key: str, write: Writer, default: Any) -> EncodeStep:
    def step(out: list, d: dict) -> None:
        write(out, d.get(key, default))

    return step


def _tagged_decode_step(readers: dict[int, tuple[str, Reader]], where: str) -> DecodeStep:
    def step(buf: Buffer, pos: int, d: dict) -> int:
        if buf[pos] == 0:  # nearly always: no tagged fields
            return pos + 1
        fields, pos = t.read_tagged_fields(buf, pos)
        for tag, raw in fields:
            known = readers.get(tag)
            if known is None:
                continue  # a tag from a newer version: skipped, as Kafka does
            key, read = known
            value, end = read(raw, 0)
            if end != len(raw):
                raise ProtocolDecodeError(f"{where}: tagged field {tag} is {len(raw)} bytes, its value {end}")
            d[key] = value
        return pos

    return step


def _tagged_encode_step(writers: list[tuple[int, str, Writer, bytes]]) -> EncodeStep:
    def step(out: list, d: dict) -> None:
        present = []
        for tag, key, write, default_bytes in writers:
            value = d.get(key, _MISSING)
            if value is _MISSING:
                continue
            pieces: list = []
            write(pieces, value)
            raw = b"".join(pieces)
            if raw != default_bytes:
                present.append((tag, raw))
        t.write_tagged_fields(out, present)

    return step


def _empty_tags(out: list, d: dict) -> None:
    out.append(b"\x00")


def _with_fast_path(name: str, version: int, compiled: _Struct) -> _Struct:
    """The hand-written codec of the produce and fetch paths (fast.py, fast_fetch.py) where
    there is one; it hands what it does not take to the compiled one."""
    if name == "ProduceRequest" and version >= 3:
        return _Struct(produce_request_reader(version, compiled.read), compiled.write, compiled.new_default)
    if name == "ProduceResponse":
        return _Struct(compiled.read, produce_response_writer(version, compiled.write), compiled.new_default)
    if name == "FetchRequest" and version >= 12:
        return _Struct(
            fetch_request_reader(version, compiled.read),
            fetch_request_writer(version, compiled.write),
            compiled.new_default,
        )
    if name == "FetchResponse" and version >= 12:
        return _Struct(
            fetch_response_reader(version, compiled.read),
            fetch_response_writer(version, compiled.write),
            compiled.new_default,
        )
    return compiled


class MessageCodec:
    """One message at one version. Get instances from `codec()` (compiled once, cached)."""

    __slots__ = ("_struct", "flexible", "name", "version")

    def __init__(self, name: str, version: int) -> None:
        spec = MESSAGES[name]
        self.name = name
        self.version = version
        self.flexible = _contains(spec["flexibleVersions"], version)
        self._struct = _with_fast_path(name, version, _compile_struct(spec["fields"], version, self.flexible, name))

    def __repr__(self) -> str:
        return f"<MessageCodec {self.name} v{self.version}>"

    def default(self) -> dict:
        """The message with every field at its default."""
        return self._struct.new_default()

    def decode_from(self, data: Buffer, pos: int = 0) -> tuple[dict, int]:
        """Decode at `pos`; return the message and the position after it.

        "records" fields come back as memoryview slices of `data` (no copy): keep `data`
        alive and unchanged while they are in use.
        """
        buf = data if isinstance(data, memoryview) else memoryview(data)
        try:
            return self._struct.read(buf, pos)
        except ProtocolDecodeError as e:
            raise ProtocolDecodeError(f"{self.name} v{self.version}: {e}") from e
        except (IndexError, struct.error, UnicodeDecodeError, ValueError, OverflowError) as e:
            raise ProtocolDecodeError(f"{self.name} v{self.version}: truncated or malformed ({e})") from e

    def decode(self, data: Buffer, pos: int = 0) -> dict:
        """Decode the message at `pos`; bytes after it are ignored (as Kafka does)."""
        return self.decode_from(data, pos)[0]

    def encode_into(self, out: list, body: Mapping[str, Any]) -> None:
        """Append the encoding to `out` as pieces: bytes-like objects, and any RecordsRef
        given as a "records" value, left as is for the caller to send from its file."""
        try:
            self._struct.write(out, body)
        except (struct.error, TypeError, AttributeError, ValueError, OverflowError) as e:
            raise ProtocolEncodeError(f"{self.name} v{self.version}: cannot encode ({e})") from e

    def encode(self, body: Mapping[str, Any]) -> bytes:
        out: list = []
        self.encode_into(out, body)
        try:
            return b"".join(out)
        except TypeError:
            raise ProtocolEncodeError(f"{self.name}: a records value is not in memory; use encode_into") from None


@functools.cache
def codec(name: str, version: int) -> MessageCodec:
    """The codec of a message (e.g. "FetchResponse") at a version it defines."""
    spec = MESSAGES.get(name)
    if spec is None:
        raise KeyError(f"no message {name!r}")
    if not _contains(spec["validVersions"], version):
        raise UnsupportedVersionError(
            f"{name} has no version {version} (valid: {spec['validVersions']})", spec.get("apiKey", -1), version
        )
    return MessageCodec(name, version)


def _api_codec(api_key: int, version: int, suffix: str) -> MessageCodec:
    try:
        name = api_name(api_key)
    except KeyError:
        raise UnsupportedVersionError(f"unknown API key {api_key}", api_key, version) from None
    return codec(name + suffix, version)


# Cached by (key, version) as well as by name: looked up for every request and response.
# Only valid pairs are cached (a lookup that raises is not), so the caches stay small.
@functools.cache
def request_codec(api_key: int, version: int) -> MessageCodec:
    return _api_codec(api_key, version, "Request")


@functools.cache
def response_codec(api_key: int, version: int) -> MessageCodec:
    return _api_codec(api_key, version, "Response")


def decode(name: str, version: int, data: Buffer) -> dict:
    return codec(name, version).decode(data)


def encode(name: str, version: int, body: Mapping[str, Any]) -> bytes:
    return codec(name, version).encode(body)
