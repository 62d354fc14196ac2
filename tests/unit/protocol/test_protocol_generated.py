"""The checked-in messages.py and bodies.py are what scripts/gen_protocol.py makes of Kafka's specs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from loglake.protocol import bodies, messages

ROOT = Path(__file__).resolve().parents[3]
SPECS = ROOT.parent / "shared" / "kafka-message-specs"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_protocol", ROOT / "scripts" / "gen_protocol.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not SPECS.is_dir(), reason="Kafka's JSON specs are not beside the repository")
def test_messages_module_is_up_to_date() -> None:
    assert _generator().generate(SPECS) == Path(messages.__file__).read_text()


@pytest.mark.skipif(not SPECS.is_dir(), reason="Kafka's JSON specs are not beside the repository")
def test_bodies_module_is_up_to_date() -> None:
    assert _generator().generate_bodies(SPECS) == Path(bodies.__file__).read_text()


def _keys(fields: tuple[dict, ...]) -> set[str]:
    return {f["name"] for f in fields if f["versions"] != "none"}


def test_every_body_has_a_typeddict_with_its_fields() -> None:
    for name, spec in messages.MESSAGES.items():
        if spec["type"] not in ("request", "response"):
            continue
        body = getattr(bodies, name)
        assert set(body.__annotations__) == _keys(spec["fields"]), name
        # A field every version carries is required; tagged ones never are.
        for f in spec["fields"]:
            if "taggedVersions" in f:
                assert f["name"] in body.__optional_keys__, (name, f["name"])
            elif f["versions"] == "0+" and spec["validVersions"].startswith("0"):
                assert f["name"] in body.__required_keys__, (name, f["name"])


def test_snake_case_names() -> None:
    gen = _generator()
    assert gen.snake_case("PartitionIndex") == "partition_index"
    assert gen.snake_case("isKRaftController") == "is_k_raft_controller"  # as kafka-python names it


def test_api_keys_match_the_messages() -> None:
    keys = {spec["apiKey"] for spec in messages.MESSAGES.values() if "apiKey" in spec}
    assert keys == {int(k) for k in messages.ApiKey}
    for name, spec in messages.MESSAGES.items():
        if "apiKey" in spec:
            assert name.endswith(spec["type"].capitalize())
