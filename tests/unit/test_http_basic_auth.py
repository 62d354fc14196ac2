"""HTTP Basic credentials against the SCRAM credentials the broker keeps from the store's
notifications: a changed or removed credential stops the old password at the next request
once its notification arrived (the embedded store notifies at once)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.security.credential_cache import CredentialCache
from loglake.security.principal import KafkaPrincipal
from loglake.security.scram import new_credential

from ingest_gateway.http.security import BasicAuthenticator
from ingest_gateway.network.authentication_threads import AuthenticationThreads
from ingest_gateway.server.listener_security import credentials_from


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def set_password(store: EmbeddedMetadataStore, user: str, password: str | None) -> None:
    mechanism = "SCRAM-SHA-256"
    credential = None if password is None else new_credential(mechanism, password, iterations=4096).to_config()
    store.update_user_credentials(user, lambda _: {} if credential is None else {mechanism: credential})


def test_a_changed_or_removed_credential_stops_working_at_once(tmp_path: Path) -> None:
    asyncio.run(_check_changes(tmp_path))


async def _check_changes(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    cache = CredentialCache(store.user_credentials)
    store.watch_entity_configs(cache.update)
    auth = BasicAuthenticator(credentials_from(cache.stored_credentials), AuthenticationThreads(30_000))
    set_password(store, "alice", "one")
    alice = KafkaPrincipal.user("alice")
    assert await auth.principal(basic("alice", "one")) == alice
    assert await auth.principal(basic("alice", "one")) == alice  # remembered
    assert await auth.principal(basic("alice", "two")) is None

    set_password(store, "alice", "two")
    assert await auth.principal(basic("alice", "one")) is None
    assert await auth.principal(basic("alice", "two")) == alice

    set_password(store, "alice", None)
    assert await auth.principal(basic("alice", "two")) is None
    # The same password set again (a fresh salt) is checked against the new credential.
    set_password(store, "alice", "two")
    assert await auth.principal(basic("alice", "two")) == alice
