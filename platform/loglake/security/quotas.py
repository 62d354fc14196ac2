"""Client quotas (Kafka's ClientQuotaManager): byte rates per user and/or client id.

Quotas are entity configs as Kafka keeps them (`/config/users/<user>`,
`/config/clients/<client id>`, `/config/users/<user>/clients/<client id>`, `<default>` for
defaults) with the keys `producer_byte_rate` and `consumer_byte_rate`. The quota of a
request is the first of Kafka's eight levels that sets the key (user+client, user+default
client, user, default user+client, default user+default client, default user, client,
default client), and everyone that level covers shares it: a user quota is one budget for
all of the user's clients.

A budget is a `TokenBucket` holding one second of bytes: a request that overdraws it gets
the time until it is repaid as its throttle time (`throttle_time_ms`), and the broker
mutes the connection that long after answering (KIP-219), so the client's rate settles at
the quota however hard it pushes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from loglake.security.sanitizer import DEFAULT, sanitize
from loglake.token_bucket import TokenBucket

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, "request_percentage")


def quota_levels(user: str, client_id: str) -> list[str]:
    """The entity paths Kafka consults for (user, client id), most specific first."""
    user, client_id = sanitize(user), sanitize(client_id)
    return [
        f"users/{user}/clients/{client_id}",
        f"users/{user}/clients/{DEFAULT}",
        f"users/{user}",
        f"users/{DEFAULT}/clients/{client_id}",
        f"users/{DEFAULT}/clients/{DEFAULT}",
        f"users/{DEFAULT}",
        f"clients/{client_id}",
        f"clients/{DEFAULT}",
    ]


def _shared_key(level: str, user: str, client_id: str) -> str:
    """Who shares the budget of a quota found at `level`: a named entity's quota is one
    budget for all it covers; a default applies to each user / client id on its own."""
    parts = level.split("/")
    for i in range(1, len(parts), 2):
        if parts[i] == DEFAULT:
            parts[i] = user if parts[i - 1] == "users" else client_id
    return "/".join(parts)


class ClientQuotaManager:
    """One quota type (produce or fetch bytes) on one broker."""

    def __init__(self, key: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self._clock = clock
        self._configs: dict[str, float] = {}  # entity path -> rate, for entities setting `key`
        self._budgets: dict[str, tuple[str, TokenBucket]] = {}  # shared key -> (level, budget)

    def update(self, entity_configs: Mapping[str, Mapping[str, str]]) -> None:
        rates = {}
        for entity, config in entity_configs.items():
            value = config.get(self.key)
            if value is not None:
                try:
                    rates[entity] = float(value)
                except ValueError:
                    continue  # refused at write time; a hand-written one is ignored, as Kafka
        self._configs = rates
        # Budgets follow their level's new rate; those of levels gone are dropped.
        for key, (level, budget) in list(self._budgets.items()):
            if level in rates:
                budget.set_rate(rates[level])
            else:
                del self._budgets[key]

    @property
    def enabled(self) -> bool:
        return bool(self._configs)

    def quota(self, user: str, client_id: str) -> tuple[str, str, float] | None:
        """(level, budget key, bytes/s) of the request's quota, or None."""
        for level in quota_levels(user, client_id):
            rate = self._configs.get(level)
            if rate is not None:
                return level, _shared_key(level, user, client_id), rate
        return None

    def throttle_ms(self, user: str, client_id: str) -> int:
        """How long the client must wait before its budget allows bytes again (0: now)."""
        found = self.quota(user, client_id)
        entry = None if found is None else self._budgets.get(found[1])
        if entry is None:
            return 0
        wait = entry[1].seconds_until_positive(self._clock())
        return math.ceil(wait * 1000) + 1 if wait else 0

    def record(self, user: str, client_id: str, nbytes: int) -> int:
        """Charge `nbytes` to the request's budget; its throttle time in ms."""
        found = self.quota(user, client_id)
        if found is None:
            return 0
        level, key, rate = found
        now = self._clock()
        entry = self._budgets.get(key)
        if entry is None or entry[0] != level:
            entry = self._budgets[key] = (level, TokenBucket(rate, now))
        return math.ceil(entry[1].take(nbytes, now) * 1000)
