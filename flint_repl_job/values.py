"""Spark values as JSON: the one encoder of the job, for results and for documents it indexes.

Both follow the same rules (``docs/results.md``): decimals and longs digit for digit, float32
values with the fewest digits that read back as the same float32, binary as base64, dates as
``YYYY-MM-DD``, intervals as text, structs as objects, arrays as lists, maps as objects whose keys
are text (a key that is not a string is its JSON text). They differ in one thing only, which is
why :class:`Timestamps` exists: a result shows a timestamp as the reference's results do
(``2024-01-02 03:04:05.6``), while an index's ``date`` field needs ISO 8601
(``2024-01-02T03:04:05.600000Z``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import struct
from decimal import Decimal
from enum import Enum
from typing import Any

from pyspark.sql import types as spark_types


class Timestamps(Enum):
    """How timestamps are written."""

    #: As results show them, the reference's way (session time zone, no offset).
    RESULT = "result"
    #: ISO 8601 in UTC, as an index's ``date`` field takes them.
    INDEX = "index"


def to_json_value(value: Any, data_type: spark_types.DataType, timestamps: Timestamps = Timestamps.RESULT) -> Any:
    """A Python value from ``collect()`` as a JSON value, guided by its Spark type (:func:`dumps`
    writes it digit for digit; ``json.dumps`` writes it too, decimals excepted)."""
    if value is None:
        return None
    if isinstance(data_type, spark_types.StructType):
        return {f.name: to_json_value(value[i], f.dataType, timestamps) for i, f in enumerate(data_type.fields)}
    if isinstance(data_type, spark_types.ArrayType):
        return [to_json_value(v, data_type.elementType, timestamps) for v in value]
    if isinstance(data_type, spark_types.MapType):
        return {
            _map_key(k, data_type.keyType, timestamps): to_json_value(v, data_type.valueType, timestamps)
            for k, v in value.items()
        }
    if isinstance(data_type, spark_types.FloatType):
        return _Float32(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.datetime):
        return _timestamp_text(value) if timestamps is Timestamps.RESULT else _iso_utc(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    return value


def _map_key(key: Any, key_type: spark_types.DataType, timestamps: Timestamps) -> str:
    converted = to_json_value(key, key_type, timestamps)
    return converted if isinstance(converted, str) else dumps(converted)


def _timestamp_text(value: dt.datetime) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text


def _iso_utc(value: dt.datetime) -> str:
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return aware.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


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
