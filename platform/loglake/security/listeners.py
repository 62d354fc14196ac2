"""Listeners and their security protocols (Kafka's `listeners`,
`listener.security.protocol.map`, `advertised.listeners`, `inter.broker.listener.name`),
and the listener-prefixed form of per-listener configs
(`listener.name.<listener>.ssl.keystore.location` over `ssl.keystore.location`)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum


class SecurityProtocol(str, Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


DEFAULT_PROTOCOL_MAP = {p.value: p for p in SecurityProtocol}


def parse_protocol_map(value: str | None) -> dict[str, SecurityProtocol]:
    """listener.security.protocol.map: NAME:PROTOCOL,... (Kafka's default maps each protocol to itself)."""
    if not value:
        return dict(DEFAULT_PROTOCOL_MAP)
    out = {}
    for item in value.split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.partition(":")
        try:
            out[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            raise ValueError(
                f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(p.value for p in SecurityProtocol)}"
            ) from None
        if not sep:
            raise ValueError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
    return out


def listener_config(props: Mapping[str, str], listener: str, name: str, default: str | None = None) -> str | None:
    """A per-listener config: `listener.name.<listener lower case>.<name>`, else `<name>`."""
    prefixed = f"listener.name.{listener.lower()}.{name}"
    if prefixed in props:
        return props[prefixed]
    return props.get(name, default)
