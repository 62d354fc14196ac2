#!/usr/bin/env python3
"""Generate platform/loglake/protocol/messages.py and bodies.py from Kafka's JSON message definitions.

    python scripts/gen_protocol.py [SPEC_DIR] [--check]

SPEC_DIR defaults to ../shared/kafka-message-specs beside the repository (Apache Kafka's
clients/src/main/resources/common/message/). Messages the reference set lacks are defined
in scripts/protocol_specs/ (our own definitions in the same JSON shape), always read too. The output is plain data: one dict per
message, one dict per field, with the spec's version strings kept as Kafka writes them
("0+", "3-7", "none") and field names converted to snake_case (the keys of decoded
messages). `--check` exits 1 if a checked-in module differs from what would be written.

bodies.py holds the same messages as TypedDicts, one per request and response body
(`ProduceRequest`, `ProduceResponse`) and one per nested struct, named after its message
(`ProduceRequestTopicProduceData`). A field is required only where every valid version of
its struct carries it untagged: decoded bodies hold every key (defaults filled in), but a
body being built may leave out fields that are tagged or absent from some versions, which
encode as their defaults.

Dropped from the specs because nothing on the wire depends on them: "about",
"entityType", "mapKey", "ignorable", "zeroCopy", "listeners", "deprecatedVersions".
"commonStructs" are inlined as module-level tuples and referenced where used.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPECS = ROOT.parent / "shared" / "kafka-message-specs"
EXTRA_SPECS = ROOT / "scripts" / "protocol_specs"
OUT = ROOT / "platform" / "loglake" / "protocol" / "messages.py"
BODIES = ROOT / "platform" / "loglake" / "protocol" / "bodies.py"

INT_TYPES = {"int8", "int16", "uint16", "int32", "uint32", "int64"}
FIELD_KEYS = ("type", "versions", "nullableVersions", "tag", "taggedVersions", "flexibleVersions")
LINE = 118


def snake_case(name: str) -> str:
    # Kafka's field names are CamelCase without runs of capitals (bar isKRaftController);
    # this is the same rule kafka-python uses, so both libraries agree on the keys.
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def const_name(name: str) -> str:
    return snake_case(name).upper()


def load_spec(path: Path) -> dict:
    # The specs are JSON plus whole-line // comments.
    return json.loads(re.sub(r"(?m)^\s*//.*$", "", path.read_text()))


def load_specs(spec_dir: Path) -> list[dict]:
    """Kafka's specs and ours, by API key then name."""
    paths = [*spec_dir.glob("*.json"), *EXTRA_SPECS.glob("*.json")]
    return sorted((load_spec(p) for p in paths), key=lambda s: (s.get("apiKey", -1), s["name"]))


def parse_default(field: dict) -> object:
    raw = field["default"]
    ftype = field["type"]
    if isinstance(raw, str) and raw == "null":
        return None
    if ftype in INT_TYPES:
        return int(raw, 0) if isinstance(raw, str) else int(raw)
    if ftype == "bool":
        return raw if isinstance(raw, bool) else {"true": True, "false": False}[raw]
    if ftype == "float64":
        return float(raw)
    if ftype == "string":
        return raw
    raise ValueError(f"unsupported default {raw!r} for {field['name']} ({ftype})")


def struct_name(ftype: str) -> str | None:
    inner = ftype.removeprefix("[]")
    return inner if inner[:1].isupper() else None


class Writer:
    def __init__(self, common: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.common = common  # struct type name -> module-level constant holding its fields

    def fields(self, fields: list[dict], indent: int) -> None:
        pad = " " * indent
        for f in fields:
            head: dict[str, object] = {"name": snake_case(f["name"])}
            head.update((k, f[k]) for k in FIELD_KEYS if k in f)
            if "default" in f:
                head["default"] = parse_default(f)
            items = [f"{json.dumps(k)}: {py(v)}" for k, v in head.items()]
            sname = struct_name(f["type"])
            if "fields" in f:
                self.wrap(pad, items + ['"fields": ('])
                self.fields(f["fields"], indent + 4)
                self.lines.append(f"{pad})}},")
            elif sname is not None:
                self.wrap(pad, items + [f'"fields": {self.common[sname]}}},'])
            else:
                self.wrap(pad, items[:-1] + [items[-1] + "},"])

    def wrap(self, pad: str, items: list[str]) -> None:
        # One field per line, continued (indented) where it would pass the line limit.
        line = pad + "{" + items[0]
        for item in items[1:]:
            sep = "" if line.endswith("(") else ", "
            if len(line) + len(sep) + len(item) >= LINE:
                self.lines.append(line + ",")
                line = pad + "    " + item
            else:
                line += sep + item
        self.lines.append(line)


def py(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def common_order(structs: list[dict]) -> list[dict]:
    # A common struct may use another: emit dependencies first.
    by_name = {s["name"]: s for s in structs}
    done: list[dict] = []

    def visit(s: dict) -> None:
        if s in done:
            return
        for f in s["fields"]:
            dep = struct_name(f["type"])
            if dep in by_name and "fields" not in f:
                visit(by_name[dep])
        done.append(s)

    for s in structs:
        visit(s)
    return done


def generate(spec_dir: Path) -> str:
    specs = load_specs(spec_dir)
    out = [
        '"""Kafka protocol message definitions, generated by scripts/gen_protocol.py from Kafka\'s JSON specs.',
        "",
        "Do not edit: regenerate. Field names are Kafka's, in snake_case; versions are Kafka's strings.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from enum import IntEnum",
        "",
    ]
    api_keys: dict[int, str] = {}
    seen_common: set[str] = set()
    writers = {spec["name"]: Writer({}) for spec in specs}
    for spec in specs:
        body = writers[spec["name"]]
        for common in common_order(spec.get("commonStructs", [])):
            const = f"_{const_name(common['name'])}"
            if const in seen_common:
                raise ValueError(f"common struct {common['name']} defined twice")
            seen_common.add(const)
            body.common[common["name"]] = const
            out.append(f"{const} = (")
            body.lines = []
            body.fields(common["fields"], 4)
            out += body.lines + [")", ""]
    out.append("MESSAGES: dict[str, dict] = {")
    for spec in specs:
        head = {k: spec[k] for k in ("apiKey", "type", "validVersions", "flexibleVersions") if k in spec}
        out.append(f'    "{spec["name"]}": {{')
        out.append("        " + ", ".join(f"{json.dumps(k)}: {py(v)}" for k, v in head.items()) + ",")
        out.append('        "fields": (')
        body = writers[spec["name"]]
        body.lines = []
        body.fields(spec["fields"], 12)
        out += body.lines
        out.append("        ),")
        out.append("    },")
        if "apiKey" in spec:
            api_keys[spec["apiKey"]] = const_name(re.sub(r"(Request|Response)$", "", spec["name"]))
    out.append("}")
    out += ["", "", "class ApiKey(IntEnum):"]
    out += [f"    {name} = {key}" for key, name in sorted(api_keys.items())]
    return "\n".join(out) + "\n"


def _range(spec: str | None) -> tuple[int, int] | None:
    # Kafka's version strings: "3+", "0-7", "5", "none".
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 1 << 15
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


def _overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    if a is None or b is None or max(a[0], b[0]) > min(a[1], b[1]):
        return None
    return max(a[0], b[0]), min(a[1], b[1])


_PY_TYPES = {
    **dict.fromkeys(INT_TYPES, "int"),
    "float64": "float",
    "bool": "bool",
    "string": "str",
    # Decoded bytes are bytes; a body being encoded may hold any bytes-like value.
    "bytes": "Buffer",
    "uuid": "UUID",
    # Decoded records are a memoryview of the frame; a response may hand a RecordsRef (sent from disk).
    "records": "Buffer | RecordsRef",
}


class TypedDictWriter:
    """The TypedDicts of one message: its nested structs first, the message's own class last."""

    def __init__(self, message: str, common: dict[str, list[dict]], valid: tuple[int, int] | None) -> None:
        self.message = message
        self.common = common  # common struct name -> its fields
        self.valid = valid  # the message's valid versions
        self.classes: list[str] = []

    def struct(self, name: str, fields: list[dict], valid: tuple[int, int] | None) -> None:
        # `valid`: the versions in which this struct is on the wire at all.
        rows = []
        for f in fields:
            key = snake_case(f["name"])
            present = _overlap(_range(f["versions"]), valid)
            if present is None:
                continue  # a field of no valid version (e.g. "none")
            rtype = self.field_type(f, present)
            nullable = _overlap(_range(f.get("nullableVersions")), present) is not None
            if nullable:
                rtype += " | None"
            required = present == valid and "taggedVersions" not in f and "tag" not in f
            rows.append(f"    {key}: {rtype if required else f'NotRequired[{rtype}]'}")
        cls = [f"class {name}(TypedDict):"] + (rows or ["    pass"])
        self.classes.append("\n".join(cls))

    def field_type(self, f: dict, present: tuple[int, int]) -> str:
        ftype = f["type"]
        is_array = ftype.startswith("[]")
        inner = ftype.removeprefix("[]")
        sname = struct_name(ftype)
        if sname is not None:
            cls = f"{self.message}{sname}"
            if not any(c.startswith(f"class {cls}(") for c in self.classes):
                # A common struct may be used in several places, each in its own versions: one
                # class for all of them, its fields required only where every valid version has them.
                if "fields" in f:
                    self.struct(cls, f["fields"], present)
                else:
                    self.struct(cls, self.common[sname], self.valid)
            py_type = cls
        else:
            py_type = _PY_TYPES[inner]
        if is_array:
            # Arrays decode to lists.
            return f"list[{py_type}]"
        return py_type


def generate_bodies(spec_dir: Path) -> str:
    specs = load_specs(spec_dir)
    out = [
        '"""Kafka request and response bodies as TypedDicts, generated by scripts/gen_protocol.py.',
        "",
        "Do not edit: regenerate. One class per message (`ProduceRequest`) and per nested struct",
        "(`ProduceRequestTopicProduceData`); keys are the snake_case names of messages.py. A key is",
        "NotRequired where the field is tagged or absent from some of the message's valid versions.",
        '"""',
        "",
        # Annotations evaluated (no `from __future__ import annotations`): a class's
        # __required_keys__ and __optional_keys__ are then right at run time. Structs come first.
        "from typing import NotRequired, TypedDict",
        "from uuid import UUID",
        "",
        "from loglake.protocol.types import Buffer, RecordsRef",
        "",
        "__all__ = [",
    ]
    names: list[str] = []
    classes: list[str] = []
    # A message defined both in Kafka's set and ours: the later (ours) wins, as in MESSAGES.
    for spec in {s["name"]: s for s in specs}.values():
        if spec["type"] not in ("request", "response"):
            continue
        valid = _range(spec["validVersions"])
        writer = TypedDictWriter(spec["name"], {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}, valid)
        writer.struct(spec["name"], spec["fields"], valid)
        # The message's own class is the last one written; keep it after the structs it uses.
        classes += writer.classes
        names.append(spec["name"])
    out += [f'    "{n}",' for n in sorted(names)] + ["]", ""]
    for cls in classes:
        out += ["", cls, ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec_dir", nargs="?", type=Path, default=DEFAULT_SPECS)
    ap.add_argument("--check", action="store_true", help="fail if the checked-in module is out of date")
    args = ap.parse_args()
    outputs = {OUT: generate(args.spec_dir), BODIES: generate_bodies(args.spec_dir)}
    if args.check:
        stale = [path for path, text in outputs.items() if path.read_text() != text]
        for path in stale:
            print(f"{path} is out of date: run scripts/gen_protocol.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
