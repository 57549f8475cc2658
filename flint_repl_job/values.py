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
from enum import Enum
from typing import Any

from pyspark.sql import types as spark_types

from query_core.result_encoding import Float32, dumps

__all__ = ["Timestamps", "dumps", "to_json_value"]


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
        return Float32(value)
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
