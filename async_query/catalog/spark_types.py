"""Spark SQL types as a table's schema holds them, and the three ways the browse statements print
them: ``DESC``'s ``data_type`` (``simpleString``), the schema tree of SHOW TABLE EXTENDED's
``information`` (``treeString``), read from the two places a metastore keeps a schema: the JSON
Spark writes into a table's properties, and Hive's type strings.

Only what can be printed exactly as Spark prints it is accepted: anything else (user-defined
types, collated strings, interval types, a nested field whose name would need quoting) raises
:class:`UnrepresentableError`, and the statement goes to Spark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: Spark's ``spark.sql.debug.maxToStringFields``: a struct's simpleString shows at most this many fields.
MAX_TO_STRING_FIELDS = 25
#: The metadata key that keeps a char/varchar column's declared type (Spark stores it as string).
CHAR_VARCHAR_KEY = "__CHAR_VARCHAR_TYPE_STRING"
HIVE_TYPE_KEY = "HIVE_TYPE_STRING"


class UnrepresentableError(ValueError):
    """A schema the read model cannot print exactly as Spark does."""


@dataclass(frozen=True)
class Atomic:
    #: The JSON name (``integer``, ``long``, ``decimal(10,2)``, ``char(3)``...).
    name: str


@dataclass(frozen=True)
class Array:
    element: SparkType
    contains_null: bool = True


@dataclass(frozen=True)
class Map:
    key: SparkType
    value: SparkType
    value_contains_null: bool = True


@dataclass(frozen=True)
class Field:
    name: str
    type: SparkType
    nullable: bool = True
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def comment(self) -> str | None:
        comment = self.metadata.get("comment")
        return str(comment) if comment is not None else None


@dataclass(frozen=True)
class Struct:
    fields: tuple[Field, ...]


SparkType = Atomic | Array | Map | Struct

_SIMPLE_NAMES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint", "null": "void"}
_ATOMIC = re.compile(
    r"(string|boolean|byte|short|integer|long|float|double|date|timestamp|timestamp_ntz|binary|null|void"
    r"|decimal\(\d+,\s*-?\d+\)|char\(\d+\)|varchar\(\d+\))"
)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")


# -- reading ----------------------------------------------------------------------------------


def from_json(value: Any) -> SparkType:
    """A type from Spark's JSON form (``DataType.json``)."""
    if isinstance(value, str):
        name = value.replace(", ", ",")
        if not _ATOMIC.fullmatch(name):
            raise UnrepresentableError(f"type {value!r}")
        return Atomic("decimal(10,0)" if name == "decimal" else name)
    if not isinstance(value, dict):
        raise UnrepresentableError(f"type {value!r}")
    kind = value.get("type")
    if kind == "array":
        return Array(from_json(value["elementType"]), bool(value.get("containsNull", True)))
    if kind == "map":
        return Map(from_json(value["keyType"]), from_json(value["valueType"]), bool(value.get("valueContainsNull", True)))
    if kind == "struct":
        return struct_from_json(value)
    raise UnrepresentableError(f"type {kind!r}")


def struct_from_json(value: dict[str, Any]) -> Struct:
    fields = []
    for f in value.get("fields", []):
        metadata = dict(f.get("metadata") or {})
        data_type = from_json(f["type"])
        raw = metadata.get(CHAR_VARCHAR_KEY)
        if raw is not None:  # CharVarcharUtils.getRawSchema: the declared char/varchar type
            data_type = _raw_char_varchar(data_type, str(raw))
        fields.append(Field(str(f["name"]), data_type, bool(f.get("nullable", True)), metadata))
    return Struct(tuple(fields))


def _raw_char_varchar(data_type: SparkType, raw: str) -> SparkType:
    if isinstance(data_type, Atomic) and _ATOMIC.fullmatch(raw.replace(", ", ",")):
        return Atomic(raw)
    return parse_hive_type(raw)


_HIVE_ATOMIC = {
    "int": "integer",
    "integer": "integer",
    "bigint": "long",
    "smallint": "short",
    "tinyint": "byte",
    "string": "string",
    "boolean": "boolean",
    "float": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp",
    "binary": "binary",
    "void": "null",
}
_TOKEN = re.compile(r"\s*(<|>|,|:|\(|\)|[A-Za-z_][A-Za-z0-9_]*|\d+)")


def parse_hive_type(text: str) -> SparkType:
    """A Hive type string (``array<struct<a:int>>``, ``decimal(10,2)``) as Spark reads it."""
    tokens = [m.group(1) for m in _TOKEN.finditer(text)]
    if "".join(tokens) != re.sub(r"\s+", "", text):
        raise UnrepresentableError(f"hive type {text!r}")
    parsed, rest = _parse(tokens)
    if rest:
        raise UnrepresentableError(f"hive type {text!r}")
    return parsed


def _expect(tokens: list[str], token: str) -> list[str]:
    if not tokens or tokens[0] != token:
        raise UnrepresentableError(f"expected {token!r}")
    return tokens[1:]


def _parse(tokens: list[str]) -> tuple[SparkType, list[str]]:
    if not tokens:
        raise UnrepresentableError("empty type")
    word, rest = tokens[0].lower(), tokens[1:]
    if word == "array":
        element, rest = _parse(_expect(rest, "<"))
        return Array(element), _expect(rest, ">")
    if word == "map":
        key, rest = _parse(_expect(rest, "<"))
        value, rest = _parse(_expect(rest, ","))
        return Map(key, value), _expect(rest, ">")
    if word == "struct":
        return _parse_struct(_expect(rest, "<"))
    if word in ("decimal", "char", "varchar"):
        return _parse_sized(word, rest)
    if word in _HIVE_ATOMIC:
        return Atomic(_HIVE_ATOMIC[word]), rest
    raise UnrepresentableError(f"hive type {word!r}")


def _parse_struct(tokens: list[str]) -> tuple[SparkType, list[str]]:
    fields: list[Field] = []
    rest = tokens
    while rest and rest[0] != ">":
        name, rest = rest[0], rest[1:]
        data_type, rest = _parse(_expect(rest, ":"))
        fields.append(Field(name, data_type))
        if rest and rest[0] == ",":
            rest = rest[1:]
    return Struct(tuple(fields)), _expect(rest, ">")


def _parse_sized(word: str, rest: list[str]) -> tuple[SparkType, list[str]]:
    if not rest or rest[0] != "(":
        if word == "decimal":
            return Atomic("decimal(10,0)"), rest
        raise UnrepresentableError(f"{word} without a length")
    sizes = [rest[1]]
    rest = rest[2:]
    if rest and rest[0] == ",":
        sizes.append(rest[1])
        rest = rest[2:]
    return Atomic(f"{word}({','.join(sizes)})"), _expect(rest, ")")


def from_hive_column(name: str, hive_type: str, comment: str | None) -> Field:
    """A Hive column as Spark reads it (``HiveClientImpl.fromHiveColumn``): a char/varchar keeps its
    declared type; a type Spark writes otherwise keeps the Hive text in its metadata."""
    data_type = parse_hive_type(hive_type)
    metadata: dict[str, Any] = {}
    if comment is not None:
        metadata["comment"] = comment
    return Field(name, data_type, True, metadata)


# -- printing ---------------------------------------------------------------------------------


def _string_for_char_varchar(name: str) -> str:
    return "string" if name.startswith(("char(", "varchar(")) else name


def simple_string(data_type: SparkType) -> str:
    """``DataType.simpleString`` (DESC's ``data_type``)."""
    if isinstance(data_type, Atomic):
        return _SIMPLE_NAMES.get(data_type.name, data_type.name)
    if isinstance(data_type, Array):
        return f"array<{simple_string(data_type.element)}>"
    if isinstance(data_type, Map):
        return f"map<{simple_string(data_type.key)},{simple_string(data_type.value)}>"
    parts = []
    for f in data_type.fields:
        if not _PLAIN_NAME.fullmatch(f.name):
            raise UnrepresentableError(f"nested field name {f.name!r}")
        parts.append(f"{f.name}:{simple_string(f.type)}")
    return _truncated(parts)


def _truncated(parts: list[str]) -> str:
    """Spark's ``truncatedString`` of a struct's fields."""
    if len(parts) > MAX_TO_STRING_FIELDS:
        shown = max(0, MAX_TO_STRING_FIELDS - 1)
        return "struct<" + ",".join(parts[:shown]) + "," + f"... {len(parts) - shown} more fields>"
    return "struct<" + ",".join(parts) + ">"


def _type_name(data_type: SparkType) -> str:
    """``DataType.typeName`` of a schema whose char/varchar types were made strings."""
    if isinstance(data_type, Atomic):
        return _string_for_char_varchar(data_type.name)
    return {Array: "array", Map: "map", Struct: "struct"}[type(data_type)]


def tree_string(schema: Struct) -> str:
    """``StructType.treeString`` of a table's schema as SHOW TABLE EXTENDED prints it (char and
    varchar columns read as strings)."""
    lines = ["root"]
    for f in schema.fields:
        _tree_field(lines, " |", f.name, f.type, f"(nullable = {_bool(f.nullable)})")
    return "\n".join(lines) + "\n"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _tree_field(lines: list[str], prefix: str, name: str, data_type: SparkType, suffix: str) -> None:
    head = f"{prefix}-- {name}: {_type_name(data_type)}"
    lines.append(f"{head} {suffix}" if suffix else head)
    _tree_children(lines, prefix + "    |", data_type)


def _tree_children(lines: list[str], prefix: str, data_type: SparkType) -> None:
    if isinstance(data_type, Struct):
        for f in data_type.fields:
            _tree_field(lines, prefix, f.name, f.type, f"(nullable = {_bool(f.nullable)})")
    elif isinstance(data_type, Array):
        _tree_field(lines, prefix, "element", data_type.element, f"(containsNull = {_bool(data_type.contains_null)})")
    elif isinstance(data_type, Map):
        _tree_field(lines, prefix, "key", data_type.key, "")
        _tree_field(lines, prefix, "value", data_type.value, f"(valueContainsNull = {_bool(data_type.value_contains_null)})")
