"""User and client-id names in store paths, as Kafka writes them (its `Sanitizer`): the
URL encoding of the UTF-8 name with `*` as %2A and a space as %20 (so `/`, `.` and any
other character are safe in a ZooKeeper path), and back on read. `<default>`, the default
entity, is written as it is."""

from __future__ import annotations

from urllib.parse import quote, unquote

DEFAULT = "<default>"


def sanitize(name: str) -> str:
    if name == DEFAULT:
        return name
    # Java's URLEncoder leaves only [A-Za-z0-9.-*_] as they are; quote() also keeps "~".
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return name if name == DEFAULT else unquote(name)
