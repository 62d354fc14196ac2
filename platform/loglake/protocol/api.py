"""API keys, the versions the specs define, and Kafka's header-version rules."""

from __future__ import annotations

import enum
import functools

from loglake.protocol.messages import MESSAGES, ApiKey

__all__ = [
    "SPEC_VERSIONS",
    "ApiKey",
    "IsolationLevel",
    "VersionRange",
    "api_name",
    "is_flexible",
    "parse_versions",
    "request_header_version",
    "response_header_version",
]


class IsolationLevel(enum.IntEnum):
    """The `isolation_level` of Fetch (v4+) and ListOffsets (v2+)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


# Kafka's "N+" has no upper bound; versions are int16 on the wire.
MAX_VERSION = 0x7FFF

VersionRange = tuple[int, int]


def parse_versions(spec: str | None) -> VersionRange | None:
    """Kafka's version-range strings: "3+", "0-7", "5", or "none" (None: no version)."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


_NAMES = {spec["apiKey"]: name.removesuffix("Request") for name, spec in MESSAGES.items() if spec["type"] == "request"}


def _request_spec(api_key: int) -> dict:
    return MESSAGES[f"{_NAMES[api_key]}Request"]


def _valid_versions(api_key: int) -> VersionRange:
    valid = parse_versions(_request_spec(api_key)["validVersions"])
    assert valid is not None, api_key
    return valid


# validVersions of each API (requests and responses always share them).
SPEC_VERSIONS: dict[ApiKey, VersionRange] = {ApiKey(key): _valid_versions(key) for key in sorted(_NAMES)}
# Flexibility is open-ended ("12+"), so a version newer than the spec still gets the right
# header layout: a client probing with a too-new ApiVersions can still be answered.
_FLEXIBLE: dict[int, VersionRange | None] = {
    key: parse_versions(_request_spec(key)["flexibleVersions"]) for key in _NAMES
}


def api_name(api_key: int) -> str:
    """Kafka's message name without Request/Response, e.g. "ApiVersions"; KeyError if unknown."""
    return _NAMES[api_key]


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this version uses compact types and tagged fields (unknown keys: no)."""
    flexible = _FLEXIBLE.get(api_key)
    return flexible is not None and flexible[0] <= api_version <= flexible[1]


# Asked for every request and response; bounded, as a client may send any key and version.
@functools.lru_cache(maxsize=4096)
def request_header_version(api_key: int, api_version: int) -> int:
    if is_flexible(api_key, api_version):
        return 2
    # Header v0 (no client id) survives only in ControlledShutdown v0.
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 1


@functools.lru_cache(maxsize=4096)
def response_header_version(api_key: int, api_version: int) -> int:
    # ApiVersions responses keep header v0 at every version: a client that does not yet know
    # the broker's versions must be able to read the header (KIP-511).
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0
