"""SCRAM (RFC 5802 / RFC 7677) as Kafka uses it for SASL: credentials and the server side.

A credential is what the metadata store keeps for one user and mechanism, never the
password: a salt, the iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key"))
and ServerKey = HMAC(SaltedPassword, "Server Key"), written as Kafka writes it under
/config/users/<user>: "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's minimum for both mechanisms
DEFAULT_ITERATIONS = 4096


class ScramError(Exception):
    """The exchange failed: bad credentials or a malformed message (Kafka's SaslException)."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_config(cls, text: str) -> ScramCredential:
        try:
            fields = dict(item.split("=", 1) for item in text.split(","))
            return cls(
                base64.b64decode(fields["salt"]),
                base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """What the broker keeps (Kafka's AlterUserScramCredentials sends salt and salted password)."""
    hash_name = MECHANISMS[mechanism]
    client_key = _hmac(hash_name, salted, b"Client Key")
    return ScramCredential(
        salt, hashlib.new(hash_name, client_key).digest(), _hmac(hash_name, salted, b"Server Key"), iterations
    )


def new_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}: {', '.join(MECHANISMS)}")
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be at least {MIN_ITERATIONS}")
    salt = os.urandom(32)
    return credential_from_salted_password(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `credential` was made from (for SASL/PLAIN)."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    derived = credential_from_salted_password(mechanism, salted, credential.salt, credential.iterations)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed SCRAM attribute {item!r}")
        out[key] = value
    return out


def _username(saslname: str) -> str:
    # RFC 5802: "," and "=" travel as "=2C" and "=3D"; any other "=" is malformed.
    out = saslname.replace("=2C", ",").replace("=3D", "=")
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed SCRAM username")
    return out


class ScramServer:
    """One server-side exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, credential_of: Callable[[str], ScramCredential | None]) -> None:
        self.mechanism = mechanism
        self._hash = MECHANISMS[mechanism]
        self._credential_of = credential_of
        self._state = "client-first"
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def evaluate(self, response: bytes) -> bytes:
        try:
            message = response.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM messages are UTF-8") from None
        if self._state == "client-first":
            return self._client_first(message)
        if self._state == "client-final":
            return self._client_final(message)
        raise ScramError("unexpected SCRAM message after the exchange completed")

    def _client_first(self, message: str) -> bytes:
        # gs2 header: "n,," or "n,a=authzid," (channel binding is not supported, as in Kafka).
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] != "n":
            raise ScramError("malformed SCRAM client-first message (channel binding is not supported)")
        authzid = parts[1]
        self._gs2_header = f"n,{authzid},"
        self._client_first_bare = parts[2]
        attrs = _attributes(self._client_first_bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("SCRAM client-first message without user name or nonce")
        self.username = _username(attrs["n"])
        if authzid and authzid != f"a={attrs['n']}":
            raise ScramError("authorization id differs from the user name")
        credential = self._credential_of(self.username)
        if credential is None:
            raise ScramError("Authentication failed: Invalid user credentials")
        self._credential = credential
        self._nonce = attrs["r"] + secrets.token_urlsafe(24)
        self._server_first = f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self._state = "client-final"
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        without_proof, sep, proof_attr = message.rpartition(",p=")
        if not sep:
            raise ScramError("SCRAM client-final message without proof")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce:
            raise ScramError("invalid SCRAM nonce")
        if attrs.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("invalid SCRAM channel binding")
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError:
            raise ScramError("malformed SCRAM proof") from None
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise ScramError("Authentication failed: Invalid user credentials")
        self._state = "complete"
        verifier = _hmac(self._hash, credential.server_key, auth_message)
        return f"v={base64.b64encode(verifier).decode()}".encode()


class ScramClient:
    """The client side, for the broker's own connections to other brokers."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._hash = MECHANISMS[mechanism]
        self._password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._client_first_bare = f"n={name},r={secrets.token_urlsafe(24)}"
        self._auth_message = b""
        self._salted = b""

    def first_message(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        attrs = _attributes(server_first.decode())
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), int(attrs.get("i", "0"))
        if not nonce.startswith(self._client_first_bare.split("r=", 1)[1]) or iterations < MIN_ITERATIONS:
            raise ScramError("invalid SCRAM server-first message")
        self._salted = salted_password(self.mechanism, self._password, base64.b64decode(salt), iterations)
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._client_first_bare},{server_first.decode()},{without_proof}".encode()
        client_key = _hmac(self._hash, self._salted, b"Client Key")
        signature = _hmac(self._hash, hashlib.new(self._hash, client_key).digest(), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature: the server knew our credential too."""
        attrs = _attributes(server_final.decode())
        expected = _hmac(self._hash, _hmac(self._hash, self._salted, b"Server Key"), self._auth_message)
        if "v" not in attrs or not hmac.compare_digest(base64.b64decode(attrs["v"]), expected):
            raise ScramError("the server's SCRAM signature does not match")
