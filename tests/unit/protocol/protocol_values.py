"""Message bodies for tests, built from the generated specs: representative values and
hypothesis strategies, plus a comparison that tolerates the codec's added defaults."""

from __future__ import annotations

import functools
import uuid
from typing import Any

from hypothesis import strategies as st

from loglake.protocol.api import parse_versions
from loglake.protocol.messages import MESSAGES

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
TYPE_DEFAULTS: dict[str, Any] = {
    "bool": False,
    "float64": 0.0,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": uuid.UUID(int=0),
    **{k: 0 for k in INT_RANGES},
}


def contains(spec: str | None, version: int) -> bool:
    r = parse_versions(spec)
    return r is not None and r[0] <= version <= r[1]


def versions(name: str) -> range:
    lo, hi = parse_versions(MESSAGES[name]["validVersions"])  # type: ignore[misc]
    return range(lo, hi + 1)


def all_pairs() -> list[tuple[str, int]]:
    return [(name, v) for name in MESSAGES for v in versions(name)]


def is_flexible(name: str, version: int) -> bool:
    return contains(MESSAGES[name]["flexibleVersions"], version)


def _tagged(f: dict, version: int, flexible: bool) -> bool:
    return flexible and contains(f.get("taggedVersions"), version)


def _default(f: dict, version: int, flexible: bool) -> Any:
    """The field's default restricted to in-version fields (what a test body would hold)."""
    if f["type"].startswith("[]"):
        return None if "default" in f and f["default"] is None else []
    if "fields" in f:
        return {g["name"]: _default(g, version, flexible) for g in f["fields"] if contains(g["versions"], version)}
    return f.get("default", TYPE_DEFAULTS[f["type"]])


# --- representative values ---------------------------------------------------------------------


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return self.n


def _scalar(ftype: str, default: Any, n: int) -> Any:
    if ftype in INT_RANGES:
        value = {
            "int8": 7 + n % 50,
            "int16": 300 + n,
            "uint16": 40000 + n,
            "int32": 70000 + n,
            "uint32": 3_000_000_000 + n,
            "int64": (1 << 40) + n,
        }[ftype]
        return value if value != default else value + 1
    if ftype == "bool":
        return not default
    if ftype == "float64":
        return 1.5 + n
    if ftype == "string":
        return f"s{n}-é"
    if ftype == "bytes":
        return bytes([n % 256]) * 3
    if ftype == "records":
        return b"RECORDS" + bytes([n % 256])
    if ftype == "uuid":
        return uuid.UUID(int=(n << 64) | n)
    raise AssertionError(ftype)


def representative(
    fields: tuple[dict, ...], version: int, flexible: bool, nulls: bool, counter: _Counter | None = None
) -> dict:
    """Every in-version field set to a non-default value (nulls=False), or with nullable
    fields null, arrays empty and tagged fields left out (nulls=True)."""
    counter = counter or _Counter()
    body: dict[str, Any] = {}
    for f in fields:
        if not contains(f["versions"], version):
            continue
        if nulls and _tagged(f, version, flexible):
            continue
        nullable = contains(f.get("nullableVersions"), version)
        ftype = f["type"]
        if nulls and nullable:
            body[f["name"]] = None
        elif ftype.startswith("[]"):
            if nulls:
                body[f["name"]] = []
            elif "fields" in f:
                body[f["name"]] = [representative(f["fields"], version, flexible, nulls, counter) for _ in range(2)]
            else:
                body[f["name"]] = [_scalar(ftype[2:], TYPE_DEFAULTS[ftype[2:]], counter.next()) for _ in range(2)]
        elif "fields" in f:
            body[f["name"]] = representative(f["fields"], version, flexible, nulls, counter)
        else:
            body[f["name"]] = _scalar(ftype, f.get("default", TYPE_DEFAULTS[ftype]), counter.next())
    return body


def representative_bodies(name: str, version: int) -> list[dict]:
    spec = MESSAGES[name]
    flexible = is_flexible(name, version)
    bodies = [representative(spec["fields"], version, flexible, nulls) for nulls in (False, True)]
    if name == "ApiVersionsResponse":
        for b in bodies:  # a non-zero error makes clients read the body as v0 (KIP-511)
            b["error_code"] = 0
    return bodies


# --- hypothesis ----------------------------------------------------------------------------------


def _scalar_strategy(ftype: str) -> st.SearchStrategy:
    if ftype in INT_RANGES:
        return st.integers(*INT_RANGES[ftype])
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": st.text(max_size=12),
        "bytes": st.binary(max_size=12),
        "records": st.binary(max_size=40),
        "uuid": st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1)),
    }[ftype]


def body_strategy(fields: tuple[dict, ...], version: int, flexible: bool) -> st.SearchStrategy[dict]:
    required: dict[str, st.SearchStrategy] = {}
    optional: dict[str, st.SearchStrategy] = {}
    for f in fields:
        if not contains(f["versions"], version):
            continue
        ftype = f["type"]
        if ftype.startswith("[]"):
            element = body_strategy(f["fields"], version, flexible) if "fields" in f else _scalar_strategy(ftype[2:])
            s = st.lists(element, max_size=3)
        elif "fields" in f:
            s = body_strategy(f["fields"], version, flexible)
        else:
            s = _scalar_strategy(ftype)
        if contains(f.get("nullableVersions"), version):
            s = st.none() | s
        if _tagged(f, version, flexible):
            # Left out, or different from the default: a tagged field equal to its default is
            # not sent, and kafka-python's idea of some defaults differs (None for structs).
            default = _default(f, version, flexible)
            optional[f["name"]] = s.filter(lambda v, d=default: v != d)
        else:
            required[f["name"]] = s
    return st.fixed_dictionaries(required, optional=optional)


@functools.cache
def _version_strategy(name: str, version: int) -> st.SearchStrategy[tuple[int, dict]]:
    spec = MESSAGES[name]
    return st.tuples(st.just(version), body_strategy(spec["fields"], version, is_flexible(name, version)))


def message_strategy(name: str) -> st.SearchStrategy[tuple[int, dict]]:
    return st.sampled_from(versions(name)).flatmap(lambda v: _version_strategy(name, v))


# --- comparison ------------------------------------------------------------------------------------


def assert_holds(actual: Any, expected: Any, path: str = "") -> None:
    """`actual` holds everything in `expected` (it may have more keys: defaults)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {actual!r} is not a struct"
        for key, value in expected.items():
            assert key in actual, f"{path}.{key} missing"
            assert_holds(actual[key], value, f"{path}.{key}")
    elif isinstance(expected, list):
        assert actual is not None and len(actual) == len(expected), f"{path}: {actual!r} != {expected!r}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_holds(a, e, f"{path}[{i}]")
    elif isinstance(expected, (bytes, bytearray, memoryview)):
        assert actual is not None and bytes(actual) == bytes(expected), f"{path}: {actual!r} != {expected!r}"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
