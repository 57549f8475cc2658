"""Turning Spark rows into result documents (``docs/results.md``).

Two encodings are written side by side:

- the reference's (``result``/``schema`` string lists), so the reference plugin can read results;
- a lossless one (``lossless``): the schema, and the rows as JSON text written with the job's one
  value encoder (:mod:`flint_repl_job.values`): exact decimals, longs and floats, binary as
  base64, dates and timestamps as text.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import types as spark_types

from flint_repl_job.values import dumps, to_json_value
from query_core.models import ColumnSchema, LosslessResult
from query_core.result_encoding import quoted_names, reference_row, reference_schema_entry

__all__ = ["RowEncoder", "columns", "dumps", "encode", "reference_schema", "to_json_value", "type_name"]

#: Spark type name -> the reference's schema type name, where they differ.
_TYPE_NAMES = {"timestamp_ntz": "timestamp", "void": "null"}


def type_name(data_type: spark_types.DataType) -> str:
    name = data_type.typeName()
    return _TYPE_NAMES.get(name, name)


class RowEncoder:
    """Both encodings of one row at a time, for a result that is streamed (:mod:`.result_stream`)."""

    def __init__(self, schema: spark_types.StructType) -> None:
        self.fields = schema.fields
        self._names = quoted_names([f.name for f in self.fields])

    def encode(self, row: Any, reference: bool = True) -> tuple[str, str | None]:
        """The row's lossless text (``[...]``) and, when ``reference``, its text in the reference's
        encoding (a quote-swapped JSON object, null columns left out)."""
        converted = [to_json_value(row[i], f.dataType) for i, f in enumerate(self.fields)]
        texts = [dumps(v) for v in converted]
        lossless = "[" + ",".join(texts) + "]"
        if not reference:
            return lossless, None
        return lossless, reference_row(self._names, texts, converted)


def reference_schema(schema: spark_types.StructType) -> list[str]:
    """The reference's ``schema`` list: one quote-swapped JSON object per column."""
    return [reference_schema_entry(f.name, f.dataType.typeName()) for f in schema.fields]


def columns(schema: spark_types.StructType) -> list[ColumnSchema]:
    """The lossless schema: column names and the reference's type names."""
    return [ColumnSchema(name=f.name, type=type_name(f.dataType)) for f in schema.fields]


def encode(schema: spark_types.StructType, rows: list[Any]) -> tuple[list[str], list[str], LosslessResult]:
    """The reference's ``result`` and ``schema`` lists and the lossless form, for one result."""
    encoder = RowEncoder(schema)
    encoded = [encoder.encode(row) for row in rows]
    lossless = LosslessResult(
        schema=columns(schema), datarows="[" + ",".join(text for text, _ in encoded) + "]", total=len(encoded)
    )
    return [reference or "" for _, reference in encoded], reference_schema(schema), lossless
