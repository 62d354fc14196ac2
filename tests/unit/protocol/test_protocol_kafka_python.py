"""Cross-checks against kafka-python's independent implementation (its JSON-schema classes).

For every (message, version) both libraries define: the same body encodes to the same
bytes (whole frames, headers included), our bytes decode with kafka-python to the body,
and kafka-python's bytes decode with ours to the body.
"""

from __future__ import annotations

import importlib
import pkgutil
import uuid
from typing import Any

import kafka.protocol
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_data import ApiData
from kafka.protocol.api_message import ApiMessage
from protocol_values import all_pairs, assert_holds, message_strategy, representative_bodies

from loglake.protocol import codec, decode_request, decode_response, encode_request, encode_response
from loglake.protocol.api import parse_versions
from loglake.protocol.messages import MESSAGES


def _kafka_python_classes() -> dict[str, type]:
    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" not in info.name and "generate_stubs" not in info.name:
            importlib.import_module(info.name)
    found: dict[str, type] = {}
    todo: list[type] = [ApiMessage, ApiData]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if getattr(sub, "_class_version", None) is None and getattr(sub, "_json", None):
                found[sub.__name__] = sub
    return found


KP = _kafka_python_classes()


def _kp_supports(name: str, version: int) -> bool:
    cls = KP.get(name)
    if cls is None:
        return False
    lo, hi = parse_versions(cls.json["validVersions"])  # type: ignore[misc]
    return lo <= version <= hi


PAIRS = [(name, v) for name, v in all_pairs() if _kp_supports(name, v)]


def test_the_cross_check_covers_the_broker_apis() -> None:
    covered = {name for name, _ in PAIRS}
    for api in (
        "ApiVersions",
        "Metadata",
        "Produce",
        "Fetch",
        "ListOffsets",
        "CreateTopics",
        "DeleteTopics",
        "CreatePartitions",
        "DescribeConfigs",
        "AlterConfigs",
        "FindCoordinator",
        "JoinGroup",
        "SyncGroup",
        "Heartbeat",
        "LeaveGroup",
        "OffsetCommit",
        "OffsetFetch",
        "ListGroups",
        "DescribeGroups",
        "DeleteGroups",
        "InitProducerId",
        "DeleteRecords",
        "OffsetForLeaderEpoch",
    ):
        assert {api + "Request", api + "Response"} <= covered, api
    for flexible in [
        ("ApiVersionsRequest", 3),
        ("MetadataResponse", 12),
        ("CreateTopicsRequest", 5),
        ("FetchResponse", 16),
        ("ProduceRequest", 9),
    ]:
        assert flexible in PAIRS
    assert len(PAIRS) > 400


# kafka-python patches the int32 authorized-operations fields into a set of bit numbers
# named "authorized_operations" (json_patch in its Metadata, DescribeCluster, DescribeGroups).
BITFIELD = "authorized_operations"


def _kp_key(struct_field: Any, key: str) -> str:
    return BITFIELD if key not in struct_field.fields and key.endswith(BITFIELD) else key


def _to_bits(value: int) -> set[int] | None:
    return None if value == -(1 << 31) else {b for b in range(32) if (value & 0xFFFFFFFF) >> b & 1}


def _from_bits(bits: set[int] | None) -> int:
    n = sum(1 << b for b in (bits if bits is not None else {31}))
    return n - (1 << 32) if n >= 1 << 31 else n


def _from_kp(kp: Any, body: Any) -> Any:
    """kafka-python's to_dict() in our terms (the keys of `body`), for comparison."""
    if isinstance(body, dict):
        out = {}
        for key, value in body.items():
            if key.endswith(BITFIELD) and type(value) is int:
                out[key] = _from_bits(kp[key if key in kp else BITFIELD])
            else:
                out[key] = _from_kp(kp[key], value)
        return out
    if isinstance(body, uuid.UUID) and kp is None:
        return uuid.UUID(int=0)  # kafka-python reads the zero uuid as None
    if isinstance(body, list) and kp is not None:
        return [_from_kp(k, b) for k, b in zip(kp, body)] + kp[len(body) :]
    return kp


def _to_kp(struct_field: Any, make: Any, body: dict) -> Any:
    kwargs = {}
    for key, value in body.items():
        key = _kp_key(struct_field, key)
        field = struct_field.fields[key]
        if field.type_str == "bitfield":
            value = _to_bits(value)
        elif field.is_struct():
            value = _to_kp(field, field.data_class, value)
        elif field.is_struct_array() and value is not None:
            value = [_to_kp(field.array_of, field.data_class, item) for item in value]
        kwargs[key] = value
    return make(**kwargs)


def kp_message(name: str, version: int, body: dict) -> Any:
    cls = KP[name]
    return _to_kp(cls._struct, lambda **kw: cls(version=version, **kw), body)


def _api_key(name: str) -> int:
    return MESSAGES[name]["apiKey"]


def check_pair(name: str, version: int, body: dict) -> None:
    ours = codec(name, version)
    kp = kp_message(name, version, body)
    kind = MESSAGES[name]["type"]
    if kind == "data":
        kp_bytes = kp.encode(version=version, header=False)
        assert ours.encode(body) == kp_bytes
        assert_holds(ours.decode(kp_bytes), body, "ours<-kp")
        theirs = KP[name].decode(kp_bytes, version=version, header=False).to_dict(json=False)
        assert_holds(_from_kp(theirs, body), body, "kp<-ours")
        return
    kp.with_header(correlation_id=42, client_id="client-é")
    kp_frame = kp.encode(header=True, framed=True)
    if kind == "request":
        frame = encode_request(_api_key(name), version, 42, "client-é", body)
        assert frame == kp_frame
        header, decoded = decode_request(kp_frame[4:])
        assert (header.request_api_key, header.request_api_version, header.correlation_id) == (
            _api_key(name),
            version,
            42,
        )
        assert header.client_id == "client-é"
    else:
        chunks = encode_response(_api_key(name), version, 42, body)
        assert len(chunks) == 1
        frame = chunks[0]  # type: ignore[assignment]
        assert frame == kp_frame
        correlation_id, decoded = decode_response(_api_key(name), version, kp_frame[4:])
        assert correlation_id == 42
    assert_holds(decoded, body, "ours<-kp")
    theirs = KP[name].decode(frame, version=version, header=True, framed=True)
    assert theirs.header.correlation_id == 42
    assert_holds(_from_kp(theirs.to_dict(json=False), body), body, "kp<-ours")


@pytest.mark.parametrize("name,version", PAIRS, ids=[f"{n}-v{v}" for n, v in PAIRS])
def test_same_bytes_as_kafka_python(name: str, version: int) -> None:
    for body in representative_bodies(name, version):
        check_pair(name, version, body)


FUZZED = [
    "ApiVersionsResponse",
    "MetadataRequest",
    "MetadataResponse",
    "ProduceRequest",
    "FetchRequest",
    "FetchResponse",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "JoinGroupRequest",
    "OffsetCommitRequest",
    "OffsetFetchResponse",
    "DescribeConfigsResponse",
    "ListOffsetsResponse",
]


@pytest.mark.parametrize("name", FUZZED)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_bytes_as_kafka_python_property(name: str, data: st.DataObject) -> None:
    version, body = data.draw(message_strategy(name).filter(lambda vb: _kp_supports(name, vb[0])))
    if name == "ApiVersionsResponse":
        body["error_code"] = 0  # kafka-python reads an error reply as v0 (KIP-511)
    check_pair(name, version, body)
