"""The broker's SCRAM credentials: served from what the store's notifications delivered;
only a user it does not know is read from the store."""

from __future__ import annotations

from loglake.security.credential_cache import CredentialCache


def test_known_users_are_answered_from_the_cache_and_others_from_the_store() -> None:
    reads: list[str] = []

    def read_user(user: str) -> dict[str, str]:
        reads.append(user)
        return {"SCRAM-SHA-256": "from-store"} if user == "new" else {}

    cache = CredentialCache(read_user)
    assert cache.stored_credentials("alice") == {} and reads == ["alice"], "not filled yet: the store decides"
    cache.update(
        {
            "users/alice": {"SCRAM-SHA-256": "a", "producer_byte_rate": "1024"},
            "users/alice/clients/app": {"SCRAM-SHA-256": "not a user"},
            "clients/app": {"consumer_byte_rate": "1"},
            "users/quota-only": {"producer_byte_rate": "5"},
        }
    )
    reads.clear()
    assert cache.stored_credentials("alice") == {"SCRAM-SHA-256": "a"}
    assert reads == [], "no store round trip for a known user"
    assert cache.stored_credentials("new") == {"SCRAM-SHA-256": "from-store"} and reads == ["new"]
    cache.update({})  # alice removed
    assert cache.stored_credentials("alice") == {}
