"""The sample tables of the reference's PPL pages, rebuilt from the rows the pages show.

A page's examples read the tables :func:`tables_for` gives it; two pages may give one name other
rows (``people`` is one row for the function pages, the lookup page's people elsewhere).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Table:
    """A table: Spark DDL of its columns, and its rows in order."""

    schema: str
    rows: tuple[tuple[Any, ...], ...]


ACCOUNTS = Table(
    "account_number BIGINT, firstname STRING, address STRING, balance BIGINT, gender STRING, city STRING,"
    " employer STRING, state STRING, age INT, email STRING, lastname STRING",
    (
        (1, "Amber", "880 Holmes Lane", 39225, "M", "Brogan", "Pyrami", "IL", 32, "amberduke@pyrami.com", "Duke"),
        (6, "Hattie", "671 Bristol Street", 5686, "M", "Dante", "Netagy", "TN", 36, "hattiebond@netagy.com", "Bond"),
        (13, "Nanette", "789 Madison Street", 32838, "F", "Nogal", "Quility", "VA", 28, None, "Bates"),
        (18, "Dale", "467 Hutchinson Court", 4180, "M", "Orick", None, "MD", 33, "daleadams@boink.com", "Adams"),
    ),
)

EMPLOYEES = Table(
    "name STRING, dept STRING, age INT",
    (
        ("Lisa", "Sales", 35),
        ("Fred", "Engineering", 28),
        ("Paul", "Engineering", 23),
        ("Evan", "Sales", 38),
        ("Chloe", "Engineering", 25),
        ("Tom", "Engineering", 33),
        ("Alex", "Sales", 33),
        ("Jane", "Marketing", 28),
        ("Jeff", "Marketing", 38),
    ),
)

#: The function pages evaluate constants over `people`: one row.
ONE_PERSON = Table("id INT, name STRING", ((1, "Jake"),))

_APACHE_LINES = (
    '177.95.8.74 - upton5450 [28/Sep/2022:10:15:57 -0700] "HEAD /e-business/mindshare HTTP/1.0" 404 19927',
    '127.45.152.6 - pouros8756 [28/Sep/2022:10:15:57 -0700] "GET /architectures/convergence/niches/mindshare'
    ' HTTP/1.0" 100 28722',
    '118.223.210.105 - - [28/Sep/2022:10:15:57 -0700] "PATCH /strategize/out-of-the-box HTTP/1.0" 401 27439',
    '210.204.15.104 - - [28/Sep/2022:10:15:57 -0700] "POST /users HTTP/1.1" 301 9481',
)
APACHE = Table("message STRING", tuple((line,) for line in _APACHE_LINES))


def _ts(text: str | None) -> dt.datetime | None:
    return None if text is None else dt.datetime.fromisoformat(text)


_LOG_ROWS = (
    (403, "/contact", None),
    (403, "/home", None),
    (None, "/about", "2023-10-01 10:30:00"),
    (None, "/home", "2023-10-01 10:15:00"),
    (200, None, "2023-10-01 10:20:00"),
    (404, None, "2023-10-01 11:05:00"),
    (500, "/about", None),
    (None, "/home", "2023-10-01 10:00:00"),
    (500, "/contact", None),
    (404, None, "2023-10-01 10:05:00"),
    (200, None, "2023-10-01 10:50:00"),
    (500, "/services", None),
    (None, "/home", "2023-10-01 10:45:00"),
    (None, "/services", "2023-10-01 11:00:00"),
    (404, None, "2023-10-01 10:35:00"),
)
LOGS = Table(
    "status_code INT, request_path STRING, timestamp STRING",
    tuple((code, path, ts) for code, path, ts in _LOG_ROWS),
)

TEMPERATURES = Table(
    "temperature INT, `device-id` STRING, timestamp TIMESTAMP",
    (
        (12, "1492", _ts("2023-04-06 17:07:04")),
        (12, "1492", _ts("2023-04-06 17:07:05")),
        (13, "256", _ts("2023-04-06 17:07:06")),
        (14, "257", _ts("2023-04-06 17:07:07")),
        (15, "258", _ts("2023-04-06 17:07:08")),
    ),
)

#: fieldsummary's `t`: the page's statistics of id and status_code.
STATUS = Table(
    "id INT, status_code INT, request_path STRING",
    (
        (1, 200, "/home"),
        (2, 301, None),
        (3, None, "/about"),
        (4, 403, None),
        (5, 200, None),
        (6, None, None),
    ),
)

_PEOPLE = (
    (1000, "Daniel", "Teacher", "Canada", 56486),
    (1001, "Joseph", "Lawyer", "Denmark", 135943),
    (1002, "David", "Artist", "Finland", 60391),
    (1003, "Charlotte", "Lawyer", "Denmark", 42173),
    (1004, "Isabella", "Veterinarian", "Australia", 117699),
    (1005, "Lily", "Engineer", "Italy", 37526),
    (1006, "Emily", "Dentist", "Denmark", 125340),
    (1007, "James", "Lawyer", "Germany", 56532),
    (1008, "Lucas", "Lawyer", "Japan", 87782),
    (1009, "Sophia", "Architect", "Sweden", 37597),
    (1018, "Emma", "Architect", "USA", 72400),
    (1032, "James", "Pilot", "Netherlands", 71698),
    (1043, "Jane", "Nurse", "Brazil", 45016),
    (1046, "Joseph", "Pharmacist", "Mexico", 109152),
    (1064, "Joseph", "Electrician", "New Zealand", 50253),
    (1090, "Matthew", "Psychologist", "Germany", 73396),
    (1103, "Emily", "Electrician", "Switzerland", 98391),
    (1114, "Jake", "Nurse", "Denmark", 53418),
    (1115, "Sofia", "Engineer", "Mexico", 64829),
    (1122, "Oliver", "Scientist", "Netherlands", 31146),
)
PEOPLE = Table("id INT, name STRING, occupation STRING, country STRING, salary INT", _PEOPLE)

# The lookup page's departments: by id and name for the later people (the APPEND example), by
# id alone for the first ten (their names differ here, so the APPEND example does not match them).
_DEPARTMENTS = (
    "CUSTOMER_SERVICE", "FINANCE", "DATA", "LEGAL", "MARKETING", "IT", "MARKETING", "LEGAL", "DATA", "MARKETING",
    "IT", "SALES", "FINANCE", "OPERATIONS", "LEGAL", "DATA", "DATA", "SALES", "OPERATIONS", "DATA",
)  # fmt: skip
WORK_INFO = Table(
    "uid INT, name STRING, department STRING",
    tuple(
        (pid, name if pid > 1009 else name + "-at-work", department)
        for (pid, name, *_), department in zip(_PEOPLE, _DEPARTMENTS, strict=True)
    ),
)

IPS = Table("ip STRING", (("192.169.1.5",), ("192.168.1.5",), ("10.1.1.5",)))
IPSV6 = Table("ip STRING", (("2003:0db8:0000:0000:0000:0000:0000:0000",), ("2004:db8::1",), ("::1",)))

RELATIVE_DATETIME = Table(
    "description STRING, relative_string STRING",
    (
        ("Now", "NOW"),
        ("Tomorrow", "+D@D"),
        ("In one month", "+month"),
        ("Two weeks ago", "-2wk"),
        ("Yesterday", "-1d@d"),
    ),
)

#: flatten's table.
CITIES = Table(
    "_time STRING, bridges ARRAY<STRUCT<length: BIGINT, name: STRING>>, city STRING,"
    " coor STRUCT<alt: BIGINT, lat: DOUBLE, long: DOUBLE>, country STRING",
    (
        (
            "2024-09-13T12:00:00",
            [(801, "Tower Bridge"), (928, "London Bridge")],
            "London",
            (35, 51.5074, -0.1278),
            "England",
        ),
        (
            "2024-09-13T12:00:00",
            [(232, "Pont Neuf"), (160, "Pont Alexandre III")],
            "Paris",
            (35, 48.8566, 2.3522),
            "France",
        ),
        (
            "2024-09-13T12:00:00",
            [(48, "Rialto Bridge"), (11, "Bridge of Sighs")],
            "Venice",
            (2, 45.4408, 12.3155),
            "Italy",
        ),
        (
            "2024-09-13T12:00:00",
            [(516, "Charles Bridge"), (343, "Legion Bridge")],
            "Prague",
            (200, 50.0755, 14.4378),
            "Czech Republic",
        ),
        (
            "2024-09-13T12:00:00",
            [(375, "Chain Bridge"), (333, "Liberty Bridge")],
            "Budapest",
            (96, 47.4979, 19.0402),
            "Hungary",
        ),
        ("1990-09-13T12:00:00", None, "Warsaw", None, "Poland"),
    ),
)

#: expand's table: arrays and a map.
MULTI = Table(
    "name STRING, occupation STRING, employee ARRAY<STRUCT<name: STRING, salary: INT>>,"
    " multi_valueA ARRAY<INT>, multi_valueB ARRAY<STRING>, tags MAP<STRING, INT>",
    (
        ("ann", "dev", [("x", 10), ("y", 20)], [1, 2], ["a", "b"], {"k1": 1, "k2": 2}),
        ("bob", "ops", [("z", 30)], [3], [], {"k3": 3}),
        ("cy", "qa", None, None, ["c"], None),
    ),
)

#: The TPC-H tables, empty: the join and subquery pages print rows of TPC-H at scale 1, so
#: their examples are checked to run (their rows are TPC-H's, checked by the TPC-H tests).
_TPCH_SCHEMAS = {
    "customer": "c_custkey BIGINT, c_name STRING, c_address STRING, c_nationkey BIGINT, c_phone STRING,"
    " c_acctbal DECIMAL(15,2), c_mktsegment STRING, c_comment STRING",
    "orders": "o_orderkey BIGINT, o_custkey BIGINT, o_orderstatus STRING, o_totalprice DECIMAL(15,2), o_orderdate DATE,"
    " o_orderpriority STRING, o_clerk STRING, o_shippriority INT, o_comment STRING",
    "lineitem": "l_orderkey BIGINT, l_partkey BIGINT, l_suppkey BIGINT, l_linenumber INT, l_quantity DECIMAL(15,2),"
    " l_extendedprice DECIMAL(15,2), l_discount DECIMAL(15,2), l_tax DECIMAL(15,2), l_returnflag STRING,"
    " l_linestatus STRING, l_shipdate DATE, l_commitdate DATE, l_receiptdate DATE, l_shipinstruct STRING,"
    " l_shipmode STRING, l_comment STRING",
    "nation": "n_nationkey BIGINT, n_name STRING, n_regionkey BIGINT, n_comment STRING",
    "region": "r_regionkey BIGINT, r_name STRING, r_comment STRING",
    "part": "p_partkey BIGINT, p_name STRING, p_mfgr STRING, p_brand STRING, p_type STRING, p_size INT,"
    " p_container STRING, p_retailprice DECIMAL(15,2), p_comment STRING",
    "partsupp": "ps_partkey BIGINT, ps_suppkey BIGINT, ps_availqty INT, ps_supplycost DECIMAL(15,2), ps_comment STRING",
    "supplier": "s_suppkey BIGINT, s_name STRING, s_address STRING, s_nationkey BIGINT, s_phone STRING,"
    " s_acctbal DECIMAL(15,2), s_comment STRING",
}
TPCH_EMPTY = {name: Table(schema, ()) for name, schema in _TPCH_SCHEMAS.items()}

#: Tables every page sees, unless it names its own.
COMMON: dict[str, Table] = {"accounts": ACCOUNTS, "people": ONE_PERSON}

#: Pages' own tables (a page's name as in :class:`tests.ppl_docs.examples.Example`).
BY_PAGE: dict[str, dict[str, Table]] = {
    "appendcol-command": {"employees": EMPLOYEES},
    "grok-command": {"apache": APACHE},
    "patterns-command": {"apache": APACHE},
    "fillnull-command": {"logs": LOGS},
    "trendline-command": {"t": TEMPERATURES},
    "fieldsummary-command": {"t": STATUS},
    "lookup-command": {"people": PEOPLE, "work_info": WORK_INFO},
    "ip": {"ips": IPS, "ipsv6": IPSV6},
    "datetime": {"relative_datetime": RELATIVE_DATETIME},
    "flatten-command": {"table": CITIES},
    "expand-command": {"table": MULTI},
    "join-command": TPCH_EMPTY,
    "subquery-command": TPCH_EMPTY,
}


def _literal(value: Any) -> str:
    """A Spark SQL literal of a sample value (a tuple is a struct, cast to its type by the view)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return f"array({', '.join(_literal(v) for v in value)})"
    if isinstance(value, tuple):
        return f"struct({', '.join(_literal(v) for v in value)})"
    if isinstance(value, dict):
        return f"map({', '.join(f'{_literal(k)}, {_literal(v)}' for k, v in value.items())})"
    raise TypeError(f"no literal for {value!r}")


def _split_schema(schema: str) -> list[tuple[str, str]]:
    """(name, type) of each column of a Spark DDL list."""
    columns, depth, start = [], 0, 0
    for i, char in enumerate(schema + ","):
        depth += {"<": 1, ">": -1, "(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            name, kind = schema[start:i].strip().split(" ", 1)
            columns.append((name, kind.strip()))
            start = i + 1
    return columns


def view_sql(name: str, table: Table) -> str:
    """``CREATE OR REPLACE TEMP VIEW`` of the table over its rows as literals: a local relation,
    which Spark evaluates in the driver for the simple queries, so the examples run fast."""
    columns = _split_schema(table.schema)
    cast = ", ".join(f"CAST(c{i} AS {kind}) AS {column}" for i, (column, kind) in enumerate(columns))
    if not table.rows:
        nulls = ", ".join(f"NULL AS c{i}" for i in range(len(columns)))
        return f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {cast} FROM (SELECT {nulls}) WHERE FALSE"
    rows = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in table.rows)
    aliases = ", ".join(f"c{i}" for i in range(len(columns)))
    return f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {cast} FROM VALUES {rows} AS v({aliases})"


def tables_for(page: str) -> dict[str, Table]:
    """The tables the examples of ``page`` read."""
    return {**COMMON, **BY_PAGE.get(page, {})}
