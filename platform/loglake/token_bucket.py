"""A byte-rate budget shared by replication throttles and client quotas: a token bucket
holding one second of bytes. Kafka measures such rates over eleven one-second windows and
counts a short history as ten seconds, which lets a fresh stream burst ten seconds' worth;
a bucket stays within one second's burst from the start."""

from __future__ import annotations

BURST_SECONDS = 1.0


class TokenBucket:
    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.tokens = rate * BURST_SECONDS
        self.updated = now

    def set_rate(self, rate: float) -> None:
        self.rate = rate
        self.tokens = min(self.tokens, rate * BURST_SECONDS)

    def refill(self, now: float) -> float:
        """The balance now (refilled at the rate since the last look, capped at the burst)."""
        self.tokens = min(self.rate * BURST_SECONDS, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        return self.tokens

    def take(self, nbytes: int, now: float) -> float:
        """Charge `nbytes` (the balance may go negative: one request may overdraw it); the
        seconds until the debt is repaid (0 if none)."""
        self.refill(now)
        self.tokens -= nbytes
        return 0.0 if self.tokens > 0 else -self.tokens / self.rate

    def seconds_until_positive(self, now: float) -> float:
        tokens = self.refill(now)
        return 0.0 if tokens > 0 else -tokens / self.rate
