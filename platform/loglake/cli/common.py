"""What every command group shares: the broker's HTTP API, errors, and printing tables and JSON."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import httpx
import orjson

DEFAULT_HTTP = os.environ.get("LOGLAKE_HTTP", "http://127.0.0.1:8082")


class CliError(Exception):
    pass


def command_group(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """`loglake <name>`, whose commands are `loglake <name> <action>`."""
    return subparsers.add_parser(name, help=help).add_subparsers(dest="action", required=True)


def http_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    func: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """A command that talks to a broker's HTTP API (`--bootstrap-http`) and runs `func`."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("--bootstrap-http", default=DEFAULT_HTTP, help=f"broker HTTP address (default {DEFAULT_HTTP})")
    p.set_defaults(func=func)
    return p


def client(args: argparse.Namespace) -> httpx.Client:
    return http_client(args.bootstrap_http, 60)


def http_client(base_url: str, timeout: float) -> httpx.Client:
    """A broker's HTTP API; with LOGLAKE_HTTP_USER / LOGLAKE_HTTP_PASSWORD set, as that user
    (http.authentication.method=BASIC), LOGLAKE_HTTP_CA naming the CA bundle of https://."""
    user = os.environ.get("LOGLAKE_HTTP_USER")
    auth = (user, os.environ.get("LOGLAKE_HTTP_PASSWORD", "")) if user else None
    return httpx.Client(base_url=base_url, timeout=timeout, auth=auth, verify=os.environ.get("LOGLAKE_HTTP_CA", True))


def check(resp: httpx.Response) -> Any:
    if resp.status_code >= 400:
        try:
            message = resp.json().get("message", resp.text)
        except ValueError:
            message = resp.text
        raise CliError(f"{resp.status_code}: {message}")
    return resp.json() if resp.content else None


def broker_urls(c: httpx.Client) -> dict[int, str]:
    """Each live broker's HTTP address."""
    return {b["broker_id"]: b["http"] for b in check(c.get("/cluster"))["brokers"]}


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(text.ljust(w) for text, w in zip(r, widths)).rstrip())


def cell(value: Any) -> str:
    return "-" if value is None else str(value)


def print_json(doc: Any) -> None:
    print(orjson.dumps(doc).decode())
