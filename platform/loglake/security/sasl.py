"""SASL servers by mechanism: PLAIN and SCRAM-SHA-256/512, all checked against the SCRAM
credentials of the metadata store (one credential store; PLAIN derives the stored key
from the password it is given and compares). GSSAPI and OAUTHBEARER are not offered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from loglake.security.scram import MECHANISMS as SCRAM_MECHANISMS
from loglake.security.scram import ScramCredential, ScramError, ScramServer, password_matches

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)

# user -> {mechanism: credential}, as stored under /config/users/<user>.
CredentialsOf = Callable[[str], dict[str, ScramCredential]]


class SaslError(Exception):
    """Authentication failed (SASL_AUTHENTICATION_FAILED, then the connection closes)."""


class SaslServer(Protocol):
    mechanism: str

    @property
    def username(self) -> str | None: ...

    @property
    def complete(self) -> bool: ...

    def evaluate(self, response: bytes) -> bytes:
        """The client's next token to the server's reply; raises SaslError."""


class PlainServer:
    """RFC 4616: one message, authzid NUL authcid NUL passwd."""

    mechanism = PLAIN

    def __init__(self, credentials_of: CredentialsOf) -> None:
        self._credentials_of = credentials_of
        self.username: str | None = None
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    def evaluate(self, response: bytes) -> bytes:
        parts = response.split(b"\0")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            raise SaslError("Invalid SASL/PLAIN response: expected 3 tokens, with a user name and a password")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslError("Invalid SASL/PLAIN response: not UTF-8") from None
        if authzid and authzid != user:
            raise SaslError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        credentials = self._credentials_of(user)
        # The strongest stored credential decides.
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            credential = credentials.get(mechanism)
            if credential is not None:
                if not password_matches(mechanism, credential, password):
                    break
                self.username = user
                self._complete = True
                return b""
        raise SaslError("Authentication failed: Invalid username or password")


class _Scram:
    """ScramServer behind the SaslServer interface (its errors as SaslError)."""

    def __init__(self, mechanism: str, credentials_of: CredentialsOf) -> None:
        self.mechanism = mechanism
        self._server = ScramServer(mechanism, lambda user: credentials_of(user).get(mechanism))

    @property
    def username(self) -> str | None:
        return self._server.username

    @property
    def complete(self) -> bool:
        return self._server.complete

    def evaluate(self, response: bytes) -> bytes:
        try:
            return self._server.evaluate(response)
        except ScramError as exc:
            raise SaslError(str(exc)) from None


def sasl_server(mechanism: str, credentials_of: CredentialsOf) -> SaslServer:
    if mechanism == PLAIN:
        return PlainServer(credentials_of)
    if mechanism in SCRAM_MECHANISMS:
        return _Scram(mechanism, credentials_of)
    raise ValueError(f"unsupported SASL mechanism {mechanism}")
