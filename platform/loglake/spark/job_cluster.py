"""How the jobs of `jobs/` reach the cluster, secured with the options of Spark's Kafka
source: `kafka.security.protocol`, `kafka.sasl.mechanism`, `kafka.sasl.jaas.config`,
`kafka.ssl.truststore.location`, `kafka.ssl.keystore.location`, `kafka.ssl.key.password`,
`kafka.ssl.endpoint.identification.algorithm` (and the `kafka.ssl.*.type`s, PEM).

Every job takes them the same way, besides its `--bootstrap-servers`:

    --option kafka.security.protocol=SASL_SSL     (repeatable)
    --options-file /etc/loglake/job.properties    (key=value lines of the same names)

The file keeps a password off the command line, where every user of the host can read it;
an `--option` wins over the file. The job hands the options to everything it connects
with: the `loglake` source and sink (as their own options), its protocol client (metadata,
configs, group offsets) and its HTTP client of the brokers' HTTP API (compaction plans,
tiered offsets). Over HTTP, the truststore verifies `https://` brokers, the keystore is the
client certificate, and the SASL user authenticates with HTTP Basic (the HTTP API checks
the same SCRAM credentials); Basic credentials travel over `https://` only, unless the
Kafka listeners are SASL_PLAINTEXT too, so that a job of a TLS-protected cluster never
sends its password in the clear.
"""

from __future__ import annotations

import argparse
import base64
import ssl
from collections.abc import Generator
from dataclasses import dataclass
from typing import Self

import httpx

from loglake.config import load_properties, parse_overrides
from loglake.security.client import SECURITY_PROPERTIES, client_security, tls_client_context
from loglake.security.listeners import SecurityProtocol
from loglake.spark.options import OptionError, security_options
from loglake.spark.protocol_client import ProtocolClient

# What --option and --options-file take: Spark's Kafka source's security option names.
JOB_OPTIONS = tuple(f"kafka.{name}" for name in SECURITY_PROPERTIES)


@dataclass(frozen=True)
class ClusterAccess:
    """The bootstrap servers and the security options (Kafka client properties, picklable)."""

    bootstrap_servers: str
    security: tuple[tuple[str, str], ...] = ()

    def source_options(self) -> dict[str, str]:
        """The `loglake` source's and sink's options: kafka.bootstrap.servers and security."""
        return {"kafka.bootstrap.servers": self.bootstrap_servers} | {f"kafka.{k}": v for k, v in self.security}

    def client(self, client_id: str = "loglake-spark") -> ProtocolClient:
        return ProtocolClient(
            self.bootstrap_servers, client_id=client_id, security=client_security(dict(self.security))
        )

    def http_client(self, timeout_s: float = 30.0) -> httpx.Client:
        """An HTTP client of the brokers' HTTP API with the same TLS and credentials."""
        props = dict(self.security)
        security = client_security(props)
        verify: ssl.SSLContext | bool = True
        if security.tls is not None:
            verify = security.tls
        elif props.get("ssl.truststore.location") or props.get("ssl.keystore.location"):
            verify = tls_client_context(props)  # HTTPS to brokers reached over plaintext Kafka
        auth = None
        if security.mechanism is not None:
            plaintext = SecurityProtocol(props["security.protocol"].strip().upper()) == SecurityProtocol.SASL_PLAINTEXT
            auth = _BasicAuth(security.username, security.password, over_http=plaintext)
        return httpx.Client(verify=verify, auth=auth, timeout=timeout_s)

    def connect(self, client_id: str) -> Cluster:
        return Cluster(self, self.client(client_id), self.http_client())


@dataclass
class Cluster:
    """A job's open connections: its protocol client and its HTTP client."""

    access: ClusterAccess
    client: ProtocolClient
    http: httpx.Client

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.http.close()


class _BasicAuth(httpx.Auth):
    """HTTP Basic with the SASL user's credentials; over plain http only if `over_http`."""

    def __init__(self, username: str, password: str, over_http: bool) -> None:
        self._header = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        self._over_http = over_http

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if request.url.scheme == "https" or self._over_http:
            request.headers["Authorization"] = self._header
        yield request


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """--option and --options-file (the job defines its own --bootstrap-servers)."""
    group = parser.add_argument_group(
        "security", "Spark's Kafka source options, for every connection of the job: " + ", ".join(JOB_OPTIONS)
    )
    group.add_argument(
        "--option", action="append", default=[], metavar="kafka.NAME=VALUE", help="a security option (repeatable)"
    )
    group.add_argument(
        "--options-file",
        metavar="PATH",
        help="key=value lines of security options (keeps passwords off the command line)",
    )


def cluster_access(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ClusterAccess:
    """The parsed --bootstrap-servers, --option and --options-file; a mistake is the
    parser's error (exit 2), before anything connects."""
    try:
        options = load_properties(args.options_file) if args.options_file else {}
        options |= parse_overrides(args.option)
    except (OSError, ValueError) as exc:
        parser.error(f"--option / --options-file: {exc}")
    unknown = sorted(name for name in options if name.lower() not in JOB_OPTIONS)
    if unknown:
        parser.error(f"{unknown[0]}: the jobs take the options {', '.join(JOB_OPTIONS)}")
    try:
        security = security_options(options)
    except OptionError as exc:
        parser.error(str(exc))
    return ClusterAccess(args.bootstrap_servers or "", security)
