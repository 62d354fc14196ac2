"""How each Kafka listener secures its connections, from the broker's config: a TLS
context for SSL / SASL_SSL listeners, a SASL authenticator per connection for SASL_*
ones, checking the SCRAM credentials the broker keeps (`CredentialCache`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from loglake.config import BrokerConfig, Listener
from loglake.security.client import ClientSecurity, sasl_security
from loglake.security.credential_cache import CredentialCache
from loglake.security.listeners import listener_config
from loglake.security.sasl import SUPPORTED_MECHANISMS, CredentialsOf
from loglake.security.scram import ScramCredential
from loglake.security.tls import client_context, server_context

from ingest_gateway.http.security import BasicAuthenticator
from ingest_gateway.http.tls import TlsHttpProtocol
from ingest_gateway.network.authentication_threads import AuthenticationThreads
from ingest_gateway.network.kafka_server import ListenerSecurity
from ingest_gateway.network.sasl_authenticator import SaslAuthenticator

log = logging.getLogger(__name__)

# Kafka's default is GSSAPI, which loglake does not offer.
DEFAULT_SASL_MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def credentials_from(stored_credentials: Callable[[str], dict[str, str]]) -> CredentialsOf:
    """Parsed SCRAM credentials of a user from their stored form (the broker's
    `CredentialCache.stored_credentials`)."""

    def credentials_of(user: str) -> dict[str, ScramCredential]:
        out = {}
        for mechanism, text in stored_credentials(user).items():
            try:
                out[mechanism] = ScramCredential.from_config(text)
            except ValueError:
                log.warning("ignoring a malformed %s credential of a user", mechanism)
        return out

    return credentials_of


def sasl_mechanisms(config: BrokerConfig, listener: Listener) -> tuple[str, ...]:
    value = listener_config(config.raw, listener.scheme, "sasl.enabled.mechanisms", DEFAULT_SASL_MECHANISMS) or ""
    mechanisms = tuple(m.strip().upper() for m in value.split(",") if m.strip())
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported or not mechanisms:
        raise ValueError(
            f"sasl.enabled.mechanisms of listener {listener.scheme}: {unsupported or 'none'} "
            f"(loglake offers {', '.join(SUPPORTED_MECHANISMS)})"
        )
    return mechanisms


def listener_security(
    config: BrokerConfig, listener: Listener, credentials: CredentialCache, threads: AuthenticationThreads
) -> ListenerSecurity:
    protocol = config.security_protocol(listener)
    tls = server_context(config.raw, listener.scheme) if protocol.uses_tls else None
    if not protocol.uses_sasl:
        return ListenerSecurity(listener.scheme, protocol, tls)
    mechanisms = sasl_mechanisms(config, listener)
    reauth_ms = int(listener_config(config.raw, listener.scheme, "connections.max.reauth.ms", "0") or 0)
    credentials_of = credentials_from(credentials.stored_credentials)
    return ListenerSecurity(
        listener.scheme,
        protocol,
        tls,
        lambda: SaslAuthenticator(mechanisms, credentials_of, reauth_ms, threads),
    )


def http_authenticator(
    config: BrokerConfig, credentials: CredentialCache, threads: AuthenticationThreads
) -> BasicAuthenticator | None:
    """`http.authentication.method`: NONE (default) or BASIC (against the SCRAM credentials)."""
    method = (config.raw.get("http.authentication.method") or "NONE").strip().upper()
    if method not in ("NONE", "BASIC"):
        raise ValueError(f"http.authentication.method={method}: NONE or BASIC")
    return BasicAuthenticator(credentials_from(credentials.stored_credentials), threads) if method == "BASIC" else None


def http_tls_options(config: BrokerConfig, listener: Listener) -> dict[str, Any]:
    """uvicorn's TLS settings for an `https://` HTTP listener: the server context of a Kafka
    listener, from the same ssl.* configs (prefix `listener.name.https.`: PEM keystore and
    truststore, `ssl.client.auth`, `ssl.enabled.protocols`, `ssl.cipher.suites`), and the
    protocol that puts the client certificate in the ASGI scope."""
    if listener.scheme.lower() != "https":
        return {}
    context = server_context(config.raw, listener.scheme)
    return {
        # uvicorn calls it with its config and its own factory, which is not used.
        "ssl_context_factory": lambda uvicorn_config, default_factory: context,
        # Only for uvicorn to say https:// in its start-up line; the context above serves.
        "ssl_certfile": listener_config(config.raw, listener.scheme, "ssl.keystore.location"),
        "http": TlsHttpProtocol,
    }


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    """How this broker reaches the others (replica fetchers, the controller channel,
    transaction markers): the inter-broker listener's protocol; for SASL,
    `sasl.mechanism.inter.broker.protocol` with the username and password of the JAAS line
    `listener.name.<listener>.<mechanism>.sasl.jaas.config` (or `sasl.jaas.config`), as Kafka."""
    name = config.inter_broker_listener_name
    protocol = config.protocol_map[name]
    tls = client_context(config.raw, name) if protocol.uses_tls else None
    if not protocol.uses_sasl:
        return ClientSecurity(tls)

    def jaas(mechanism: str) -> tuple[str, str]:
        listener_jaas = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        return listener_jaas, config.raw.get(listener_jaas) or config.raw.get("sasl.jaas.config", "")

    mechanism = "sasl.mechanism.inter.broker.protocol"
    return sasl_security(tls, (mechanism, config.raw.get(mechanism)), jaas)
