"""HTTP for dynamic broker configs (what `kafka-configs.sh --entity-type brokers` alters):
each broker's document under /config/brokers/<id>, or the cluster-wide default
(`<default>`). Any broker writes any entity: the document lives in the metadata store and
each broker applies its own on the store's notification. `loglake reassign` sets the
replication throttle rates this way.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from loglake.broker_configs import DEFAULT_ENTITY, sensitive_broker_config

from ingest_gateway.http.errors import BadRequest, json_object

if TYPE_CHECKING:
    from loglake.coordination.store import MetadataStore

    from ingest_gateway.metadata.dynamic_config import DynamicConfigManager
    from ingest_gateway.metadata.metadata_cache import MetadataCache


def broker_config_routes(dynamic_config: DynamicConfigManager, cache: MetadataCache, store: MetadataStore) -> APIRouter:
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
        return {"broker": name, "configs": shown((await asyncio.to_thread(store.broker_configs)).get(entity, {}))}

    @router.patch("/brokers/{name}/configs")
    async def alter(name: str, request: Request) -> dict[str, Any]:
        """Set configs ({"configs": {name: value}}); an empty value removes one."""
        entity = entity_of(name)
        changes = (await json_object(request)).get("configs")
        if not isinstance(changes, dict) or not all(isinstance(v, str) for v in changes.values()):
            raise BadRequest(422, 'the body is {"configs": {"name": "value", ...}} ("" removes a config)', 2)
        stored = dict((await asyncio.to_thread(store.broker_configs)).get(entity, {}))
        wanted = {k: v for k, v in {**stored, **changes}.items() if v != ""}
        dynamic_config.config.validate({k: v for k, v in changes.items() if v != ""}, entity != DEFAULT_ENTITY)
        await dynamic_config.write(entity, wanted)
        return {"broker": name, "configs": shown(wanted)}

    return router
