"""SCRAM credentials kept in the broker (Kafka's CredentialCache): filled from the metadata
store's entity configs at start-up and replaced whenever a config change notification
arrives, so an authentication needs no store round trip and goes on while ZooKeeper is
down. A change made while the store answers (a password changed, a user removed) takes
effect as soon as its notification arrives (milliseconds).

A user the cache does not know (added a moment ago, before its notification, or never) is
looked up in the store: while the store does not answer, such a user is refused with that
reason (the authentication's deadline), never let in."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from loglake.security.sanitizer import desanitize
from loglake.security.scram import MECHANISMS

SCRAM_MECHANISMS = frozenset(MECHANISMS)


def scram_credentials_by_user(entity_configs: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """Every user with SCRAM credentials (its `users/<user>` entity), with them, sorted."""
    out = {}
    for entity, config in sorted(entity_configs.items()):
        credentials = {k: v for k, v in config.items() if k in SCRAM_MECHANISMS}
        if entity.count("/") == 1 and entity.startswith("users/") and credentials:
            out[desanitize(entity.split("/")[1])] = credentials
    return out


class CredentialCache:
    def __init__(self, read_user: Callable[[str], dict[str, str]]) -> None:
        # The store's answer for one user (a round trip; blocks while the store is down).
        self._read_user = read_user
        self._users: dict[str, dict[str, str]] | None = None  # None: not filled yet

    def update(self, entity_configs: Mapping[str, Mapping[str, str]]) -> None:
        """The entity configs as the store's watch delivers them (any thread: the dict is
        replaced whole)."""
        self._users = scram_credentials_by_user(entity_configs)

    def stored_credentials(self, user: str) -> dict[str, str]:
        """The user's SCRAM credentials in Kafka's stored form, by mechanism (blocking only
        for a user the cache does not know)."""
        users = self._users
        if users is not None and user in users:
            return users[user]
        return self._read_user(user)
