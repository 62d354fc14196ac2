"""What the Spark side asks the cluster besides records: configs, and the brokers' HTTP
listeners (the jobs' admin calls: tiered offsets, compaction plans), over the Kafka protocol
from the bootstrap servers alone."""

from __future__ import annotations

from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.spark.protocol_client import ProtocolClient

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
_DESCRIBE_CONFIGS_VERSION = 4
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def describe_configs(
    client: ProtocolClient, resource_type: int, name: str, keys: list[str], address: tuple[str, int] | None = None
) -> dict[str, str | None]:
    """DescribeConfigs of one resource (a broker's goes to that broker: `address`)."""
    body = {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": False,
        "include_documentation": False,
    }
    if address is None:
        response = client.request_any(ApiKey.DESCRIBE_CONFIGS, _DESCRIBE_CONFIGS_VERSION, body)
    else:
        response = client.request_to(address, ApiKey.DESCRIBE_CONFIGS, _DESCRIBE_CONFIGS_VERSION, body)
    (result,) = response["results"]
    if result["error_code"]:
        code = ErrorCode(result["error_code"])
        raise RuntimeError(f"DescribeConfigs of {name}: {code.name} {result['error_message'] or ''}")
    return {c["name"]: c["value"] for c in result["configs"]}


def broker_http_url(client: ProtocolClient, broker_id: int) -> str:
    """A broker's HTTP address, from its `http.listeners` (a wildcard host means its Kafka host)."""
    metadata = client.metadata_cache or client.metadata([])
    address = metadata.brokers[broker_id]
    listeners = describe_configs(client, BROKER_RESOURCE, str(broker_id), ["http.listeners"], address)
    first = (listeners.get("http.listeners") or "").split(",")[0].strip()
    scheme, _, host_port = first.partition("://")
    host, _, port = host_port.rpartition(":")
    if not port.isdigit():
        raise RuntimeError(f"broker {broker_id} has no usable http.listeners ({first!r})")
    if host in _WILDCARD_HOSTS:
        host = address[0]
    return f"{scheme or 'http'}://{host}:{port}"


def broker_http_urls(client: ProtocolClient) -> dict[int, str]:
    """Every live broker's HTTP address."""
    metadata = client.metadata([])
    return {broker_id: broker_http_url(client, broker_id) for broker_id in sorted(metadata.brokers)}
