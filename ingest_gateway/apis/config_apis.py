"""The config APIs of the Kafka protocol: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

Topic configs are the topic's overrides in the metadata store (changed through the
controller, which sends the new config to the replicas); broker configs are the dynamic
layers of `loglake.broker_configs` (any broker writes them to the store, as a Kafka broker
in ZooKeeper mode does, and every broker applies them through its watch). Errors are
Kafka's: INVALID_CONFIG for a bad topic config, INVALID_REQUEST for a broker config that
cannot change at run time or a malformed request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, TypeVar

from loglake.broker_configs import (
    BROKER_CONFIG_KEYS,
    DYNAMIC_CONFIGS,
    DynamicBrokerConfig,
    Synonym,
    broker_synonyms,
    sensitive_broker_config,
)
from loglake.config import LogConfig, topic_property, validate_topic_name
from loglake.config_defs import ConfigKey, ConfigSource, ConfigType, split_list, to_config_string
from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey
from loglake.protocol.bodies import (
    AlterConfigsRequest,
    AlterConfigsRequestAlterConfigsResource,
    AlterConfigsResponse,
    AlterConfigsResponseAlterConfigsResourceResponse,
    DescribeConfigsRequest,
    DescribeConfigsRequestDescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResponseDescribeConfigsResourceResult,
    DescribeConfigsResponseDescribeConfigsResult,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
)
from loglake.security.acls import CLUSTER_NAME, AclOperation, ResourceType

from ingest_gateway.apis.authorization import AUTHORIZATION_ERRORS

if TYPE_CHECKING:
    from loglake.config import BrokerConfig

    from ingest_gateway.apis.authorization import RequestAuthorization
    from ingest_gateway.metadata.admin_manager import AdminManager
    from ingest_gateway.metadata.dynamic_config import DynamicConfigManager
    from ingest_gateway.metadata.metadata_cache import MetadataCache

# The resource of either AlterConfigs form: _alter checks and applies both alike.
_Resource = TypeVar(
    "_Resource", AlterConfigsRequestAlterConfigsResource, IncrementalAlterConfigsRequestAlterConfigsResource
)
from ingest_gateway.apis.request_router import handles
from ingest_gateway.network.request_context import RequestContext

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
# Config resource types -> the ACL resource their configs are authorized on.
_CONFIG_RESOURCE_ACLS = {
    RESOURCE_TOPIC: ResourceType.TOPIC,
    RESOURCE_BROKER: ResourceType.CLUSTER,
    8: ResourceType.CLUSTER,  # BROKER_LOGGER
    16: ResourceType.CLUSTER,  # CLIENT_METRICS
    32: ResourceType.GROUP,  # GROUP
}


class AlterOp(IntEnum):
    """IncrementalAlterConfigs operations (KIP-339)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass
class ConfigEntry:
    """One config as DescribeConfigs (and CreateTopics) describe it."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: ConfigType
    doc: str | None
    synonyms: list[Synonym] = field(default_factory=list)


def _from_own_name(name: str, synonyms: list[Synonym]) -> list[Synonym]:
    """Kafka drops the synonyms that precede a config's own name (listener overrides and the
    like); so a topic config whose broker value comes from log.retention.hours alone counts
    as a default, as in Kafka."""
    while synonyms and synonyms[0].name != name:
        synonyms = synonyms[1:]
    return synonyms


def _broker_entry(name: str, value: str | None, synonyms: list[Synonym], key: ConfigKey | None) -> ConfigEntry:
    synonyms = _from_own_name(name, synonyms)
    sensitive = sensitive_broker_config(name)
    if sensitive:
        value, synonyms = None, [Synonym(s.name, None, s.source) for s in synonyms]
    return ConfigEntry(
        name=name,
        value=value,
        source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
        read_only=name not in DYNAMIC_CONFIGS,
        sensitive=sensitive,
        type=key.type if key is not None else ConfigType.UNKNOWN,
        doc=key.doc if key is not None else None,
        synonyms=synonyms,
    )


def describe_topic_configs(overrides: dict[str, str], dynamic: DynamicBrokerConfig) -> list[ConfigEntry]:
    """Every topic config with its effective value, source and synonyms (topic override,
    dynamic broker, dynamic default, static broker, default: Kafka's order)."""
    effective = LogConfig.from_properties(overrides, dynamic.log_defaults()).to_properties()
    entries = []
    for name, value in effective.items():
        prop = topic_property(name)
        assert prop is not None
        synonyms = []
        if prop.broker_name is not None:
            synonyms = _from_own_name(prop.broker_name, dynamic.synonyms(broker_synonyms(prop.broker_name)))
        if name in overrides:
            synonyms = [Synonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG), *synonyms]
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=False,
                sensitive=False,
                type=prop.key.type,
                doc=prop.key.doc,
                synonyms=synonyms,
            )
        )
    return entries


def describe_broker_configs(dynamic: DynamicBrokerConfig, per_broker: bool) -> list[ConfigEntry]:
    """A broker resource: every config of this broker (per_broker), or the cluster-wide
    dynamic defaults alone (the "" resource), as Kafka answers them."""
    if per_broker:
        effective = dynamic.effective()
        values = {name: to_config_string(key.default) for name, key in BROKER_CONFIG_KEYS.items()} | effective
    else:
        values = dict(dynamic.cluster_default)
    entries = []
    for name in sorted(values):
        synonyms = dynamic.synonyms(broker_synonyms(name))
        if not per_broker:
            synonyms = [s for s in synonyms if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        entries.append(_broker_entry(name, values[name], synonyms, BROKER_CONFIG_KEYS.get(name)))
    return entries


def _config_key(resource_type: int, name: str) -> ConfigKey | None:
    if resource_type == RESOURCE_TOPIC:
        prop = topic_property(name)
        return prop.key if prop is not None else None
    return BROKER_CONFIG_KEYS.get(name)


def apply_incremental(
    current: dict[str, str],
    ops: list[IncrementalAlterConfigsRequestAlterableConfig],
    key_of: Callable[[str], ConfigKey | None],
) -> dict[str, str]:
    """The config document after KIP-339 operations (Kafka's prepareIncrementalConfigs)."""
    out = dict(current)
    for op in ops:
        name, value = op["name"], op["value"]
        kind = op["config_operation"]
        if kind == AlterOp.DELETE:
            out.pop(name, None)
            continue
        if kind not in (AlterOp.SET, AlterOp.APPEND, AlterOp.SUBTRACT):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {kind}")
        if value is None:  # only a DELETE may leave the value out
            raise _null_values([name])
        if kind == AlterOp.SET:
            out[name] = value
            continue
        key = key_of(name)
        if key is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {name}")
        if key.type != ConfigType.LIST:
            verb = "append" if kind == AlterOp.APPEND else "subtract"
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}")
        old = split_list(out[name] if name in out else to_config_string(key.default) or "")
        if kind == AlterOp.APPEND:
            new = old + [v for v in split_list(value) if v not in old]
        else:
            new = [v for v in old if v not in split_list(value)]
        out[name] = ",".join(new)
    return out


class ConfigApis:
    def __init__(
        self,
        config: BrokerConfig,
        cache: MetadataCache,
        admin: AdminManager,
        dynamic_config: DynamicConfigManager,
        authorization: RequestAuthorization,
    ) -> None:
        self._config = config
        self._cache = cache
        self._admin = admin
        self._dynamic_config = dynamic_config
        self._auth = authorization

    @property
    def _dynamic(self) -> DynamicBrokerConfig:
        return self._dynamic_config.config

    def _broker_resource(self, name: str) -> bool:
        """True for this broker's own resource, False for the cluster-wide default ("")."""
        if name == "":
            return False
        try:
            broker_id = int(name)
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None
        if broker_id != self._config.broker_id:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {self._config.broker_id} or empty string, but received {name}",
            )
        return True

    # DescribeConfigs -----------------------------------------------------------------------

    @handles(ApiKey.DESCRIBE_CONFIGS, 0, 4)
    async def describe_configs(self, context: RequestContext, body: DescribeConfigsRequest) -> DescribeConfigsResponse:
        header = context.header
        version = header.request_api_version
        results: list[DescribeConfigsResponseDescribeConfigsResult] = []
        for r in body["resources"]:
            entry: DescribeConfigsResponseDescribeConfigsResult = {**_resource_result(r), "configs": []}
            try:
                keys = r["configuration_keys"]
                entry["configs"] = [
                    _describe_entry(c, version, body.get("include_synonyms", False), body.get("include_documentation"))
                    for c in self._describe(context, r["resource_type"], r["resource_name"])
                    if not keys or c.name in keys
                ]
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = exc.code, exc.message
            results.append(entry)
        return {"throttle_time_ms": 0, "results": results}

    def _authorize(self, context: RequestContext, operation: AclOperation, resource_type: int, name: str) -> None:
        """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, the group, or the cluster for broker
        (and broker logger, client metrics) configs, as Kafka checks them before anything
        else; loglake serves topic and broker configs only (INVALID_REQUEST for the others)."""
        acl_type = _CONFIG_RESOURCE_ACLS.get(resource_type)
        if acl_type is not None:
            name = CLUSTER_NAME if acl_type == ResourceType.CLUSTER else name
            self._auth.require(context, operation, acl_type, name, AUTHORIZATION_ERRORS[acl_type])

    def _describe(self, context: RequestContext, resource_type: int, name: str) -> list[ConfigEntry]:
        self._authorize(context, AclOperation.DESCRIBE_CONFIGS, resource_type, name)
        if resource_type == RESOURCE_TOPIC:
            validate_topic_name(name)
            return describe_topic_configs(self._cache.image.topic(name).config, self._dynamic)
        if resource_type == RESOURCE_BROKER:
            return describe_broker_configs(self._dynamic, self._broker_resource(name))
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {resource_type}")

    # AlterConfigs and IncrementalAlterConfigs ---------------------------------------------------

    @handles(ApiKey.ALTER_CONFIGS, 0, 2)
    async def alter_configs(self, context: RequestContext, body: AlterConfigsRequest) -> AlterConfigsResponse:
        def new_config(resource: AlterConfigsRequestAlterConfigsResource, current: dict[str, str]) -> dict[str, str]:
            _refuse_nulls([c["name"] for c in resource["configs"] if c["value"] is None])
            # AlterConfigs replaces the whole set: names not given go back to their defaults.
            return {c["name"]: value for c in resource["configs"] if (value := c["value"]) is not None}

        return {
            "throttle_time_ms": 0,
            "responses": await self._alter(context, body["resources"], body["validate_only"], new_config),
        }

    @handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
    async def incremental_alter_configs(
        self, context: RequestContext, body: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse:
        def new_config(
            resource: IncrementalAlterConfigsRequestAlterConfigsResource, current: dict[str, str]
        ) -> dict[str, str]:
            configs = resource["configs"]
            _refuse_nulls(
                [c["name"] for c in configs if c["value"] is None and c["config_operation"] != AlterOp.DELETE]
            )
            return apply_incremental(current, resource["configs"], lambda n: _config_key(resource["resource_type"], n))

        return {
            "throttle_time_ms": 0,
            "responses": await self._alter(context, body["resources"], body["validate_only"], new_config),
        }

    async def _alter(
        self,
        context: RequestContext,
        resources: list[_Resource],
        validate_only: bool,
        new_config: Callable[[_Resource, dict[str, str]], dict[str, str]],
    ) -> list[AlterConfigsResponseAlterConfigsResourceResponse]:
        seen = Counter((r["resource_type"], r["resource_name"]) for r in resources)
        responses = []
        for r in resources:
            entry = _resource_result(r)
            try:
                if seen[(r["resource_type"], r["resource_name"])] > 1:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
                if len({c["name"] for c in r["configs"]}) != len(r["configs"]):
                    raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
                await self._alter_resource(context, r, new_config, validate_only)
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = exc.code, exc.message
            responses.append(entry)
        return responses

    async def _alter_resource(
        self,
        context: RequestContext,
        r: _Resource,
        new_config: Callable[[_Resource, dict[str, str]], dict[str, str]],
        validate_only: bool,
    ) -> None:
        name = r["resource_name"]
        self._authorize(context, AclOperation.ALTER_CONFIGS, r["resource_type"], name)
        if r["resource_type"] == RESOURCE_TOPIC:
            if name == "":
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
            topic = self._cache.image.topic(name)
            wanted = new_config(r, dict(topic.config))
            change = {k: "" for k in topic.config if k not in wanted} | wanted  # "" removes an override
            await self._admin.alter_topic_config(topic.name, change, validate_only)
        elif r["resource_type"] == RESOURCE_BROKER:
            per_broker = self._broker_resource(name)
            manager = self._dynamic_config
            entity = manager.config.entity if per_broker else ""
            stored = manager.config.per_broker if per_broker else manager.config.cluster_default
            manager.config.validate(new_config(r, dict(stored)), per_broker)
            if not validate_only:

                def changed(current: dict[str, str]) -> dict[str, str]:
                    # On the stored document, compare-and-set: an incremental change of other
                    # keys through another broker at the same time is kept.
                    wanted = new_config(r, current)
                    manager.config.validate(wanted, per_broker)
                    return wanted

                await manager.write(entity, changed)
        else:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"AlterConfigs is only supported for topics and brokers, but resource type is {r['resource_type']}",
            )


def _resource_result(
    r: DescribeConfigsRequestDescribeConfigsResource | _Resource,
) -> AlterConfigsResponseAlterConfigsResourceResponse:
    return {
        "error_code": 0,
        "error_message": None,
        "resource_type": r["resource_type"],
        "resource_name": r["resource_name"],
    }


def _null_values(names: list[str]) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(names)}")


def _refuse_nulls(names: list[str]) -> None:
    if names:
        raise _null_values(names)


def _describe_entry(
    c: ConfigEntry, version: int, include_synonyms: bool, include_documentation: bool | None
) -> DescribeConfigsResponseDescribeConfigsResourceResult:
    return {
        "name": c.name,
        "value": c.value,
        "read_only": c.read_only,
        "is_default": c.source == ConfigSource.DEFAULT_CONFIG,
        "config_source": int(c.source),
        "is_sensitive": c.sensitive,
        "synonyms": [{"name": s.name, "value": s.value, "source": int(s.source)} for s in c.synonyms]
        if include_synonyms and version >= 1
        else [],
        "config_type": int(c.type),
        "documentation": c.doc if include_documentation else None,
    }
