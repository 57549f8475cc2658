"""Result rows in the two encodings a result document holds (``docs/results.md``), shared by the
job (rows Spark computed, :mod:`flint_repl_job.results`) and the plugin (rows it answers itself,
such as the catalog browse statements of :mod:`async_query.catalog`), so that both write the same
bytes for the same values.

- the reference's: one quote-swapped JSON object per row (null columns left out), and one
  ``{'column_name':...,'data_type':...}`` text per column;
- the lossless one: the rows as JSON text, values written digit for digit (:func:`dumps`).

Values here are already JSON values (the job converts Spark's with
:func:`flint_repl_job.values.to_json_value`).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from query_core.models import ColumnSchema, LosslessResult


class Float32(float):
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
    if isinstance(value, Float32):
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


def quoted_names(names: Sequence[str]) -> list[str]:
    """Column names as JSON strings, once per result (:func:`reference_row` takes them)."""
    return [json.dumps(name, ensure_ascii=False) for name in names]


def reference_row(quoted: Sequence[str], texts: Sequence[str], values: Sequence[Any]) -> str:
    """A row in the reference's encoding: a JSON object of the non-null columns, its double quotes
    turned into single quotes. ``texts`` are the values' :func:`dumps`."""
    pairs = (f"{name}:{text}" for name, text, value in zip(quoted, texts, values, strict=True) if value is not None)
    return ("{" + ",".join(pairs) + "}").replace('"', "'")


def reference_schema_entry(name: str, spark_type: str) -> str:
    """One column of the reference's ``schema`` list (``spark_type``: Spark's type name)."""
    return f"{{'column_name':'{name}','data_type':'{spark_type}'}}"


def encode_rows(
    columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
) -> tuple[list[str], list[str], LosslessResult]:
    """The reference's ``result`` and ``schema`` lists and the lossless form of a result of JSON
    values; ``columns`` are (name, Spark type name) pairs of simple types (``string``, ``boolean``,
    ``long``...: their reference name is their Spark name)."""
    quoted = quoted_names([name for name, _ in columns])
    reference: list[str] = []
    lossless: list[str] = []
    for row in rows:
        texts = [dumps(value) for value in row]
        lossless.append("[" + ",".join(texts) + "]")
        reference.append(reference_row(quoted, texts, row))
    schema = [reference_schema_entry(name, spark_type) for name, spark_type in columns]
    result = LosslessResult(
        schema=[ColumnSchema(name=name, type=spark_type) for name, spark_type in columns],
        datarows="[" + ",".join(lossless) + "]",
        total=len(lossless),
    )
    return reference, schema, result
