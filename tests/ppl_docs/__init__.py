"""The reference's PPL documentation as a conformance suite: its sample tables, rebuilt from the
rows the pages show, and its examples with the outputs the pages print.

:mod:`.examples` holds every example of the pages (query, documented columns and rows, as
printed); :data:`NOTES` says where an example cannot be taken as printed (a refused feature, an
error in the page) and what is checked instead. The examples are run by
``tests/integration/test_ppl_docs_spark.py`` and translated by ``tests/unit/test_ppl_docs.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tests.ppl_docs.examples import EXAMPLES, Example


@dataclass(frozen=True)
class Note:
    """How an example is taken when not as printed.

    ``refused``: the translation refuses it with an error matching this text. ``query``/``columns``
    /``rows``: what replaces the page's (with ``why``). ``runs``: only that it runs (its output
    depends on data the page does not show, or on the clock). ``unordered``: rows compared as a
    multiset although the query sorts (ties).
    """

    why: str
    refused: str = ""
    query: str = ""
    columns: tuple[str, ...] | None = None
    rows: tuple[tuple[str, ...], ...] | None = None
    runs: bool = False


_ACCOUNT_COLUMNS = (
    "account_number", "balance", "firstname", "lastname", "age", "gender", "address", "employer", "email", "city", "state",
)  # fmt: skip
_JSON_EDIT = "is not supported on Spark: Spark SQL has no function that edits a JSON document"
_PAGE_COLUMN_NAME = "the page's header is not the column's name, which is the aggregation as written"

#: Examples taken otherwise than as printed, by id (``<page>-<n>``, n counting from 1 on the page).
NOTES: dict[str, Note] = {
    # refused: Spark SQL cannot express them
    **{f"json-{n}": Note("edits a JSON document", refused=_JSON_EDIT) for n in range(14, 24)},
    **{
        f"ip-{n}": Note("geoip needs the reference's IP range table", refused="geoip is not supported on Spark")
        for n in (3, 4, 5)
    },
    # errors in the pages
    "datetime-22": Note(
        "the page names the column MAKE_DATE(...) and then asks for MAKEDATE(...)",
        query="source=people | eval `MAKEDATE(1945, 5, 9)` = MAKEDATE(1945, 5, 9) | fields `MAKEDATE(1945, 5, 9)`",
    ),
    "json-1": Note(
        "the page names the column `valid_json()` and then asks for valid_json",
        query='source=people | eval `valid_json` = json(\'[1,2,3,{"f1":1,"f2":[5,6]},4]\') | fields valid_json',
    ),
    "json-2": Note(
        "the page names the column `invalid_json()` and then asks for invalid_json",
        query='source=people | eval `invalid_json` = json(\'{"invalid": "json"\') | fields invalid_json',
    ),
    "datetime-5": Note(
        "the page prints 31st for the Spark pattern dd, which the reference hands to Spark unchanged",
        rows=(("13:14:15.012345", "1998-Jan-31 01:14:15 PM"),),
    ),
    "json-8": Note("the page prints {'key', 123.45}, not JSON", rows=(('{"key":123.45}',),)),
    "json-10": Note(
        "the page prints another name than the one the query gives",
        columns=("json_extract('{\"a\":\"b\"}', '$.a')",),
        rows=(("null",),),  # the query's path '$a' (no dot) names nothing
    ),
    "json-11": Note(
        "the page prints another name than the one the query gives",
        columns=('json_extract(\'{"a":[{"b":1},{"b":2}]}\', \'$.a[1].b\')',),
    ),
    "json-12": Note(
        "the page prints another name than the one the query gives",
        columns=('json_extract(\'{"a":[{"b":1},{"b":2}]}\', \'$.a[*].b\')',),
    ),
    "json-13": Note("json_extract is given one argument of its two", refused="json_extract expects 2 arguments, got 1"),
    "json-24": Note("the page prints the column as keus", columns=("keys",)),
    "json-26": Note(
        "the page writes feilds for fields",
        query="source=people | eval `valid_json` = json_valid('[1,2,3,4]'),"
        ' `invalid_json` = json_valid(\'{"invalid": "json"\') | fields `valid_json`, `invalid_json`',
    ),
    "appendcol-command-3": Note(
        "the page prints Sales------ for Sales",
        rows=(
            ("Lisa", "Sales", "35", "31.22222222222222", "38"),
            ("Fred", "Engineering", "28", "NULL", "NULL"),
            ("Paul", "Engineering", "23", "NULL", "NULL"),
            ("Evan", "Sales", "38", "NULL", "NULL"),
            ("Chloe", "Engineering", "25", "NULL", "NULL"),
            ("Tom", "Engineering", "33", "NULL", "NULL"),
            ("Alex", "Sales", "33", "NULL", "NULL"),
            ("Jane", "Marketing", "28", "NULL", "NULL"),
            ("Jeff", "Marketing", "38", "NULL", "NULL"),
        ),
    ),
    "appendcol-command-4": Note(
        "the page prints Sales------ for Sales",
        rows=(
            ("Lisa", "Sales", "31.22222222222222"),
            ("Fred", "Engineering", "NULL"),
            ("Paul", "Engineering", "NULL"),
            ("Evan", "Sales", "NULL"),
            ("Chloe", "Engineering", "NULL"),
            ("Tom", "Engineering", "NULL"),
            ("Alex", "Sales", "NULL"),
            ("Jane", "Marketing", "NULL"),
            ("Jeff", "Marketing", "NULL"),
        ),
    ),
    "appendcol-command-5": Note(
        "the page prints headers of its own; the columns are avg_age1, dept, avg_age2, dept",
        columns=("avg_age1", "avg_age2"),
        rows=(("35.33", "35.33"), ("27.25", "27.25"), ("33.00", "33.00")),
    ),
    **{
        f"eventstats-command-{n}": Note(_PAGE_COLUMN_NAME, columns=(*_ACCOUNT_COLUMNS, name))
        for n, name in ((2, "sum(age)"), (3, "avg(age)"), (8, "percentile(age, 90)"), (10, "count(age)"))
    },
    **{
        f"fieldsummary-command-{n}": Note(
            "the page's headers are not the names the reference gives (Field, DISTINCT, Nulls)",
            columns=("Field", "COUNT", "DISTINCT", "MIN", "MAX", "AVG", "MEAN", "STDDEV", "Nulls", "TYPEOF"),
            rows=rows,
        )
        for n, rows in (
            (1, (("status_code", "2", "2", "301", "403", "352.0", "352.0", "72.12489168102785", "0", "int"),)),
            (
                2,
                (
                    ("id", "6", "6", "1", "6", "3.5", "3.5", "1.8708286933869707", "0", "int"),
                    ("status_code", "4", "3", "200", "403", "184.0", "184.0", "161.16699413961905", "2", "int"),
                    # the page counts 2 values and 2 nulls in its 6 rows: here the other 4 are null
                    ("request_path", "2", "2", "/about", "/home", "0.0", "0.0", "0", "4", "string"),
                ),
            ),
        )
    },
    # decimal literals are exact decimals, as in Spark SQL (TPC-H's `.06 + 0.01 = 0.07` needs it)
    "json-7": Note(
        "a decimal literal is an exact decimal, rendered with its scale; the reference's doubles print 1.0",
        rows=(("[1.00,2.00,0.00,-1.00,1.10,-0.11]",),),
    ),
    # outputs that depend on data the page does not show, or on chance
    "math-27": Note("rand(3) is Spark's generator, not MySQL's", runs=True),
    **{f"join-command-{n}": Note("the page's rows are TPC-H at scale 1", runs=True) for n in (1, 2, 3)},
    **{f"subquery-command-{n}": Note("the page's rows are TPC-H at scale 1", runs=True) for n in (1, 2)},
}


def example_id(index: int) -> str:
    """The id of ``EXAMPLES[index]``: its page and its rank on the page, from 1."""
    page = EXAMPLES[index].page
    return f"{page}-{sum(1 for e in EXAMPLES[: index + 1] if e.page == page)}"


def effective(
    example: Example, example_id: str
) -> tuple[str, tuple[str, ...], tuple[tuple[str, ...], ...], Note | None]:
    """The query, columns and rows to check of ``example``, with its note if any."""
    note = NOTES.get(example_id)
    if note is None:
        return example.query, example.columns, example.rows, None
    query = note.query or example.query
    columns = note.columns if note.columns is not None else example.columns
    rows = note.rows if note.rows is not None else example.rows
    return query, columns, rows, note


# -- comparing a printed cell with a value ---------------------------------------------------------

_NULLS = {"null", "NULL", "None"}


def _split_top(text: str) -> list[str]:
    """The items of a printed list or struct, ``[a, b]``/``{a, b}``, split at top-level commas."""
    inner = text.strip()[1:-1]
    items, depth, start = [], 0, 0
    for i, char in enumerate(inner):
        if char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    if inner.strip():
        items.append(inner[start:])
    return [item.strip().strip('"') for item in items]


def _number_matches(printed: str, value: float) -> bool:
    try:
        expected = float(printed)
    except ValueError:
        return False
    decimals = len(printed.split(".")[1]) if "." in printed and "e" not in printed.lower() else 0
    # A page may round or cut a long fraction (12.6 for 12.666...): within one unit of its last digit.
    tolerance = max(1e-9 * abs(expected), 10.0**-decimals if decimals else 1e-9)
    return math.isclose(value, expected, abs_tol=tolerance) or abs(value - expected) < tolerance


def cell_matches(printed: str, value: Any) -> bool:
    """Whether ``value`` (from Spark) is what the page prints as ``printed``."""
    printed = printed.strip()
    if value is None:
        return printed in _NULLS or printed == ""
    if isinstance(value, bool):
        return printed.lower() == str(value).lower()
    if isinstance(value, int | float | Decimal):
        return _number_matches(printed.strip('"'), float(value))
    if isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
        return (
            text == printed
            or text.startswith(printed.removesuffix("..."))
            or value.strftime("%Y-%m-%d %H:%M:%S") == printed
        )
    if isinstance(value, dt.date):
        return printed in (value.isoformat(), f"{value.isoformat()} 00:00:00")
    if hasattr(value, "asDict") and printed.startswith('{"'):
        return _json_matches(json.loads(printed), value.asDict(recursive=True))
    if isinstance(value, list | tuple) or hasattr(value, "asDict"):
        items = list(value)
        if not (printed.startswith(("[", "{", "(")) and printed.endswith(("]", "}", ")"))):
            return False
        parts = _split_top(printed)
        return len(parts) == len(items) and all(cell_matches(p, v) for p, v in zip(parts, items, strict=True))
    if isinstance(value, dict):
        return printed.replace(" ", "") == str(value).replace(" ", "").replace("'", '"')
    if isinstance(value, str) and value.strip() != printed and printed.startswith(("[", "{")):
        try:
            return _json_matches(json.loads(printed), json.loads(value))
        except ValueError:
            return False
    if (
        isinstance(value, str)
        and re.fullmatch(r"-?\d+(\.\d+)?", value.strip())
        and re.fullmatch(r"-?\d+(\.\d+)?", printed)
    ):
        return _number_matches(printed, float(value))
    return str(value).strip() == printed.strip('"') or str(value).strip() == printed


def _json_matches(printed: Any, value: Any) -> bool:
    """A struct (as a dict) against the JSON object a page prints for it."""
    if isinstance(printed, dict):
        return (
            isinstance(value, dict)
            and set(printed) == set(value)
            and all(_json_matches(printed[k], value[k]) for k in printed)
        )
    if isinstance(printed, list):
        return (
            isinstance(value, list)
            and len(printed) == len(value)
            and all(_json_matches(p, v) for p, v in zip(printed, value, strict=True))
        )
    return cell_matches(json.dumps(printed) if isinstance(printed, str) else str(printed), value)


def rows_match(printed: Sequence[Sequence[str]], actual: Sequence[Sequence[Any]], ordered: bool) -> tuple[bool, str]:
    """Whether the rows are the printed ones (in order when ``ordered``), and if not, why."""
    if len(printed) != len(actual):
        return False, f"{len(actual)} rows, the page prints {len(printed)}"
    if ordered:
        for n, (p, a) in enumerate(zip(printed, actual, strict=True)):
            if len(p) != len(a) or not all(cell_matches(c, v) for c, v in zip(p, a, strict=True)):
                return False, f"row {n}: {list(a)!r}, the page prints {list(p)!r}"
        return True, ""
    left = list(actual)
    for p in printed:
        at = next(
            (
                i
                for i, a in enumerate(left)
                if len(a) == len(p) and all(cell_matches(c, v) for c, v in zip(p, a, strict=True))
            ),
            None,
        )
        if at is None:
            return False, f"no row for {list(p)!r} among {[list(a) for a in left]!r}"
        left.pop(at)
    return True, ""


def is_ordered(query: str) -> bool:
    """Whether the rows' order is part of the answer: the query sorts (and not before a stats)."""
    commands = [c.strip().lower() for c in re.split(r"\|", query)]
    last_sort = max((i for i, c in enumerate(commands) if c.startswith(("sort", "trendline sort"))), default=-1)
    if last_sort < 0:
        return False
    return not any(c.startswith(("stats", "eventstats", "top", "rare", "dedup")) for c in commands[last_sort + 1 :])


__all__ = [
    "EXAMPLES",
    "NOTES",
    "Example",
    "Note",
    "cell_matches",
    "effective",
    "example_id",
    "is_ordered",
    "rows_match",
]
