"""Tables of a local warehouse directory, registered in Spark's in-memory catalog at start-up.

The embedded default uses Spark's in-memory catalog (no metastore to run or lock), which forgets
tables when a job ends. Their data stays in the warehouse directory, so each job re-registers what
it finds there: ``<warehouse>/<table>`` in the default database, ``<warehouse>/<db>.db/<table>``
in others. Only directories holding data files of the session's default format are registered.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CONF_KEY = "spark.flint.job.registerWarehouseTables"


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _has_data(table_dir: Path, fmt: str) -> bool:
    return any(p.suffix == f".{fmt}" or p.name.endswith(f".{fmt}") for p in table_dir.rglob(f"*.{fmt}"))


def register_warehouse_tables(spark: Any) -> list[str]:
    """Register the warehouse's tables; returns their qualified names."""
    conf = spark.sparkContext.getConf()
    if (conf.get(CONF_KEY, "false") or "false").lower() != "true":
        return []
    warehouse = Path((conf.get("spark.sql.warehouse.dir", "") or "").removeprefix("file:"))
    if not warehouse.is_dir():
        return []
    fmt = spark.conf.get("spark.sql.sources.default", "parquet")
    registered = []
    for db_dir in [warehouse, *sorted(p for p in warehouse.iterdir() if p.is_dir() and p.name.endswith(".db"))]:
        database = "default" if db_dir == warehouse else db_dir.name.removesuffix(".db")
        if database != "default":
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {_quote(database)} LOCATION '{db_dir.as_posix()}'")
        for table_dir in sorted(p for p in db_dir.iterdir() if p.is_dir() and not p.name.endswith(".db")):
            if not _has_data(table_dir, fmt):
                continue
            name = f"{_quote(database)}.{_quote(table_dir.name)}"
            try:
                spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING {fmt} LOCATION '{table_dir.as_posix()}'")
                registered.append(f"{database}.{table_dir.name}")
            except Exception as exc:  # noqa: BLE001 - one unreadable table must not stop the job
                log.warning("cannot register %s from %s: %s", name, table_dir, str(exc).splitlines()[0])
    if registered:
        log.info("registered %d warehouse tables", len(registered))
    return registered
