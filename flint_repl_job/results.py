"""Turning Spark rows into result documents (``docs/results.md``).

Two encodings are written side by side:

- the reference's (``result``/``schema`` string lists), so the reference plugin can read results;
- a lossless one (``lossless``): the schema, and the rows as JSON text written with the job's one
  value encoder (:mod:`flint_repl_job.values`): exact decimals, longs and floats, binary as
  base64, dates and timestamps as text.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import types as spark_types

from flint_repl_job.values import dumps, to_json_value
from query_core.models import ColumnSchema, LosslessResult

__all__ = ["dumps", "encode", "to_json_value", "type_name"]

#: Spark type name -> the reference's schema type name, where they differ.
_TYPE_NAMES = {"timestamp_ntz": "timestamp", "void": "null"}


def type_name(data_type: spark_types.DataType) -> str:
    name = data_type.typeName()
    return _TYPE_NAMES.get(name, name)


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
