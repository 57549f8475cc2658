"""Turning Spark rows into result documents.

Two encodings are written side by side:

- the reference's (``result``/``schema`` string lists), so the reference plugin can read results;
- a lossless one (``lossless``): the schema, and the rows as JSON text written here with exact
  decimals, longs and floats, binary as base64, dates and timestamps as text.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import struct
from decimal import Decimal
from typing import Any

from pyspark.sql import types as spark_types

from query_core.models import ColumnSchema, LosslessResult

#: Spark type name -> the reference's schema type name, where they differ.
_TYPE_NAMES = {"timestamp_ntz": "timestamp", "void": "null"}


def type_name(data_type: spark_types.DataType) -> str:
    name = data_type.typeName()
    return _TYPE_NAMES.get(name, name)


def to_json_value(value: Any, data_type: spark_types.DataType) -> Any:
    """A Python value from ``collect()`` as a value for :func:`dumps`, guided by its Spark type."""
    if value is None:
        return None
    if isinstance(data_type, spark_types.StructType):
        return {f.name: to_json_value(value[i], f.dataType) for i, f in enumerate(data_type.fields)}
    if isinstance(data_type, spark_types.ArrayType):
        return [to_json_value(v, data_type.elementType) for v in value]
    if isinstance(data_type, spark_types.MapType):
        return {_map_key(k, data_type.keyType): to_json_value(v, data_type.valueType) for k, v in value.items()}
    if isinstance(data_type, spark_types.FloatType):
        return _Float32(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.datetime):
        return _timestamp_text(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    return value


def _map_key(key: Any, key_type: spark_types.DataType) -> str:
    converted = to_json_value(key, key_type)
    return converted if isinstance(converted, str) else dumps(converted)


def _timestamp_text(value: dt.datetime) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text


class _Float32(float):
    """A FloatType value: printed with the fewest digits that read back as the same float32."""

    def text(self) -> str:
        if not math.isfinite(self):
            return _non_finite(self)
        packed = struct.pack("<f", self)
        for digits in range(1, 10):
            candidate = float(f"{self:.{digits}g}")
            try:
                same = struct.pack("<f", candidate) == packed
            except OverflowError:  # rounded above the largest float32 (near 3.4e38)
                continue
            if same:
                # repr() of the double keeps those digits (no shorter text names the same
                # double) and prints them as Python does: "100.0", not "1e+02".
                return repr(candidate)
        return repr(float(self))


def _non_finite(value: float) -> str:
    return json.dumps("NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity"))


def dumps(value: Any) -> str:
    """JSON text of a converted value; decimals and integers are written digit for digit."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, _Float32):
        return value.text()
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else _non_finite(value)
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__}")


def encode(schema: spark_types.StructType, rows: list[Any]) -> tuple[list[str], list[str], LosslessResult]:
    """The reference's ``result`` and ``schema`` lists and the lossless form, for one result."""
    fields = schema.fields
    converted = [[to_json_value(row[i], f.dataType) for i, f in enumerate(fields)] for row in rows]
    reference_rows = [
        "{"
        + ",".join(
            f"{json.dumps(f.name, ensure_ascii=False)}:{dumps(v)}"
            for f, v in zip(fields, row, strict=True)
            if v is not None
        )
        + "}"
        for row in converted
    ]
    result = [r.replace('"', "'") for r in reference_rows]
    reference_schema = [f"{{'column_name':'{f.name}','data_type':'{f.dataType.typeName()}'}}" for f in fields]
    lossless = LosslessResult(
        schema=[ColumnSchema(name=f.name, type=type_name(f.dataType)) for f in fields],
        datarows="[" + ",".join("[" + ",".join(dumps(v) for v in row) + "]" for row in converted) + "]",
        total=len(converted),
    )
    return result, reference_schema, lossless
