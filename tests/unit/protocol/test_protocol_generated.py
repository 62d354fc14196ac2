"""The checked-in messages.py is what scripts/gen_protocol.py makes of Kafka's specs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from loglake.protocol import messages

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
