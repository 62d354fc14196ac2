#!/usr/bin/env python3
"""Generate platform/loglake/protocol/messages.py from Kafka's JSON message definitions.

    python scripts/gen_protocol.py [SPEC_DIR] [--check]

SPEC_DIR defaults to ../shared/kafka-message-specs beside the repository (Apache Kafka's
clients/src/main/resources/common/message/). Messages the reference set lacks are defined
in scripts/protocol_specs/ (our own definitions in the same JSON shape), always read too. The output is plain data: one dict per
message, one dict per field, with the spec's version strings kept as Kafka writes them
("0+", "3-7", "none") and field names converted to snake_case (the keys of decoded
messages). `--check` exits 1 if the checked-in module differs from what would be written.

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
            head = {"name": snake_case(f["name"])}
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
    paths = [*spec_dir.glob("*.json"), *EXTRA_SPECS.glob("*.json")]
    specs = sorted((load_spec(p) for p in paths), key=lambda s: (s.get("apiKey", -1), s["name"]))
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec_dir", nargs="?", type=Path, default=DEFAULT_SPECS)
    ap.add_argument("--check", action="store_true", help="fail if the checked-in module is out of date")
    args = ap.parse_args()
    text = generate(args.spec_dir)
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT} is out of date: run scripts/gen_protocol.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
