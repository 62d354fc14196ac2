"""TLS for SSL and SASL_SSL listeners, configured with Kafka's ssl.* names.

Python's ssl module reads PEM, not Java keystores, so loglake takes Kafka's PEM form
(KIP-651): `ssl.keystore.type=PEM` with `ssl.keystore.location` a PEM file holding the
certificate chain and the private key (`ssl.key.password` if the key is encrypted), and
`ssl.truststore.type=PEM` with `ssl.truststore.location` a PEM bundle of trusted CAs.
`ssl.client.auth` (none, requested, required) asks for client certificates; a verified
client certificate's subject becomes the principal, `User:` + its RFC 2253 name
("User:CN=alice,OU=eng,O=example"), as Kafka's default principal builder does.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from loglake.security.client import tls_client_context
from loglake.security.listeners import listener_config

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# Attribute names as Java's X500Principal.getName() (RFC 2253) writes them.
_RDN_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


class TlsConfigError(ValueError):
    pass


def server_context(props: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The SSLContext of one SSL / SASL_SSL listener (listener-prefixed configs first)."""

    def get(name: str, default: str | None = None) -> str | None:
        return listener_config(props, listener, name, default)

    for kind in ("keystore", "truststore"):
        store_type = (get(f"ssl.{kind}.type") or "PEM").upper()
        if store_type != "PEM":
            raise TlsConfigError(
                f"ssl.{kind}.type={store_type} for listener {listener}: loglake reads PEM files only "
                "(convert with `openssl pkcs12 -in store.p12 -nodes`, or keytool -importkeystore first)"
            )
    keystore = get("ssl.keystore.location")
    if not keystore:
        raise TlsConfigError(f"listener {listener} uses TLS but ssl.keystore.location is not set")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = [p.strip() for p in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    unknown = [p for p in enabled if p not in _PROTOCOLS]
    if unknown or not enabled:
        raise TlsConfigError(f"ssl.enabled.protocols: {unknown or enabled} (loglake supports TLSv1.2, TLSv1.3)")
    context.minimum_version = min(_PROTOCOLS[p] for p in enabled)
    context.maximum_version = max(_PROTOCOLS[p] for p in enabled)
    try:
        context.load_cert_chain(keystore, password=get("ssl.key.password"))
        truststore = get("ssl.truststore.location")
        if truststore:
            context.load_verify_locations(cafile=truststore)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"listener {listener}: cannot load its keystore/truststore: {exc}") from None
    client_auth = (get("ssl.client.auth") or "none").lower()
    if client_auth not in _CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth={client_auth}: must be none, requested or required")
    if client_auth != "none" and not truststore:
        raise TlsConfigError(f"ssl.client.auth={client_auth} needs ssl.truststore.location to verify clients")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        context.set_ciphers(ciphers.replace(",", ":"))
    return context


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def certificate_principal_name(certificate: dict[str, Any]) -> str | None:
    """The RFC 2253 subject of a verified peer certificate (ssl's getpeercert() form):
    most specific first, as Java renders it."""
    subject = certificate.get("subject")
    if not subject:
        return None
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def client_context(props: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The SSLContext a broker connects to another broker's `listener` with: the truststore
    verifies the other broker (and its host name, unless
    `ssl.endpoint.identification.algorithm` is empty), the keystore is this broker's
    certificate for listeners that ask for one."""

    names = ("ssl.truststore.location", "ssl.keystore.location", "ssl.key.password")
    settings = {n: listener_config(props, listener, n) for n in names}
    settings["ssl.endpoint.identification.algorithm"] = listener_config(
        props, listener, "ssl.endpoint.identification.algorithm", "https"
    )
    try:
        return tls_client_context(settings)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"listener {listener}: cannot load the client keystore/truststore: {exc}") from None
