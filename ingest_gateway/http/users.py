"""HTTP for client entities (what `kafka-configs.sh --entity-type users|clients` alters):
SASL users' SCRAM credentials and client quotas, both entity configs in the metadata store.

As with Kafka's AlterUserScramCredentials, the client sends a salt and the salted password,
never the password; the broker keeps only the derived keys. Listing shows mechanisms and
iteration counts, never key material. Quotas (`producer_byte_rate`, `consumer_byte_rate`)
are set per `users/<user>`, `clients/<client id>` or `users/<user>/clients/<client id>`,
`<default>` standing for a default. The store is asked on the metadata thread; a store that
does not answer within `ADMIN_TIMEOUT_MS` is answered 504 (REQUEST_TIMED_OUT).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from loglake.security.quotas import QUOTA_KEYS
from loglake.security.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential, credential_from_salted_password

from ingest_gateway.http.errors import BadRequest, json_object
from ingest_gateway.metadata.admin_manager import ADMIN_TIMEOUT_MS

if TYPE_CHECKING:
    from loglake.coordination.store import MetadataStore

    from ingest_gateway.metadata.metadata_thread import MetadataThread


def _describe(user: str, credentials: dict[str, str]) -> dict[str, Any]:
    return {
        "user": user,
        "credentials": [
            {"mechanism": m, "iterations": ScramCredential.from_config(c).iterations}
            for m, c in sorted(credentials.items())
        ],
    }


def user_routes(store: MetadataStore, metadata_thread: MetadataThread) -> APIRouter:
    router = APIRouter()
    stored = functools.partial(metadata_thread.run, timeout_ms=ADMIN_TIMEOUT_MS)

    @router.get("/users")
    async def list_users() -> list[dict[str, Any]]:
        credentials = await stored(store.all_user_credentials)
        return [_describe(user, c) for user, c in credentials.items()]

    @router.put("/users/{user}")
    async def upsert(user: str, request: Request) -> dict[str, Any]:
        """Add or replace one mechanism's credential:
        {"mechanism", "iterations", "salt" (base64), "salted_password" (base64)}."""
        doc = await json_object(request)
        mechanism, iterations = doc.get("mechanism"), doc.get("iterations")
        if mechanism not in MECHANISMS:
            raise BadRequest(422, f"mechanism must be one of {', '.join(MECHANISMS)}", 2)
        if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < MIN_ITERATIONS:
            raise BadRequest(422, f"iterations must be an integer of at least {MIN_ITERATIONS}", 2)
        if not user or "/" in user:
            raise BadRequest(422, "a user name must be non-empty, without '/'", 2)
        try:
            salt = base64.b64decode(doc.get("salt") or "", validate=True)
            salted = base64.b64decode(doc.get("salted_password") or "", validate=True)
        except (binascii.Error, TypeError):
            raise BadRequest(422, "salt and salted_password must be base64", 2) from None
        if not salt or not salted:
            raise BadRequest(422, "salt and salted_password are required", 2)
        credential = credential_from_salted_password(mechanism, salted, salt, iterations).to_config()
        credentials = await stored(
            store.update_user_credentials, user, lambda current: current | {mechanism: credential}
        )
        return _describe(user, credentials)

    @router.delete("/users/{user}", status_code=204)
    async def delete(user: str, mechanism: str | None = None) -> Response:
        """Remove one mechanism's credential, or the user altogether."""

        def remaining(credentials: dict[str, str]) -> dict[str, str]:
            if not credentials or (mechanism is not None and mechanism not in credentials):
                raise BadRequest(404, f"user {user!r} has no {mechanism or 'SCRAM'} credential", 3)
            return {} if mechanism is None else {m: c for m, c in credentials.items() if m != mechanism}

        await stored(store.update_user_credentials, user, remaining)
        return Response(status_code=204)

    @router.get("/quotas")
    async def list_quotas() -> dict[str, dict[str, str]]:
        configs = await stored(store.entity_configs)
        return {
            entity: quotas
            for entity, config in sorted(configs.items())
            if (quotas := {k: v for k, v in config.items() if k in QUOTA_KEYS})
        }

    @router.patch("/quotas/{entity:path}")
    async def alter_quotas(entity: str, request: Request) -> dict[str, Any]:
        """Set quotas ({"configs": {"producer_byte_rate": "1048576"}}); "" removes one."""
        if not _QUOTA_ENTITY.match(entity):
            raise BadRequest(
                422, "the entity is users/<user>, clients/<client id> or users/<user>/clients/<client id>", 2
            )
        changes = (await json_object(request)).get("configs")
        if not isinstance(changes, dict) or not changes:
            raise BadRequest(422, 'the body is {"configs": {"producer_byte_rate": "...", ...}}', 2)
        for key, value in changes.items():
            if key not in QUOTA_KEYS:
                raise BadRequest(422, f"{key!r} is not a quota: {', '.join(QUOTA_KEYS)}", 2)
            if value != "" and not _positive_number(value):
                raise BadRequest(422, f"{key} must be a positive number, not {value!r}", 2)
        config = await stored(
            store.update_entity_config,
            entity,
            lambda current: {k: v for k, v in {**current, **changes}.items() if v != ""},
        )
        return {"entity": entity, "configs": {k: v for k, v in config.items() if k in QUOTA_KEYS}}

    return router


_QUOTA_ENTITY = re.compile(r"^(users/[^/]+(/clients/[^/]+)?|clients/[^/]+)$")


def _positive_number(value: Any) -> bool:
    try:
        return isinstance(value, str) and float(value) > 0
    except ValueError:
        return False
