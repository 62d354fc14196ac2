"""A request's error response in its API's own shape (Kafka's `AbstractRequest.getErrorResponse`).

When a handler fails, Kafka answers the request with the error instead of dropping the
connection: the response carries the code at the top level where the schema has one, and
for every topic, partition, group or resource the request named, where the schema lists
them. Kafka writes this by hand for each request type; here it is read off the JSON specs
the codec is generated from, so every API the broker serves has one.

A response array mirrors the request array that names the same things:

1. the one with its name (Metadata `topics` -> `topics`, DescribeGroups `groups` -> `groups`);
2. else one whose entries share a key field with it (Produce `topic_data[name]` ->
   `responses[name]`, DescribeConfigs `resources[resource_name]` -> `results[resource_name]`),
   or, for a request array of plain values, whose entries have a key of that type
   (DeleteGroups `groups_names` -> `results[group_id]`, WriteTxnMarkers `partition_indexes`
   -> `partitions[partition_index]`);
3. else, when the response has no top-level error code (so the error must go in an entry),
   the one request array left to the one response array left (CreateAcls `creations` ->
   `results`, DeleteAcls `filters` -> `filter_results`).

At the top level only response arrays whose entries carry an error code are filled; the
others (Metadata's `brokers`, JoinGroup's `members`) stay empty. In an entry, the key fields
that say what it is about (topic, partition, group, resource, ...) are copied from the
request's entry, under Kafka's few synonyms (`partition`/`index`/`partition_index`,
`name`/`topic`), and so are same-named arrays of keys only (AlterClientQuotas `entity`);
every other field keeps its default (-1 offsets, epochs and ids, empty lists).

Old request versions never get error codes they predate: `ERROR_DOWNGRADES` is Kafka's
table of the codes it answers to older versions of an API in place of newer ones (KIP-588's
PRODUCER_FENCED as INVALID_PRODUCER_EPOCH below InitProducerId v4, ...), and
`downgrade_errors` applies it to every response the router encodes, a handler's or one
built here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.protocol.api import api_name, parse_versions
from loglake.protocol.messages import MESSAGES

Body = dict[str, Any]
Field = Mapping[str, Any]


@dataclass(frozen=True)
class ErrorDowngrade:
    """Requests of `api_key` below version `since` get `older` where the broker's answer is `newer`."""

    api_key: ApiKey
    since: int
    newer: ErrorCode
    older: ErrorCode


# No version of the API carries the code: its requests always get the older one.
NEVER = 1 << 15

_E = ErrorCode
# Kafka 3.9's mappings (the release whose versions the broker serves), where Kafka makes them.
ERROR_DOWNGRADES = (
    # KIP-588: KafkaApis.handleInitProducerIdRequest, handleAddPartitionsToTxnRequest,
    # handleAddOffsetsToTxnRequest and handleEndTxnRequest ("older clients could not understand").
    ErrorDowngrade(ApiKey.INIT_PRODUCER_ID, 4, _E.PRODUCER_FENCED, _E.INVALID_PRODUCER_EPOCH),
    ErrorDowngrade(ApiKey.ADD_PARTITIONS_TO_TXN, 2, _E.PRODUCER_FENCED, _E.INVALID_PRODUCER_EPOCH),
    ErrorDowngrade(ApiKey.ADD_OFFSETS_TO_TXN, 2, _E.PRODUCER_FENCED, _E.INVALID_PRODUCER_EPOCH),
    ErrorDowngrade(ApiKey.END_TXN, 2, _E.PRODUCER_FENCED, _E.INVALID_PRODUCER_EPOCH),
    # KIP-890: TRANSACTION_ABORTABLE from AddPartitionsToTxn v5 and TxnOffsetCommit v4 on
    # (AddPartitionsToTxnManager answers INVALID_TXN_STATE to the older ones).
    ErrorDowngrade(ApiKey.ADD_PARTITIONS_TO_TXN, 5, _E.TRANSACTION_ABORTABLE, _E.INVALID_TXN_STATE),
    ErrorDowngrade(ApiKey.TXN_OFFSET_COMMIT, 4, _E.TRANSACTION_ABORTABLE, _E.INVALID_TXN_STATE),
    # TxnOffsetCommit's transaction check answers a fenced producer INVALID_PRODUCER_EPOCH at
    # every version (AddPartitionsToTxnManager), and a consumer-protocol member's stale epoch is
    # ILLEGAL_GENERATION (OffsetMetadataManager.validateTransactionalOffsetCommit).
    ErrorDowngrade(ApiKey.TXN_OFFSET_COMMIT, NEVER, _E.PRODUCER_FENCED, _E.INVALID_PRODUCER_EPOCH),
    ErrorDowngrade(ApiKey.TXN_OFFSET_COMMIT, NEVER, _E.STALE_MEMBER_EPOCH, _E.ILLEGAL_GENERATION),
    # KAFKA-7296: producers of 0.11 to 2.0 (TxnOffsetCommit v0-1) crash on a loading coordinator.
    ErrorDowngrade(ApiKey.TXN_OFFSET_COMMIT, 2, _E.COORDINATOR_LOAD_IN_PROGRESS, _E.COORDINATOR_NOT_AVAILABLE),
    # Fetch v5 and older: maybeDownConvertStorageError, so the consumer refreshes its metadata.
    ErrorDowngrade(ApiKey.FETCH, 6, _E.KAFKA_STORAGE_ERROR, _E.NOT_LEADER_OR_FOLLOWER),
    # delete.topic.enable=false: handleDeleteTopicsRequest.
    ErrorDowngrade(ApiKey.DELETE_TOPICS, 3, _E.TOPIC_DELETION_DISABLED, _E.INVALID_REQUEST),
)

_DOWNGRADES: dict[int, list[ErrorDowngrade]] = defaultdict(list)
for _row in ERROR_DOWNGRADES:
    _DOWNGRADES[_row.api_key].append(_row)
# The first version of each API that needs no downgrade.
_UNTOUCHED_FROM = {key: max(row.since for row in rows) for key, rows in _DOWNGRADES.items()}


@cache
def downgrades(api_key: int, version: int) -> dict[int, ErrorCode]:
    """Newer code -> the code requests of `api_key` at `version` get instead."""
    return {row.newer: row.older for row in _DOWNGRADES.get(api_key, ()) if version < row.since}


def downgrade_errors(api_key: int, version: int, response: Mapping[str, Any]) -> Mapping[str, Any]:
    """`response` with every error code (top-level and in entries) that `version` predates
    replaced by its older code. Not changed in place: a copy of what it changes, the same
    object when nothing changes (the usual case costs a dict lookup)."""
    if version >= _UNTOUCHED_FROM.get(api_key, 0):
        return response
    mapping = downgrades(api_key, version)
    return _downgraded(response, mapping) if mapping else response


def _downgraded(value: Any, mapping: Mapping[int, ErrorCode]) -> Any:
    if isinstance(value, Mapping):
        changed: dict[str, Any] | None = None
        for key, item in value.items():
            if isinstance(item, int) and key.endswith("error_code"):
                new = mapping.get(item, item)
            elif isinstance(item, (Mapping, list)):
                new = _downgraded(item, mapping)
            else:
                continue
            if new is not item:
                changed = dict(value) if changed is None else changed
                changed[key] = new
        return value if changed is None else changed
    if isinstance(value, list):
        items = [_downgraded(item, mapping) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


# The fields that say what an entry is about.
_KEYS = frozenset(
    {
        "name",
        "topic",
        "topic_name",
        "topic_id",
        "partition_index",
        "partition",
        "index",
        "partition_id",
        "group_id",
        "member_id",
        "group_instance_id",
        "transactional_id",
        "producer_id",
        "key",
        "user",
        "resource_type",
        "resource_name",
        "entity_type",
        "entity_name",
    }
)
# Response key field -> the request fields that hold the same value under another name.
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "partition_index": ("partition", "index", "partition_id"),
    "partition": ("partition_index", "index"),
    "index": ("partition_index", "partition"),
    "partition_id": ("partition_index", "partition"),
    "name": ("topic", "topic_name", "user"),
    "topic": ("name", "topic_name"),
    "topic_name": ("name", "topic"),
    "user": ("name",),
}


def error_response(api_key: int, version: int, request: Body, error: ErrorCode, message: str | None) -> Body:
    """The response of `api_key` at `version` that answers `request` with `error` everywhere
    the schema has room for an error code; `message` goes in the top-level error message."""
    name = api_name(api_key)
    request_fields = _present(MESSAGES[name + "Request"]["fields"], version)
    response_fields = _present(MESSAGES[name + "Response"]["fields"], version)
    body = _mirror(request_fields, request, response_fields, error, version, entry=False)
    for field in response_fields:
        if field["name"] == "error_message" and field["type"] == "string":
            body["error_message"] = message
    return body


def _present(fields: tuple[Field, ...], version: int) -> list[Field]:
    present = []
    for field in fields:
        versions = parse_versions(field["versions"])
        if versions is not None and versions[0] <= version <= versions[1]:
            present.append(field)
    return present


def _is_error_code(field: Field) -> bool:
    # Tagged error codes are details (CreateTopics' topic_config_error_code), not the entry's.
    return field["type"] == "int16" and field["name"].endswith("error_code") and "taggedVersions" not in field


def _is_struct_array(field: Field) -> bool:
    return field["type"].startswith("[]") and "fields" in field


def _is_array(field: Field) -> bool:
    return field["type"].startswith("[]")


def _carries_errors(field: Field, version: int) -> bool:
    """Whether a response array's entries hold an error code (directly or in a nested array)."""
    for sub in _present(field["fields"], version):
        if _is_error_code(sub) or (_is_struct_array(sub) and _carries_errors(sub, version)):
            return True
    return False


def _all_keys(field: Field, version: int) -> bool:
    """Whether a struct array's entries are keys only (AlterClientQuotas' `entity`)."""
    return all(f["name"] in _KEYS for f in _present(field["fields"], version))


def _scalars(fields: list[Field]) -> Iterator[Field]:
    return (f for f in fields if not _is_array(f) and "fields" not in f)


def _shares_key(request_array: Field, response_array: Field, version: int) -> bool:
    response_entry = _present(response_array["fields"], version)
    if "fields" not in request_array:
        # Plain values (a topic name, a partition index): the entry needs a key of that type.
        return _value_key(request_array, response_entry) is not None
    request_names = {f["name"] for f in _scalars(_present(request_array["fields"], version))}
    for field in _scalars(response_entry):
        if field["name"] not in _KEYS:
            continue
        if field["name"] in request_names or request_names & set(_SYNONYMS.get(field["name"], ())):
            return True
    return False


def _value_key(request_array: Field, response_entry: list[Field]) -> str | None:
    """The response entry's field that a plain request value fills: the first key field of
    the value's type."""
    value_type = request_array["type"][2:]
    for field in _scalars(response_entry):
        if field["type"] == value_type and field["name"] in _KEYS:
            return str(field["name"])
    return None


def _pairs(
    request_fields: list[Field], request: Body, response_fields: list[Field], version: int, entry: bool
) -> dict[str, Field]:
    """Response array name -> the request array it mirrors."""
    requested = [f for f in request_fields if _is_array(f) and request.get(f["name"])]
    requested_names = {f["name"] for f in requested}
    targets = [
        f
        for f in response_fields
        if _is_struct_array(f)
        and (_carries_errors(f, version) or (entry and _all_keys(f, version) and f["name"] in requested_names))
    ]
    pairs: dict[str, Field] = {}
    for rule in ("name", "key"):
        for target in targets:
            if target["name"] in pairs:
                continue
            for source in requested:
                if source in pairs.values():
                    continue
                if target["name"] == source["name"] if rule == "name" else _shares_key(source, target, version):
                    pairs[target["name"]] = source
                    break
    left_targets = [t for t in targets if t["name"] not in pairs]
    left_sources = [s for s in requested if s not in pairs.values()]
    top_level_code = any(_is_error_code(f) for f in response_fields)
    if not top_level_code and len(left_targets) == 1 and len(left_sources) == 1:
        pairs[left_targets[0]["name"]] = left_sources[0]
    return pairs


def _mirror(
    request_fields: list[Field],
    request: Body,
    response_fields: list[Field],
    error: ErrorCode,
    version: int,
    entry: bool = True,
) -> Body:
    out: Body = {}
    request_types = {f["name"]: f["type"] for f in request_fields}
    pairs = _pairs(request_fields, request, response_fields, version, entry)
    for field in response_fields:
        name = field["name"]
        if _is_error_code(field):
            out[name] = int(error)
        elif name in pairs:
            source = pairs[name]
            entry_fields = _present(field["fields"], version)
            if "fields" in source:
                source_fields = _present(source["fields"], version)
                out[name] = [
                    _mirror(source_fields, item, entry_fields, error, version) for item in request[source["name"]]
                ]
            else:
                key = _value_key(source, entry_fields)
                out[name] = [
                    _mirror([], {}, entry_fields, error, version) | ({key: value} if key else {})
                    for value in request[source["name"]]
                ]
        elif entry and name in _KEYS and not _is_array(field) and "fields" not in field:
            for candidate in (name, *_SYNONYMS.get(name, ())):
                if candidate in request and request_types.get(candidate) == field["type"]:
                    out[name] = request[candidate]
                    break
    return out
