"""The browse statements the read model answers, recognized in the exact forms OpenSearch
Dashboards sends (``docs/catalog.md``); any other form is left to Spark.

- ``SHOW SCHEMAS IN <ds>`` (also ``DATABASES``/``NAMESPACES``, ``FROM``);
- ``SHOW TABLE EXTENDED IN <ds>.<db> LIKE '*'`` and ``SHOW TABLES IN <ds>.<db>``;
- ``DESC <ds>.<db>.<table>`` (``DESCRIBE [TABLE]``), without EXTENDED, a column or a partition;
- ``SHOW FLINT INDEX[ES] [EXTENDED] IN <ds>[.<db>]`` (as the Flint parser reads it).

Names may be back-quoted; keywords are case-insensitive; a trailing ``;`` is allowed. Database
and table names are lower-cased, as Spark's session catalog does; the catalog must be the
datasource's name exactly, as the job's rewrite to the session catalog requires.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from query_core.flint import ShowFlintIndexes, Statement


@dataclass(frozen=True)
class ShowSchemas:
    pass


@dataclass(frozen=True)
class ShowTables:
    database: str
    extended: bool


@dataclass(frozen=True)
class Describe:
    database: str
    table: str


@dataclass(frozen=True)
class ShowFlintIndex:
    database: str | None
    extended: bool


Browse = ShowSchemas | ShowTables | Describe | ShowFlintIndex

_NAME = r"(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)"
_END = r"\s*;?\s*"
_SCHEMAS = re.compile(rf"\s*SHOW\s+(?:SCHEMAS|DATABASES|NAMESPACES)\s+(?:IN|FROM)\s+({_NAME}){_END}", re.I)
_EXTENDED = re.compile(
    rf"\s*SHOW\s+TABLE\s+EXTENDED\s+(?:IN|FROM)\s+({_NAME})\s*\.\s*({_NAME})\s+LIKE\s+(?:'\*'|\"\*\"){_END}", re.I
)
_TABLES = re.compile(rf"\s*SHOW\s+TABLES\s+(?:IN|FROM)\s+({_NAME})\s*\.\s*({_NAME}){_END}", re.I)
_DESCRIBE = re.compile(
    rf"\s*DESC(?:RIBE)?\s+(?:TABLE\s+)?({_NAME})\s*\.\s*({_NAME})\s*\.\s*({_NAME}){_END}", re.I
)


def _name(text: str) -> str:
    return text[1:-1].replace("``", "`") if text.startswith("`") else text


def recognize(lang: str, query: str, datasource: str, flint: Statement | None) -> Browse | None:
    """The browse statement ``query`` is, for ``datasource``; None for anything else."""
    if lang.lower() != "sql":
        return None
    if flint is not None:
        if isinstance(flint, ShowFlintIndexes) and flint.catalog == datasource:
            return ShowFlintIndex(flint.database, flint.extended)
        return None
    if (match := _SCHEMAS.fullmatch(query)) is not None:
        return ShowSchemas() if _name(match.group(1)) == datasource else None
    for pattern, extended in ((_EXTENDED, True), (_TABLES, False)):
        if (match := pattern.fullmatch(query)) is not None:
            if _name(match.group(1)) != datasource:
                return None
            return ShowTables(_name(match.group(2)).lower(), extended)
    if (match := _DESCRIBE.fullmatch(query)) is not None:
        if _name(match.group(1)) != datasource:
            return None
        return Describe(_name(match.group(2)).lower(), _name(match.group(3)).lower())
    return None
