"""The PPL functions' Spark SQL evaluated on Spark, against the values the reference documents.

All scalar cases are evaluated in one SELECT (one Spark job); a case whose expression fails is
evaluated again alone, so one bad case reports itself and not the whole table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from query_core.ppl.functions import (
    aggregate_sql,
    cast_sql,
    interval_sql,
    relative_timestamp_sql,
    scalar_sql,
    sql_string,
)

pytestmark = pytest.mark.spark

Expected = Any  # a value, or a predicate over the value Spark returns


def s(value: str) -> str:
    """A Spark SQL string literal."""
    return sql_string(value)


def fn(name: str, *args: str) -> str:
    return scalar_sql(name, list(args))


def d(value: str) -> str:
    return fn("date", s(value))


def ts(value: str) -> str:
    return fn("timestamp", s(value))


def is_a(kind: type) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, kind)


NULL = "CAST(NULL AS STRING)"
DATE_26 = d("2020-08-26")
MONDAY = ts("2000-01-03 01:01:01")

# (case id, Spark SQL, expected)
CASES: list[tuple[str, str, Expected]] = [
    # string
    ("concat", fn("concat", s("hello"), s("world")), "helloworld"),
    ("concat-4", fn("concat", s("hello "), s("whole "), s("world"), s("!")), "hello whole world!"),
    ("concat_ws", fn("concat_ws", s(","), s("hello"), s("world")), "hello,world"),
    ("length", fn("length", s("helloworld")), 10),
    ("lower", fn("lower", s("HELLOWORLD")), "helloworld"),
    ("upper", fn("upper", s("helloworld")), "HELLOWORLD"),
    ("ltrim", fn("ltrim", s("   hello")), "hello"),
    ("rtrim", fn("rtrim", s("hello   ")), "hello"),
    ("rtrim-leading", fn("rtrim", s("   hello")), "   hello"),
    ("trim", fn("trim", s("   hello")), "hello"),
    ("position", fn("position", s("world"), s("helloworld")), 6),
    ("position-absent", fn("position", s("invalid"), s("helloworld")), 0),
    ("reverse", fn("reverse", s("abcde")), "edcba"),
    ("right", fn("right", s("helloworld"), "5"), "world"),
    ("right-0", fn("right", s("HELLOWORLD"), "0"), ""),
    ("left", fn("left", s("helloworld"), "5"), "hello"),
    ("substring-2", fn("substring", s("helloworld"), "5"), "oworld"),
    ("substring-3", fn("substring", s("helloworld"), "5", "3"), "owo"),
    ("substr", fn("substr", s("Hello"), "2", "2"), "el"),
    ("locate", fn("locate", s("world"), s("helloworld")), 6),
    ("locate-from", fn("locate", s("o"), s("helloworld"), "6"), 7),
    ("replace", fn("replace", s("Hello"), s("o"), s(" ")), "Hell "),
    ("trim-replace", fn("trim", fn("replace", s("Hello"), s("o"), s(" "))), "Hell"),
    ("ascii", fn("ascii", s("hello")), 104),
    ("like", fn("like", s("Hello"), s("_ello%")), True),
    ("like-no", fn("like", s("Hello"), s("ello%")), False),
    ("regexp", fn("regexp", s("abc"), s("^a.c$")), True),
    ("strcmp-lt", fn("strcmp", s("a"), s("b")), -1),
    ("strcmp-gt", fn("strcmp", s("b"), s("a")), 1),
    ("strcmp-eq", fn("strcmp", s("a"), s("a")), 0),
    ("strcmp-null", fn("strcmp", s("a"), NULL), None),
    ("tostring", fn("tostring", "1"), "1"),
    # math
    ("abs", fn("abs", "-1"), 1),
    ("acos", fn("acos", "0"), 1.5707963267948966),
    ("asin", fn("asin", "0"), 0.0),
    ("atan", fn("atan", "2"), 1.1071487177940904),
    ("atan-2", fn("atan", "2", "3"), 0.5880026035475675),
    ("atan2", fn("atan2", "2", "3"), 0.5880026035475675),
    ("ceiling-0", fn("ceiling", "0"), 0),
    ("ceiling", fn("ceiling", "50.00005"), 51),
    ("ceiling-neg", fn("ceiling", "-50.00005"), -50),
    ("ceil-big", fn("ceil", "3147483647.12345"), 3147483648),
    ("ceil-bigger", fn("ceil", "113147483647.12345"), 113147483648),
    ("conv-10-16", fn("conv", s("12"), "10", "16"), "c"),
    ("conv-16-10", fn("conv", s("2C"), "16", "10"), "44"),
    ("conv-10-2", fn("conv", "12", "10", "2"), "1100"),
    ("conv-2-10", fn("conv", "1111", "2", "10"), "15"),
    ("cos", fn("cos", "0"), 1.0),
    ("cot", fn("cot", "1"), 0.6420926159343306),
    ("crc32", fn("crc32", s("MySQL")), 3259397556),
    ("degrees", fn("degrees", "1.57"), 89.95437383553924),
    ("e", fn("e"), 2.718281828459045),
    ("exp", fn("exp", "2"), 7.38905609893065),
    ("expm1", fn("expm1", "0"), 0.0),
    ("floor-0", fn("floor", "0"), 0),
    ("floor", fn("floor", "50.00005"), 50),
    ("floor-neg", fn("floor", "-50.00005"), -51),
    ("floor-big", fn("floor", "282474973688888.022"), 282474973688888),
    ("ln", fn("ln", "2"), 0.6931471805599453),
    ("log-1", fn("log", "2"), 0.6931471805599453),
    ("log-2", fn("log", "2", "8"), 3.0),
    ("log2", fn("log2", "8"), 3.0),
    ("log10", fn("log10", "100"), 2.0),
    ("mod", fn("mod", "3", "2"), 1),
    ("mod-decimal", fn("mod", "3.1", "2"), 1.1),
    ("mod-zero", fn("mod", "3", "0"), None),
    ("modulus", fn("modulus", "7", "4"), 3),
    ("pi", fn("pi"), 3.141592653589793),
    ("pow", fn("pow", "3", "2"), 9.0),
    ("pow-neg-base", fn("pow", "-3", "2"), 9.0),
    ("pow-neg-exp", fn("pow", "3", "-2"), 0.1111111111111111),
    ("power", fn("power", "3", "2"), 9.0),
    ("radians", fn("radians", "90"), 1.5707963267948966),
    ("rand", fn("rand"), lambda v: 0 <= v < 1),
    ("rand-seed", fn("rand", "3"), lambda v: 0 <= v < 1),
    ("rint", fn("rint", "2.5"), 2.0),
    ("round", fn("round", "12.34"), 12.0),
    ("round-1", fn("round", "12.34", "1"), 12.3),
    ("round-neg", fn("round", "12.34", "-1"), 10.0),
    ("round-int", fn("round", "12", "1"), 12),
    ("sign-pos", fn("sign", "1"), 1),
    ("sign-0", fn("sign", "0"), 0),
    ("sign-neg", fn("sign", "-1.1"), -1),
    ("signum", fn("signum", "-5"), -1),
    ("sin", fn("sin", "0"), 0.0),
    ("sinh", fn("sinh", "0"), 0.0),
    ("cosh", fn("cosh", "0"), 1.0),
    ("tan", fn("tan", "0"), 0.0),
    ("sqrt", fn("sqrt", "4"), 2.0),
    ("sqrt-frac", fn("sqrt", "4.41"), 2.1),
    ("cbrt", fn("cbrt", "8"), 2.0),
    ("cbrt-frac", fn("cbrt", "9.261"), 2.1),
    ("cbrt-neg", fn("cbrt", "-27"), -3.0),
    ("truncate", fn("truncate", "56.78", "1"), 56.7),
    ("truncate-neg", fn("truncate", "-56.78", "1"), -56.7),
    ("truncate-0", fn("truncate", "1.9", "0"), 1.0),
    ("add", fn("add", "1", "2"), 3),
    ("subtract", fn("subtract", "3", "1"), 2),
    ("multiply", fn("multiply", "2", "3"), 6),
    ("divide", fn("divide", "6", "3"), 2.0),
    # date and time
    ("adddate", fn("adddate", DATE_26, "1"), dt.date(2020, 8, 27)),
    ("adddate-neg", fn("adddate", DATE_26, "-1"), dt.date(2020, 8, 25)),
    ("subdate", fn("subdate", DATE_26, "1"), dt.date(2020, 8, 25)),
    ("subdate-31", fn("subdate", d("2008-01-02"), "31"), dt.date(2007, 12, 2)),
    ("date", d("2020-08-26"), dt.date(2020, 8, 26)),
    ("date-of-timestamp", fn("date", ts("2020-08-26 13:49:00")), dt.date(2020, 8, 26)),
    ("date-of-string-with-time", d("2020-08-26 13:49"), dt.date(2020, 8, 26)),
    (
        "date_format-spark",
        fn("date_format", s("1998-01-31 13:14:15.012345"), s("HH:mm:ss.SSSSSS")),
        "13:14:15.012345",
    ),
    (
        "date_format-spark-2",
        fn("date_format", ts("1998-01-31 13:14:15.012345"), s("yyyy-MMM-dd hh:mm:ss a")),
        "1998-Jan-31 01:14:15 PM",
    ),
    ("date_format-mysql-T-f", fn("date_format", s("1998-01-31 13:14:15.012345"), s("%T.%f")), "13:14:15.012345"),
    (
        "date_format-mysql-D-r",
        fn("date_format", ts("1998-01-31 13:14:15.012345"), s("%Y-%b-%D %r")),
        "1998-Jan-31st 01:14:15 PM",
    ),
    ("date_format-mysql-names", fn("date_format", d("2020-08-02"), s("%W %M %e %Y")), "Sunday August 2 2020"),
    ("date_format-mysql-short", fn("date_format", d("2020-08-02"), s("%a %b %c/%d/%y")), "Sun Aug 8/02/20"),
    ("date_format-mysql-week", fn("date_format", d("2021-01-01"), s("%w %j %v %x")), "5 001 53 2020"),
    ("date_format-mysql-12h", fn("date_format", ts("2020-08-02 00:05:09"), s("%h %I %l %k %H %p")), "12 12 12 0 00 AM"),
    ("date_format-mysql-literal", fn("date_format", d("2020-08-02"), s("year %Y, 100%% it's")), "year 2020, 100% it's"),
    ("date_format-mysql-1st", fn("date_format", d("2020-08-01"), s("%D")), "1st"),
    ("date_format-mysql-2nd", fn("date_format", d("2020-08-22"), s("%D")), "22nd"),
    ("date_format-mysql-3rd", fn("date_format", d("2020-08-23"), s("%D")), "23rd"),
    ("date_format-mysql-11th", fn("date_format", d("2020-08-11"), s("%D")), "11th"),
    ("date_format-mysql-12th", fn("date_format", d("2020-08-12"), s("%D")), "12th"),
    ("datediff-ts", fn("datediff", ts("2000-01-02 00:00:00"), ts("2000-01-01 23:59:59")), 1),
    ("datediff-mixed", fn("datediff", d("2001-02-01"), ts("2004-01-01 00:00:00")), -1064),
    ("datediff-string", fn("datediff", DATE_26, s("2020-08-27")), -1),
    ("day", fn("day", DATE_26), 26),
    ("dayofmonth", fn("dayofmonth", DATE_26), 26),
    ("day_of_month", fn("day_of_month", DATE_26), 26),
    ("dayofweek", fn("dayofweek", DATE_26), 4),
    ("day_of_week", fn("day_of_week", DATE_26), 4),
    ("dayofyear", fn("dayofyear", DATE_26), 239),
    ("day_of_year", fn("day_of_year", DATE_26), 239),
    ("dayname", fn("dayname", DATE_26), "Wednesday"),
    ("monthname", fn("monthname", DATE_26), "August"),
    ("from_unixtime", fn("from_unixtime", "1220249547"), "2008-09-01 06:12:27"),
    ("from_unixtime-fmt", fn("from_unixtime", "1220249547", s("HH:mm:ss")), "06:12:27"),
    ("from_unixtime-mysql", fn("from_unixtime", "1220249547", s("%H:%i:%s")), "06:12:27"),
    ("hour-time", fn("hour", fn("time", s("01:02:03"))), 1),
    ("hour_of_day", fn("hour_of_day", fn("time", s("01:02:03"))), 1),
    ("hour-ts", fn("hour", ts("01:02:03")), 1),
    ("hour-string", fn("hour", s("2024-07-30 01:02:03")), 1),
    ("hour-date", fn("hour", DATE_26), 0),
    ("minute", fn("minute", fn("time", s("01:02:03"))), 2),
    ("minute_of_hour", fn("minute_of_hour", ts("01:02:03")), 2),
    ("second", fn("second", fn("time", s("01:02:03"))), 3),
    ("second-string", fn("second", s("01:02:03")), 3),
    ("second_of_minute", fn("second_of_minute", ts("01:02:03")), 3),
    ("last_day", fn("last_day", s("2023-02-06")), dt.date(2023, 2, 28)),
    ("makedate-3", fn("makedate", "1945", "5", "9"), dt.date(1945, 5, 9)),
    ("makedate-2", fn("makedate", "2020", "60"), dt.date(2020, 2, 29)),
    ("make_date", fn("make_date", "1945", "5", "9"), dt.date(1945, 5, 9)),
    ("maketime", fn("maketime", "1", "2", "3"), "01:02:03"),
    ("time", fn("time", s("2020-08-26 13:49:00")), "13:49:00"),
    ("month", fn("month", DATE_26), 8),
    ("month_of_year", fn("month_of_year", DATE_26), 8),
    ("quarter", fn("quarter", DATE_26), 3),
    ("year", fn("year", DATE_26), 2020),
    ("timestamp", ts("2020-08-26 13:49:00"), dt.datetime(2020, 8, 26, 13, 49)),
    (
        "timestamp-2",
        fn("timestamp", s("2020-08-26 13:49:00"), fn("time", s("12:15:42"))),
        dt.datetime(2020, 8, 27, 2, 4, 42),
    ),
    ("unix_timestamp", fn("unix_timestamp", ts("1996-11-15 17:05:42")), 848077542),
    ("unix_timestamp-now", fn("unix_timestamp"), lambda v: v > 1_700_000_000),
    ("unix-round-trip", fn("unix_timestamp", fn("from_unixtime", "1700000001")), 1700000001),
    ("week", fn("week", d("2008-02-20")), 8),
    ("week_of_year", fn("week_of_year", d("2008-02-20")), 8),
    ("weekofyear", fn("weekofyear", DATE_26), 35),
    ("weekday", fn("weekday", DATE_26), 2),
    ("weekday-27", fn("weekday", d("2020-08-27")), 3),
    ("date_add-day", fn("date_add", DATE_26, interval_sql("2", "DAY")), dt.date(2020, 8, 28)),
    ("date_add-neg-day", fn("date_add", DATE_26, interval_sql("-2", "DAY")), dt.date(2020, 8, 24)),
    ("date_add-month", fn("date_add", DATE_26, interval_sql("2", "MONTH")), dt.date(2020, 10, 26)),
    ("date_add-year", fn("date_add", DATE_26, interval_sql("2", "YEAR")), dt.date(2022, 8, 26)),
    ("date_add-quarter", fn("date_add", DATE_26, interval_sql("2", "QUARTER")), dt.date(2021, 2, 26)),
    ("date_add-week", fn("date_add", DATE_26, interval_sql("1", "WEEK")), dt.date(2020, 9, 2)),
    ("date_add-literal", fn("date_add", DATE_26, "INTERVAL 1 DAY"), dt.date(2020, 8, 27)),
    (
        "date_add-hour-ts",
        fn("date_add", ts("2020-08-26 01:01:01"), interval_sql("2", "HOUR")),
        dt.datetime(2020, 8, 26, 3, 1, 1),
    ),
    ("date_sub-day", fn("date_sub", DATE_26, interval_sql("2", "DAY")), dt.date(2020, 8, 24)),
    ("date_sub-neg-day", fn("date_sub", DATE_26, interval_sql("-2", "DAY")), dt.date(2020, 8, 28)),
    ("date_sub-month", fn("date_sub", DATE_26, interval_sql("12", "MONTH")), dt.date(2019, 8, 26)),
    ("date_sub-quarter", fn("date_sub", DATE_26, interval_sql("2", "QUARTER")), dt.date(2020, 2, 26)),
    ("date_sub-31", fn("date_sub", d("2008-01-02"), interval_sql("31", "DAY")), dt.date(2007, 12, 2)),
    ("subdate-interval", fn("subdate", d("2008-01-02"), interval_sql("31", "DAY")), dt.date(2007, 12, 2)),
    ("timestampadd-day", fn("timestampadd", s("DAY"), "17", s("2000-01-01 00:00:00")), dt.datetime(2000, 1, 18)),
    ("timestampadd-ts", fn("timestampadd", "DAY", "17", ts("2000-01-01 00:00:00")), dt.datetime(2000, 1, 18)),
    (
        "timestampadd-quarter",
        fn("timestampadd", s("QUARTER"), "-1", s("2000-01-01 00:00:00")),
        dt.datetime(1999, 10, 1),
    ),
    ("timestampdiff-year", fn("timestampdiff", s("YEAR"), s("1997-01-01 00:00:00"), s("2001-03-06 00:00:00")), 4),
    (
        "timestampdiff-second",
        fn("timestampdiff", s("SECOND"), ts("1997-01-01 00:00:23"), ts("1997-01-01 00:00:00")),
        -23,
    ),
    ("extract", fn("extract", s("YEAR"), DATE_26), 2020),
    ("extract-month", fn("extract", "month", DATE_26), 8),
    ("now", fn("now"), is_a(dt.datetime)),
    ("current_timestamp", fn("current_timestamp"), is_a(dt.datetime)),
    ("localtimestamp", fn("localtimestamp"), is_a(dt.datetime)),
    ("localtime", fn("localtime"), is_a(dt.datetime)),
    ("sysdate", fn("sysdate"), is_a(dt.datetime)),
    ("utc_timestamp", fn("utc_timestamp"), is_a(dt.datetime)),
    ("curdate", fn("curdate"), is_a(dt.date)),
    ("current_date", fn("current_date"), is_a(dt.date)),
    ("curdate-is-current_date", f"{fn('curdate')} = {fn('current_date')}", True),
    ("now-is-localtime", f"{fn('now')} = {fn('localtime')}", True),
    ("curtime", fn("curtime"), lambda v: len(v) == 8 and v[2] == ":"),
    ("current_time", fn("current_time"), lambda v: len(v) == 8 and v[5] == ":"),
    ("current_timezone", fn("current_timezone"), "UTC"),
    # relative time, from the reference's table for Monday 2000-01-03 01:01:01
    ("relative-now", relative_timestamp_sql("now", MONDAY), dt.datetime(2000, 1, 3, 1, 1, 1)),
    ("relative--60m", relative_timestamp_sql("-60m", MONDAY), dt.datetime(2000, 1, 3, 0, 1, 1)),
    ("relative--1H", relative_timestamp_sql("-1H", MONDAY), dt.datetime(2000, 1, 3, 0, 1, 1)),
    ("relative-+2wk", relative_timestamp_sql("+2wk", MONDAY), dt.datetime(2000, 1, 17, 1, 1, 1)),
    ("relative--1h@W3", relative_timestamp_sql("-1h@W3", MONDAY), dt.datetime(1999, 12, 29)),
    ("relative-@d", relative_timestamp_sql("@d", MONDAY), dt.datetime(2000, 1, 3)),
    ("relative-@w", relative_timestamp_sql("@w", MONDAY), dt.datetime(2000, 1, 2)),
    ("relative-@w1", relative_timestamp_sql("@w1", MONDAY), dt.datetime(2000, 1, 3)),
    ("relative-@w7", relative_timestamp_sql("@w7", MONDAY), dt.datetime(2000, 1, 2)),
    ("relative-+D@D", relative_timestamp_sql("+D@D", MONDAY), dt.datetime(2000, 1, 4)),
    ("relative-+month", relative_timestamp_sql("+month", MONDAY), dt.datetime(2000, 2, 3, 1, 1, 1)),
    ("relative--1q@q", relative_timestamp_sql("-1q@q", MONDAY), dt.datetime(1999, 10, 1)),
    ("relative--2y@y", relative_timestamp_sql("-2yrs@year", MONDAY), dt.datetime(1998, 1, 1)),
    ("relative-@h", relative_timestamp_sql("+30s@h", MONDAY), dt.datetime(2000, 1, 3, 1)),
    ("relative-@m", relative_timestamp_sql("+59s@m", MONDAY), dt.datetime(2000, 1, 3, 1, 2)),
    ("relative_timestamp", fn("relative_timestamp", s("-1d@d")), is_a(dt.datetime)),
    ("earliest-now", fn("earliest", s("now"), fn("now")), True),
    ("earliest-tomorrow", fn("earliest", s("+1d"), fn("now")), False),
    ("latest-now", fn("latest", s("now"), fn("now")), True),
    ("latest-yesterday", fn("latest", s("-1d@d"), fn("now")), False),
    ("latest-tomorrow", fn("latest", s("+D@D"), fn("now")), True),
    # condition
    ("isnull-null", fn("isnull", NULL), True),
    ("isnull-value", fn("isnull", s("Pyrami")), False),
    ("isnotnull", fn("isnotnull", s("Pyrami")), True),
    ("isnotnull-null", fn("isnotnull", NULL), False),
    ("ispresent", fn("ispresent", s("Pyrami")), True),
    ("ispresent-null", fn("ispresent", NULL), False),
    ("ifnull-null", fn("ifnull", NULL, s("default")), "default"),
    ("ifnull-value", fn("ifnull", s("Pyrami"), s("default")), "Pyrami"),
    ("nullif-same", fn("nullif", s("Pyrami"), s("Pyrami")), None),
    ("nullif-other", fn("nullif", s("Netagy"), s("Pyrami")), "Netagy"),
    ("if-true", fn("if", "true", s("Amber"), s("Duke")), "Amber"),
    ("if-false", fn("if", "false", s("Amber"), s("Duke")), "Duke"),
    ("if-condition", fn("if", f"32 > 30 AND {fn('isnotnull', s('Pyrami'))}", "true", "false"), True),
    ("coalesce", fn("coalesce", NULL, NULL, s("Canada")), "Canada"),
    ("coalesce-null", fn("coalesce", NULL, NULL), None),
    ("isempty-full", fn("isempty", s("full")), False),
    ("isempty-empty", fn("isempty", s("")), True),
    ("isempty-space", fn("isempty", s(" ")), False),
    ("isempty-null", fn("isempty", NULL), True),
    ("isblank-full", fn("isblank", s("full")), False),
    ("isblank-empty", fn("isblank", s("")), True),
    ("isblank-space", fn("isblank", s("   ")), True),
    ("isblank-null", fn("isblank", NULL), True),
    ("typeof-date", fn("typeof", d("2008-04-14")), "date"),
    ("typeof-int", fn("typeof", "1"), "int"),
    ("typeof-now", fn("typeof", fn("now")), "timestamp"),
    # cryptographic
    ("md5", fn("md5", s("hello")), "5d41402abc4b2a76b9719d911017c592"),
    ("md5-spark", fn("md5", s("Spark")), "8cde774d6f7333752ed72cacddb05126"),
    ("sha1", fn("sha1", s("hello")), "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d"),
    ("sha2-256", fn("sha2", s("hello"), "256"), "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"),
    (
        "sha2-512",
        fn("sha2", s("hello"), "512"),
        "9b71d224bd62f3785d96d46ad3ea3d73319bfbc2890caadae2dff72519673ca7"
        "2323c3d99ba5c11d7c7acc6e14b8c5da0c4663475c2e5c3adef46f73bcdec043",
    ),
    # json
    ("json", fn("json", s('[1,2,3,{"f1":1,"f2":[5,6]},4]')), '[1,2,3,{"f1":1,"f2":[5,6]},4]'),
    ("json-invalid", fn("json", s('{"invalid": "json"')), None),
    ("json_array_length", fn("json_array_length", s("[1,2,3,4]")), 4),
    ("json_array_length-nested", fn("json_array_length", s('[1,2,3,{"f1":1,"f2":[5,6]},4]')), 5),
    ("json_array_length-object", fn("json_array_length", s('{"key": 1}')), None),
    ("json_extract", fn("json_extract", s('{"a":"b"}'), s("$.a")), "b"),
    ("json_extract-index", fn("json_extract", s('{"a":[{"b":1},{"b":2}]}'), s("$.a[1].b")), "2"),
    ("json_extract-wildcard", fn("json_extract", s('{"a":[{"b":1},{"b":2}]}'), s("$.a[*].b")), "[1,2]"),
    ("json_extract-invalid", fn("json_extract", s('{"invalid": "json"'), s("$")), None),
    ("json_keys", fn("json_keys", s('{"f1":"abc","f2":{"f3":"a","f4":"b"}}')), ["f1", "f2"]),
    ("json_keys-array", fn("json_keys", s('[1,2,3,{"f1":1,"f2":[5,6]},4]')), None),
    ("json_valid", fn("json_valid", s("[1,2,3,4]")), True),
    ("json_valid-invalid", fn("json_valid", s('{"invalid": "json"')), False),
    ("json_object", fn("to_json_string", fn("json_object", s("key"), "123.45")), '{"key":123.45}'),
    (
        "json_object-nested",
        fn("to_json_string", fn("json_object", s("outer"), fn("json_object", s("inner"), "123.45"))),
        '{"outer":{"inner":123.45}}',
    ),
    ("json_array", fn("to_json_string", fn("json_array", "1", "2", "3")), "[1,2,3]"),
    # collection and lambda
    ("array", fn("array", "true", "false", "true"), [True, False, True]),
    ("array_length", fn("array_length", fn("array", "1", "2", "3", "4")), 4),
    ("array_length-empty", fn("array_length", fn("array")), 0),
    ("forall-false", fn("forall", fn("array", "1", "-1", "2"), "x -> x > 0"), False),
    ("forall-true", fn("forall", fn("array", "1", "3", "2"), "x -> x > 0"), True),
    ("exists-true", fn("exists", fn("array", "1", "-1", "2"), "x -> x > 0"), True),
    ("exists-false", fn("exists", fn("array", "-1", "-3", "-2"), "x -> x > 0"), False),
    ("filter", fn("filter", fn("array", "1", "-1", "2"), "x -> x > 0"), [1, 2]),
    ("filter-empty", fn("filter", fn("array", "-1", "-3", "-2"), "x -> x > 0"), []),
    ("transform", fn("transform", fn("array", "1", "2", "3"), "x -> x + 1"), [2, 3, 4]),
    ("transform-index", fn("transform", fn("array", "1", "2", "3"), "(x, i) -> x + i"), [1, 3, 5]),
    ("reduce", fn("reduce", fn("array", "1", "2", "3"), "0", "(acc, x) -> acc + x"), 6),
    ("reduce-start", fn("reduce", fn("array", "1", "2", "3"), "10", "(acc, x) -> acc + x"), 16),
    ("reduce-finish", fn("reduce", fn("array", "1", "2", "3"), "0", "(acc, x) -> acc + x", "acc -> acc * 10"), 60),
    # ip
    ("cidrmatch", fn("cidrmatch", s("192.169.1.5"), s("192.169.1.0/24")), True),
    ("cidrmatch-outside", fn("cidrmatch", s("192.169.2.5"), s("192.169.1.0/24")), False),
    ("cidrmatch-all", fn("cidrmatch", s("10.0.0.1"), s("0.0.0.0/0")), True),
    ("cidrmatch-host", fn("cidrmatch", s("10.0.0.1"), s("10.0.0.1/32")), True),
    ("cidrmatch-host-no", fn("cidrmatch", s("10.0.0.2"), s("10.0.0.1/32")), False),
    ("cidrmatch-8", fn("cidrmatch", s("10.255.3.4"), s("10.0.0.0/8")), True),
    # IPv6, as the reference's documentation shows: compressed and full forms alike
    ("cidrmatch-v6", fn("cidrmatch", s("2003:0db8:0000:0000:0000:0000:0000:0000"), s("2003:db8::/32")), True),
    ("cidrmatch-v6-short", fn("cidrmatch", s("2003:db8::1"), s("2003:db8::/32")), True),
    ("cidrmatch-v6-outside", fn("cidrmatch", s("2003:db9::1"), s("2003:db8::/32")), False),
    ("cidrmatch-v6-bits", fn("cidrmatch", s("2003:db8:8000::1"), s("2003:db8:8000::/33")), True),
    ("cidrmatch-v6-bits-no", fn("cidrmatch", s("2003:db8:7fff::1"), s("2003:db8:8000::/33")), False),
    ("cidrmatch-v6-loopback", fn("cidrmatch", s("::1"), s("::1/128")), True),
    # cast
    ("cast-bool-string", cast_sql("true", "string"), "true"),
    ("cast-int-string", cast_sql("1", "string"), "1"),
    ("cast-date-string", cast_sql(cast_sql(s("2012-08-07"), "date"), "string"), "2012-08-07"),
    ("cast-bool-int", cast_sql("true", "integer"), 1),
    ("cast-string-int", cast_sql(s("1"), "int"), 1),
    ("cast-date", cast_sql(s("2012-08-07"), "date"), dt.date(2012, 8, 7)),
    ("cast-timestamp", cast_sql(s("2012-08-07 01:01:01"), "timestamp"), dt.datetime(2012, 8, 7, 1, 1, 1)),
    ("cast-chained", cast_sql(cast_sql("true", "string"), "boolean"), True),
    ("cast-long", cast_sql(s("3"), "long"), 3),
    ("cast-double", cast_sql(s("1.5"), "double"), 1.5),
    ("cast-float", cast_sql(s("1.5"), "float"), 1.5),
    ("cast-short", cast_sql(s("7"), "short"), 7),
    ("cast-byte", cast_sql(s("7"), "byte"), 7),
    ("cast-time", cast_sql(s("2012-08-07 01:02:03"), "time"), "01:02:03"),
    # isempty and isblank take any type: a number is never empty (it is not cast from '')
    ("isempty-number", fn("isempty", "0"), False),
    ("isempty-null-number", fn("isempty", "CAST(NULL AS INT)"), True),
    ("isblank-number", fn("isblank", "42"), False),
    ("isempty-string", fn("isempty", s("")), True),
    ("isblank-spaces", fn("isblank", s("   ")), True),
    # MySQL date and time functions the reference's grammar names (MySQL's documented values)
    ("addtime", fn("addtime", ts("2007-12-31 23:59:59"), s("00:00:01")), dt.datetime(2008, 1, 1, 0, 0, 0)),
    ("subtime", fn("subtime", ts("2008-01-01 00:00:00"), s("01:00:00")), dt.datetime(2007, 12, 31, 23, 0, 0)),
    ("convert_tz", fn("convert_tz", ts("2004-01-01 12:00:00"), s("+00:00"), s("+10:00")), dt.datetime(2004, 1, 1, 22)),
    ("datetime", fn("datetime", s("2008-12-25 05:30:00")), dt.datetime(2008, 12, 25, 5, 30)),
    ("to_days", fn("to_days", s("2000-07-03")), 730669),
    ("from_days", fn("from_days", "730669"), dt.date(2000, 7, 3)),
    ("to_seconds", fn("to_seconds", ts("2009-11-29 13:43:32")), 63426721412),
    ("microsecond", fn("microsecond", ts("2009-12-31 23:59:59.000010")), 10),
    ("minute_of_day", fn("minute_of_day", ts("2020-08-26 02:03:04")), 123),
    ("period_add", fn("period_add", "200801", "2"), 200803),
    ("period_add-yymm", fn("period_add", "0812", "2"), 200902),
    ("period_diff", fn("period_diff", "200802", "200703"), 11),
    ("sec_to_time", fn("sec_to_time", "2378"), "00:39:38"),
    ("time_to_sec", fn("time_to_sec", s("22:23:00")), 80580),
    ("timediff", fn("timediff", ts("2008-12-31 23:59:59"), ts("2008-12-30 01:01:01")), "46:58:58"),
    ("timediff-negative", fn("timediff", ts("2000-01-01 00:00:00"), ts("2000-01-01 00:00:01")), "-00:00:01"),
    ("str_to_date", fn("str_to_date", s("01,5,2013"), s("%d,%c,%Y")), dt.datetime(2013, 5, 1)),
    ("time_format", fn("time_format", s("1998-01-31 13:14:15"), s("%H:%i:%s")), "13:14:15"),
    ("utc_date", fn("utc_date"), is_a(dt.date)),
    ("utc_time", fn("utc_time"), lambda v: isinstance(v, str) and len(v) == 8),
    ("yearweek", fn("yearweek", s("2019-12-30")), 202001),
    # interval literals in date arithmetic
    ("date_add-interval", fn("date_add", d("1993-07-01"), interval_sql("3", "MONTH")), dt.date(1993, 10, 1)),
    ("date_sub-interval", fn("date_sub", d("1998-12-01"), interval_sql("90", "DAY")), dt.date(1998, 9, 2)),
    ("adddate-days", fn("adddate", d("1994-01-01"), "365"), dt.date(1995, 1, 1)),
]


def _matches(actual: Any, expected: Expected) -> bool:
    if callable(expected):
        return bool(actual is not None and expected(actual))
    if isinstance(expected, bool) or expected is None:
        return actual is expected  # True is not 1 here
    if isinstance(expected, float):
        return actual is not None and float(actual) == pytest.approx(expected)
    return bool(actual == expected)  # an int also matches Spark's Decimal of the same value


def _evaluate_all(spark: Any, cases: Sequence[tuple[str, str, Expected]]) -> dict[str, Any]:
    """Each case's value (or the exception evaluating it raised), in one job when all succeed."""
    select = ", ".join(f"{sql} AS c{i}" for i, (_, sql, _) in enumerate(cases))
    try:
        row = spark.sql("SELECT " + select).collect()[0]
        return {case_id: row[i] for i, (case_id, _, _) in enumerate(cases)}
    except Exception:  # noqa: BLE001 - one bad case: find it by evaluating each alone
        out: dict[str, Any] = {}
        for case_id, sql, _ in cases:
            try:
                out[case_id] = spark.sql("SELECT " + sql).collect()[0][0]
            except Exception as error:  # noqa: BLE001 - reported by the case's test
                out[case_id] = error
        return out


@pytest.fixture(scope="module")
def values(spark: Any) -> dict[str, Any]:
    return _evaluate_all(spark, CASES)


def test_case_ids_are_unique() -> None:
    ids = [case_id for case_id, _, _ in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("case_id", "sql", "expected"), CASES, ids=[c[0] for c in CASES])
def test_scalar_function_on_spark(values: dict[str, Any], case_id: str, sql: str, expected: Expected) -> None:
    actual = values[case_id]
    if isinstance(actual, Exception):
        pytest.fail(f"{sql} failed on Spark: {str(actual).splitlines()[0]}")
    assert _matches(actual, expected), f"{sql} = {actual!r}, expected {expected!r}"


def test_cidrmatch_refuses_mixed_families(spark: Any) -> None:
    with pytest.raises(Exception, match="both IPv4 or both IPv6"):
        spark.sql("SELECT " + fn("cidrmatch", s("10.0.0.1"), s("2003:db8::/32"))).collect()


# The reference's accounts sample (stats examples).
ACCOUNTS = (
    "(VALUES (1, 'Amber', 32, 'M'), (6, 'Hattie', 36, 'M'), (13, 'Nanette', 28, 'F'), (18, 'Dale', 33, 'M'))"
    " AS accounts(account_number, firstname, age, gender)"
)

AGGREGATES: list[tuple[str, str, Expected]] = [
    ("count()", aggregate_sql("count", []), 4),
    ("count(age)", aggregate_sql("count", ["age"]), 4),
    ("count(distinct gender)", aggregate_sql("count", ["gender"], distinct=True), 2),
    ("dc(gender)", aggregate_sql("dc", ["gender"]), 2),
    ("distinct_count(gender)", aggregate_sql("distinct_count", ["gender"]), 2),
    ("distinct_count_approx(age)", aggregate_sql("distinct_count_approx", ["age"]), 4),
    ("sum(age)", aggregate_sql("sum", ["age"]), 129),
    ("avg(age)", aggregate_sql("avg", ["age"]), 32.25),
    ("mean(age)", aggregate_sql("mean", ["age"]), 32.25),
    ("max(age)", aggregate_sql("max", ["age"]), 36),
    ("min(age)", aggregate_sql("min", ["age"]), 28),
    ("stddev_samp(age)", aggregate_sql("stddev_samp", ["age"]), 3.304037933599835),
    ("stddev_pop(age)", aggregate_sql("stddev_pop", ["age"]), 2.8613807855648994),
    ("stddev(age)", aggregate_sql("stddev", ["age"]), 2.8613807855648994),
    ("var_samp(age)", aggregate_sql("var_samp", ["age"]), 10.916666666666666),
    ("var_pop(age)", aggregate_sql("var_pop", ["age"]), 8.1875),
    ("variance(age)", aggregate_sql("variance", ["age"]), 8.1875),
    # The value at its rank, as the reference's documentation gives it (docs/ppl.md), not an interpolation.
    ("percentile(age, 50)", aggregate_sql("percentile", ["age", "50"]), 32),
    ("percentile_approx(age, 90)", aggregate_sql("percentile_approx", ["age", "90"]), 36),
    (
        "take(firstname)",
        aggregate_sql("take", ["firstname"]),
        lambda v: sorted(v) == ["Amber", "Dale", "Hattie", "Nanette"],
    ),
    ("take(firstname, 2)", aggregate_sql("take", ["firstname", "2"]), lambda v: len(v) == 2),
]


def test_aggregations_on_spark(spark: Any) -> None:
    select = ", ".join(f"{sql} AS a{i}" for i, (_, sql, _) in enumerate(AGGREGATES))
    row = spark.sql(f"SELECT {select} FROM {ACCOUNTS}").collect()[0]
    wrong = [
        f"{label}: {sql} = {row[i]!r}, expected {expected!r}"
        for i, (label, sql, expected) in enumerate(AGGREGATES)
        if not _matches(row[i], expected)
    ]
    assert not wrong, "\n".join(wrong)


def test_aggregations_by_group_on_spark(spark: Any) -> None:
    """The reference's ``stats ... by gender`` examples."""
    avg, total = aggregate_sql("avg", ["age"]), aggregate_sql("sum", ["age"])
    p90 = aggregate_sql("percentile_approx", ["age", "90"])
    rows = spark.sql(f"SELECT gender, {avg}, {total}, {p90} FROM {ACCOUNTS} GROUP BY gender ORDER BY gender").collect()
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("F", 28.0, 28, 28),
        ("M", pytest.approx(33.666666666666664), 101, 36),
    ]
