"""Principals: who a connection authenticated as, in Kafka's `type:name` form."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls("User", name)


# What a PLAINTEXT connection, or a TLS one without a client certificate, is.
ANONYMOUS = KafkaPrincipal.user("ANONYMOUS")
