"""Typed config definitions, as Kafka's ConfigDef: a name, a type, a default, a rule, a doc.

Values travel as strings (server.properties, the protocol, the metadata store); `ConfigKey.parse`
turns one into its typed value or raises `ConfigValueError` with Kafka's wording
("Invalid value X for configuration N: rule"), which the callers turn into INVALID_CONFIG.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class ConfigType(IntEnum):
    """DescribeConfigs' config_type values."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs' config_source values, in Kafka's numbering."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigValueError(ValueError):
    """A value that does not parse or breaks its config's rule (Kafka's ConfigException)."""


def _integer(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if not lo <= value <= hi:
            raise ValueError(value)
        return value

    return parse


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


def split_list(text: str) -> list[str]:
    """A LIST config's items, as Kafka splits them (commas, surrounding blanks dropped)."""
    return [item.strip() for item in text.split(",") if item.strip()]


_PARSERS: dict[ConfigType, Callable[[str], Any]] = {
    ConfigType.BOOLEAN: _boolean,
    ConfigType.STRING: lambda text: text.strip(),
    ConfigType.INT: _integer(INT_MIN, INT_MAX),
    ConfigType.SHORT: _integer(-(2**15), 2**15 - 1),
    ConfigType.LONG: _integer(LONG_MIN, LONG_MAX),
    ConfigType.DOUBLE: lambda text: float(text.strip()),
    ConfigType.LIST: split_list,
    ConfigType.CLASS: lambda text: text.strip(),
    ConfigType.PASSWORD: lambda text: text,
}

# A rule gets the typed value and returns why it is wrong, or None.
Rule = Callable[[Any], "str | None"]


def at_least(minimum: float) -> Rule:
    return lambda v: None if v >= minimum else f"Value must be at least {minimum}"


def between(lo: float, hi: float) -> Rule:
    return lambda v: None if lo <= v <= hi else f"Value must be no less than {lo} and no more than {hi}"


def one_of(*choices: str) -> Rule:
    return lambda v: None if v in choices else f"String must be one of: {', '.join(choices)}"


def items_of(*choices: str) -> Rule:
    def rule(items: list[str]) -> str | None:
        if not items:
            return "Empty list is not allowed"
        bad = [i for i in items if i not in choices]
        return f"Invalid value {bad[0]}: each item must be one of: {', '.join(choices)}" if bad else None

    return rule


@dataclass(frozen=True)
class ConfigKey:
    """One config's definition. `default` is the typed value (None: no default)."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    rule: Rule | None = None

    def parse(self, text: str) -> Any:
        try:
            value = _PARSERS[self.type](text)
        except ValueError:
            expected = (
                "Expected value to be either true or false"
                if self.type == ConfigType.BOOLEAN
                else f"Not a number of type {self.type.name}"
            )
            raise ConfigValueError(f"Invalid value {text} for configuration {self.name}: {expected}") from None
        problem = self.rule(value) if self.rule is not None else None
        if problem is not None:
            raise ConfigValueError(f"Invalid value {text} for configuration {self.name}: {problem}")
        return value

    @property
    def sensitive(self) -> bool:
        return self.type == ConfigType.PASSWORD


def to_config_string(value: Any) -> str | None:
    """A typed value as Kafka prints it in DescribeConfigs (lists comma-joined, booleans lower case)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)
