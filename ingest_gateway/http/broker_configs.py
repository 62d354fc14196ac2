"""HTTP for dynamic broker configs (what `kafka-configs.sh --entity-type brokers` alters):
each broker's document under /config/brokers/<id>, or the cluster-wide default
(`<default>`). Any broker writes any entity: the document lives in the metadata store and
each broker applies its own on the store's notification. `loglake reassign` sets the
replication throttle rates this way. The documents are read on the broker's metadata thread; a
store that does not answer within `timeout_ms` is answered 504 (REQUEST_TIMED_OUT).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from loglake.broker_configs import DEFAULT_ENTITY, sensitive_broker_config

from ingest_gateway.http.errors import BadRequest, json_object
from ingest_gateway.metadata.admin_manager import ADMIN_TIMEOUT_MS

if TYPE_CHECKING:
    from loglake.coordination.store import MetadataStore

    from ingest_gateway.metadata.dynamic_config import DynamicConfigManager
    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.metadata.metadata_thread import MetadataThread


def broker_config_routes(
    dynamic_config: DynamicConfigManager,
    cache: MetadataCache,
    store: MetadataStore,
    metadata_thread: MetadataThread,
    timeout_ms: int = ADMIN_TIMEOUT_MS,
) -> APIRouter:
    router = APIRouter()

    def entity_of(name: str) -> str:
        if name == DEFAULT_ENTITY:
            return name
        if not name.isdigit() or int(name) not in cache.image.brokers:
            raise BadRequest(404, f"no broker {name!r} is registered (or use {DEFAULT_ENTITY!r})", 3)
        return name

    def shown(configs: dict[str, str]) -> dict[str, str | None]:
        # As DescribeConfigs: passwords and unknown configs without their values.
        return {k: None if sensitive_broker_config(k) else v for k, v in configs.items()}

    @router.get("/brokers/{name}/configs")
    async def describe(name: str) -> dict[str, Any]:
        """The dynamic configs stored for one broker (or the cluster-wide default); the values
        of sensitive ones are null."""
        entity = entity_of(name)
        return {
            "broker": name,
            "configs": shown((await metadata_thread.run(store.broker_configs, timeout_ms=timeout_ms)).get(entity, {})),
        }

    @router.patch("/brokers/{name}/configs")
    async def alter(name: str, request: Request) -> dict[str, Any]:
        """Set configs ({"configs": {name: value}}); an empty value removes one."""
        entity = entity_of(name)
        changes = (await json_object(request)).get("configs")
        if not isinstance(changes, dict) or not all(isinstance(v, str) for v in changes.values()):
            raise BadRequest(422, 'the body is {"configs": {"name": "value", ...}} ("" removes a config)', 2)
        dynamic_config.config.validate({k: v for k, v in changes.items() if v != ""}, entity != DEFAULT_ENTITY)
        # Merged into the stored document by compare-and-set: a PATCH of other keys through
        # another broker at the same time is kept.
        stored = await dynamic_config.write(
            entity, lambda current: {k: v for k, v in {**current, **changes}.items() if v != ""}, timeout_ms
        )
        return {"broker": name, "configs": shown(stored)}

    return router
