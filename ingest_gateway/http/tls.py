"""The peer's TLS details for the HTTP API: uvicorn's HTTP protocol with the ASGI TLS
extension (`scope["extensions"]["tls"]`, asgiref's "TLS" extension spec).

uvicorn verifies client certificates (`ssl_cert_reqs`) but does not tell the ASGI app about
them: its scope has no TLS extension. Its protocol classes call `self.app` for each request
on a connection, and the TLS handshake is over before `connection_made` (asyncio's SSL
transport calls it then), so this subclass reads the peer certificate once per connection
and hands every request's scope the extension: `client_cert_name` is the verified client
certificate's subject in RFC 4514 (RFC 2253) form, made by the same function as the Kafka
listeners' principal; `client_cert_chain` its PEM (Python gives the leaf only); `tls_version`
the protocol's code. Without a verified certificate the name is None and the chain empty.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from loglake.security.tls import certificate_principal_name
from uvicorn.protocols.http.auto import AutoHTTPProtocol

# The ASGI spec's tls_version: the TLS protocol's wire code.
_TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


def tls_extension(ssl_object: ssl.SSLObject) -> dict[str, Any]:
    """The ASGI TLS extension of a connection whose handshake is done."""
    certificate = ssl_object.getpeercert()  # {} unless a client certificate was verified
    der = ssl_object.getpeercert(binary_form=True) if certificate else None
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
        "client_cert_name": certificate_principal_name(certificate) if certificate else None,
        "client_cert_error": None,
        "tls_version": _TLS_VERSIONS.get(ssl_object.version() or ""),
        "cipher_suite": None,  # Python's ssl names the cipher but does not give its code
    }


class TlsHttpProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP/1.1 protocol, adding the TLS extension to each request's scope."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is None:
            return
        tls = tls_extension(ssl_object)
        app = self.app

        async def with_tls(scope: dict[str, Any], receive: Any, send: Any) -> None:
            scope["extensions"] = {**(scope.get("extensions") or {}), "tls": tls}
            await app(scope, receive, send)

        self.app = with_tls
