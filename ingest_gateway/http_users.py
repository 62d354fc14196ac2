"""HTTP for SASL users (what `kafka-configs.sh --entity-type users --alter --add-config
'SCRAM-SHA-256=[...]'` does): each user's SCRAM credentials in the metadata store. As with
Kafka's AlterUserScramCredentials, the client sends a salt and the salted password, never
the password; the broker keeps only the derived keys. Listing shows mechanisms and
iteration counts, never key material.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from ingest_gateway.http_errors import BadRequest, json_object
from loglake.security.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential, credential_from_salted_password

if TYPE_CHECKING:
    from ingest_gateway.broker import Broker


def _describe(user: str, credentials: dict[str, str]) -> dict[str, Any]:
    return {
        "user": user,
        "credentials": [
            {"mechanism": m, "iterations": ScramCredential.from_config(c).iterations}
            for m, c in sorted(credentials.items())
        ],
    }


def user_routes(broker: Broker) -> APIRouter:
    router = APIRouter()
    store = broker.store

    @router.get("/users")
    async def list_users() -> list[dict[str, Any]]:
        return [_describe(user, store.user_credentials(user)) for user in store.users()]

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
        credentials = store.user_credentials(user)
        credentials[mechanism] = credential_from_salted_password(mechanism, salted, salt, iterations).to_config()
        store.set_user_credentials(user, credentials)
        return _describe(user, credentials)

    @router.delete("/users/{user}", status_code=204)
    async def delete(user: str, mechanism: str | None = None) -> Response:
        """Remove one mechanism's credential, or the user altogether."""
        credentials = store.user_credentials(user)
        if not credentials or (mechanism is not None and mechanism not in credentials):
            raise BadRequest(404, f"user {user!r} has no {mechanism or 'SCRAM'} credential", 3)
        remaining = {} if mechanism is None else {m: c for m, c in credentials.items() if m != mechanism}
        store.set_user_credentials(user, remaining)
        return Response(status_code=204)

    return router
