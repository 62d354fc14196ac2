"""Client quotas: Kafka's precedence of entity levels, shared budgets, throttle times."""

from __future__ import annotations

import pytest

from loglake.security.quotas import PRODUCER_BYTE_RATE, ClientQuotaManager


class FakeClock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def manager(configs: dict[str, dict[str, str]]) -> tuple[ClientQuotaManager, FakeClock]:
    clock = FakeClock()
    quotas = ClientQuotaManager(PRODUCER_BYTE_RATE, clock)
    quotas.update(configs)
    return quotas, clock


def test_the_most_specific_level_wins() -> None:
    quotas, _ = manager(
        {
            "users/alice/clients/app": {PRODUCER_BYTE_RATE: "100"},
            "users/alice": {PRODUCER_BYTE_RATE: "200"},
            "users/<default>": {PRODUCER_BYTE_RATE: "300"},
            "clients/app": {PRODUCER_BYTE_RATE: "400"},
            "clients/<default>": {PRODUCER_BYTE_RATE: "500"},
            "users/bob": {"consumer_byte_rate": "1"},  # another quota type: no effect here
        }
    )
    assert quotas.quota("alice", "app")[2] == 100
    assert quotas.quota("alice", "other")[2] == 200
    assert quotas.quota("bob", "app")[2] == 300  # the default user comes before client ids
    assert quotas.quota("bob", "app")[1] == "users/bob"  # each user its own default budget
    nothing, _ = manager({})
    assert nothing.quota("alice", "app") is None and nothing.record("alice", "app", 10**9) == 0


def test_a_budget_is_shared_by_what_its_level_covers_and_throttles_past_it() -> None:
    quotas, clock = manager({"users/alice": {PRODUCER_BYTE_RATE: "1000"}})
    assert quotas.record("alice", "a", 600) == 0
    # The other client of the same user draws on the same second of budget.
    assert quotas.record("alice", "b", 900) == 500  # 500 bytes over at 1000 B/s
    assert quotas.throttle_ms("alice", "a") > 0
    clock.now += 0.6
    assert quotas.throttle_ms("alice", "a") == 0
    # Over a long run the bytes let through follow the rate.
    sent = 0
    for _ in range(1000):
        clock.now += 0.01
        if quotas.throttle_ms("alice", "a") == 0:
            quotas.record("alice", "a", 100)
            sent += 100
    assert sent == pytest.approx(10 * 1000, rel=0.05)


def test_a_changed_quota_applies_to_running_budgets() -> None:
    quotas, clock = manager({"clients/app": {PRODUCER_BYTE_RATE: "1000"}})
    quotas.record("u", "app", 3000)
    quotas.update({"clients/app": {PRODUCER_BYTE_RATE: "10000"}})
    clock.now += 0.25
    assert quotas.throttle_ms("u", "app") == 0  # 2000 owed, repaid at the new rate
    quotas.update({})
    assert quotas.record("u", "app", 10**9) == 0
