"""User and client-id names in store paths, sanitized as Kafka's Sanitizer does."""

from __future__ import annotations

from pathlib import Path

from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.security.quotas import quota_levels
from loglake.security.sanitizer import DEFAULT, desanitize, sanitize


def test_names_are_url_encoded_as_kafka_does() -> None:
    # Kafka's SanitizerTest: every character a principal may hold.
    principal = "User:CN=Some characters !@#$%&*()_-+=';:,/~"
    sanitized = "User%3ACN%3DSome%20characters%20%21%40%23%24%25%26%2A%28%29_-%2B%3D%27%3B%3A%2C%2F%7E"
    assert sanitize(principal) == sanitized
    assert desanitize(sanitized) == principal
    assert sanitize("ü.x") == "%C3%BC.x" and desanitize("%C3%BC.x") == "ü.x"
    assert sanitize(DEFAULT) == DEFAULT == desanitize(DEFAULT)
    assert sanitize("alice") == "alice"


def test_store_paths_hold_sanitized_names(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    user = "CN=alice/eng,O=example"
    store.update_user_credentials(user, lambda _: {"SCRAM-SHA-256": "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=4096"})
    assert set(store.entity_configs()) == {"users/CN%3Dalice%2Feng%2CO%3Dexample"}
    assert list(store.all_user_credentials()) == [user]
    assert store.user_credentials(user)["SCRAM-SHA-256"].startswith("salt=")
    assert quota_levels(user, "a b*")[:3] == [
        "users/CN%3Dalice%2Feng%2CO%3Dexample/clients/a%20b%2A",
        f"users/CN%3Dalice%2Feng%2CO%3Dexample/clients/{DEFAULT}",
        "users/CN%3Dalice%2Feng%2CO%3Dexample",
    ]
