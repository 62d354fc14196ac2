"""Certificates for the security tests and benchmarks, made with the openssl command line: a CA, a
server certificate for 127.0.0.1/localhost, client certificates, and a CA nobody trusts."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key.name, "-out", cert.name,
             "-days", "2", "-subj", f"/CN={name}", cwd=directory)  # fmt: skip
    return key, cert


def _signed(directory: Path, name: str, subject: str, ca: tuple[Path, Path], server: bool) -> Path:
    """`name`.pem: the certificate signed by `ca`, then its private key (a PEM keystore)."""
    key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.crt"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key.name, "-out", csr.name, "-subj", subject,
             cwd=directory)  # fmt: skip
    extensions = directory / f"{name}.ext"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        if server
        else "extendedKeyUsage=clientAuth\n"
    )
    _openssl("x509", "-req", "-in", csr.name, "-CA", str(ca[1]), "-CAkey", str(ca[0]), "-CAcreateserial",
             "-out", cert.name, "-days", "2", "-extfile", extensions.name, cwd=directory)  # fmt: skip
    bundle = directory / f"{name}.pem"
    bundle.write_text(cert.read_text() + key.read_text())
    return bundle


@dataclass(frozen=True)
class Pki:
    ca: Path  # the trusted CA's certificate
    server: Path  # the broker's keystore (certificate + key)
    client: Path  # a client certificate + key signed by the CA: CN=alice,OU=eng,O=loglake
    client_cert: Path
    client_key: Path
    stranger: Path  # certificate + key signed by a CA nobody trusts
    stranger_cert: Path
    stranger_key: Path


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    server = _signed(directory, "server", "/CN=localhost", ca, server=True)
    client = _signed(directory, "alice", "/O=loglake/OU=eng/CN=alice", ca, server=False)
    rogue = _ca(directory, "rogue-ca")
    stranger = _signed(directory, "mallory", "/CN=mallory", rogue, server=False)
    return Pki(
        ca[1],
        server,
        client,
        directory / "alice.crt",
        directory / "alice.key",
        stranger,
        directory / "mallory.crt",
        directory / "mallory.key",
    )
