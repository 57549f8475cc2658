"""Flint's extension statements that the job answers before Flint indexes exist.

OpenSearch Dashboards lists a datasource's accelerations with ``SHOW FLINT INDEX[ES] [EXTENDED]
IN <catalog>[.<db>]``. Until this product builds Flint indexes there are none to list, so the
statement answers an empty table with the reference's columns (EXTENDED adds ``error``), through
Spark like any statement. Every other statement passes through untouched.
"""

from __future__ import annotations

from flint_repl_job.catalog import tokenize

SHOW_FLINT_INDEX_COLUMNS = ("flint_index_name", "kind", "database", "table", "index_name", "auto_refresh", "status")


def _words(sql: str) -> list[str]:
    return [t.text.upper() for t in tokenize(sql) if t.kind not in ("space", "line_comment", "block_comment")]


def as_spark_sql(sql: str) -> str:
    """The Spark SQL that answers ``sql``: ``sql`` itself, unless it is a Flint statement above."""
    words = [w for w in _words(sql) if w != ";"]
    if words[:3] not in (["SHOW", "FLINT", "INDEX"], ["SHOW", "FLINT", "INDEXES"]):
        return sql
    extended = len(words) > 3 and words[3] == "EXTENDED"
    columns = [*SHOW_FLINT_INDEX_COLUMNS, *(["error"] if extended else [])]
    types = {"auto_refresh": "BOOLEAN"}
    selected = ", ".join(f"CAST(NULL AS {types.get(c, 'STRING')}) AS {c}" for c in columns)
    return f"SELECT {selected} WHERE false"
