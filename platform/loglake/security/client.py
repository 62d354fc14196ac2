"""The client side of security: how a connection to a broker is secured, from Kafka's
client properties (`security.protocol`, `sasl.mechanism`, `sasl.jaas.config`,
`ssl.truststore.location`, `ssl.keystore.location`, `ssl.key.password`,
`ssl.endpoint.identification.algorithm`), PEM files as on the broker. The broker's own
clients (replica fetchers, the controller channel) and the Spark data source use it; for
librdkafka (the Spark sink's at-least-once path) the same properties are translated."""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from loglake.security.listeners import SecurityProtocol
from loglake.security.sasl import SUPPORTED_MECHANISMS
from loglake.security.scram import ScramClient

SECURITY_PROPERTIES = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.jaas.config",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ClientSecurity:
    """TLS with `tls` (a client SSLContext), and SASL with `mechanism` as `username`."""

    tls: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)


PLAINTEXT = ClientSecurity()


def jaas_credentials(jaas: str) -> tuple[str, str] | None:
    """The username and password of a JAAS login line (PlainLoginModule, ScramLoginModule)."""
    options = {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(jaas or "")}
    if "username" not in options or "password" not in options:
        return None
    return options["username"], options["password"]


def tls_client_context(props: Mapping[str, str | None]) -> ssl.SSLContext:
    """A client SSLContext from `ssl.truststore.location`, `ssl.keystore.location`,
    `ssl.key.password` and `ssl.endpoint.identification.algorithm` (host names are checked
    unless it is empty)."""
    context = ssl.create_default_context(cafile=props.get("ssl.truststore.location"))
    keystore = props.get("ssl.keystore.location")
    if keystore:
        context.load_cert_chain(keystore, password=props.get("ssl.key.password"))
    context.check_hostname = bool(props.get("ssl.endpoint.identification.algorithm", "https"))
    return context


def sasl_security(
    tls: ssl.SSLContext | None,
    mechanism_setting: tuple[str, str | None],
    jaas_setting: Callable[[str], tuple[str, str]],
) -> ClientSecurity:
    """SASL over `tls` (or plaintext): `mechanism_setting` is the (property, value) naming the
    mechanism (Kafka's default GSSAPI when unset); `jaas_setting(mechanism)` the (property,
    JAAS line) holding the username and password. ValueError naming the property at fault."""
    name, value = mechanism_setting
    mechanism = (value or "GSSAPI").strip().upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ValueError(f"{name}={mechanism}: one of {', '.join(SUPPORTED_MECHANISMS)}")
    jaas_name, jaas = jaas_setting(mechanism)
    credentials = jaas_credentials(jaas)
    if credentials is None:
        raise ValueError(f'{jaas_name} needs username="..." and password="..."')
    return ClientSecurity(tls, mechanism, *credentials)


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """Kafka client properties to a ClientSecurity; ValueError naming what is wrong."""
    try:
        protocol = SecurityProtocol((props.get("security.protocol") or "PLAINTEXT").strip().upper())
    except ValueError:
        raise ValueError(
            f"security.protocol={props.get('security.protocol')}: one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
        ) from None
    for kind in ("truststore", "keystore"):
        if (props.get(f"ssl.{kind}.type") or "PEM").upper() != "PEM":
            raise ValueError(f"ssl.{kind}.type: PEM files only")
    tls = None
    if protocol.uses_tls:
        try:
            tls = tls_client_context(props)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load the truststore/keystore: {exc}") from None
    if not protocol.uses_sasl:
        return ClientSecurity(tls)
    return sasl_security(
        tls,
        ("sasl.mechanism", props.get("sasl.mechanism")),
        lambda mechanism: ("sasl.jaas.config", props.get("sasl.jaas.config", "")),
    )


def librdkafka_properties(props: Mapping[str, str]) -> dict[str, str]:
    """The same settings in librdkafka's names (it reads no JAAS and no Java stores)."""
    out = {k: v for k, v in props.items() if k not in SECURITY_PROPERTIES}
    if "security.protocol" in props:
        out["security.protocol"] = props["security.protocol"]
    if "sasl.mechanism" in props:
        out["sasl.mechanisms"] = props["sasl.mechanism"]
    credentials = jaas_credentials(props.get("sasl.jaas.config", ""))
    if credentials is not None:
        out["sasl.username"], out["sasl.password"] = credentials
    if props.get("ssl.truststore.location"):
        out["ssl.ca.location"] = props["ssl.truststore.location"]
    if props.get("ssl.keystore.location"):  # a PEM keystore holds both
        out["ssl.certificate.location"] = out["ssl.key.location"] = props["ssl.keystore.location"]
    if props.get("ssl.key.password"):
        out["ssl.key.password"] = props["ssl.key.password"]
    if "ssl.endpoint.identification.algorithm" in props:
        out["ssl.endpoint.identification.algorithm"] = props["ssl.endpoint.identification.algorithm"] or "none"
    return out


class SaslClientExchange:
    """The client's side of one SASL exchange, whatever carries it: `first()` is the first
    token, `respond(server_token)` the next one, or None once authenticated."""

    def __init__(self, security: ClientSecurity) -> None:
        self.mechanism = security.mechanism or ""
        self._security = security
        self._scram = (
            None if self.mechanism == "PLAIN" else ScramClient(self.mechanism, security.username, security.password)
        )
        self._step = 0

    def first(self) -> bytes:
        if self._scram is None:
            return f"\0{self._security.username}\0{self._security.password}".encode()
        return self._scram.first_message()

    def respond(self, server_token: bytes) -> bytes | None:
        """Raises ScramError when the server's answer does not check out."""
        self._step += 1
        if self._scram is None:
            return None  # PLAIN: one token
        if self._step == 1:
            return self._scram.final_message(server_token)
        self._scram.verify(server_token)
        return None
