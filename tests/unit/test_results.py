"""Result encoding from Spark schemas and the Python values ``collect()`` returns (no Spark)."""

from __future__ import annotations

import datetime as dt
import json
import struct
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql import types as t

from flint_repl_job.results import dumps, encode, to_json_value, type_name


def f32(value: float) -> float:
    """A float as collect() returns a FloatType value: the nearest float32, widened."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def one(data_type: t.DataType, value: Any) -> str:
    """The lossless JSON text of one value of one column."""
    return dumps(to_json_value(value, data_type))


def lossless_rows(schema: t.StructType, rows: list[Any]) -> list[list[Any]]:
    _, _, lossless = encode(schema, rows)
    return json.loads(lossless.datarows, parse_float=Decimal)


# -- scalars --------------------------------------------------------------------------------------


def test_decimals_are_exact() -> None:
    value = Decimal("12345678901234567890.123456789")
    assert one(t.DecimalType(38, 9), value) == "12345678901234567890.123456789"
    schema = t.StructType([t.StructField("d", t.DecimalType(38, 9))])
    assert lossless_rows(schema, [Row(d=value)]) == [[value]]


@pytest.mark.parametrize(
    "value", [Decimal("-0.000000001"), Decimal("0E-9"), Decimal("1E-9"), Decimal("-99999999999999999999.999999999")]
)
def test_decimals_are_valid_json_with_the_same_value(value: Decimal) -> None:
    text = one(t.DecimalType(38, 9), value)
    assert Decimal(json.loads(text, parse_float=Decimal)) == value


@pytest.mark.parametrize("value", [2**53 + 1, 2**63 - 1, -(2**63), 9007199254740993])
def test_longs_beyond_2_pow_53_are_exact(value: int) -> None:
    text = one(t.LongType(), value)
    assert text == str(value)
    assert json.loads(text) == value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.1, "1.1"),
        (0.1, "0.1"),
        (3.4028234663852886e38, "3.4028235e+38"),
        (1e-45, "1e-45"),
        (100.0, "100.0"),
        (-2.5, "-2.5"),
        (16777216.0, "16777216.0"),
    ],
)
def test_float32_prints_the_shortest_text_that_reads_back(value: float, text: str) -> None:
    widened = f32(value)
    assert one(t.FloatType(), widened) == text
    assert f32(float(text)) == widened


def test_float32_without_the_shortest_repr_would_be_long() -> None:
    """The premise: a float32 widened to a double prints with noise digits."""
    assert repr(f32(1.1)) == "1.100000023841858"


@pytest.mark.parametrize("data_type", [t.DoubleType(), t.FloatType()], ids=["double", "float"])
def test_non_finite_floats_are_strings(data_type: t.DataType) -> None:
    assert one(data_type, float("nan")) == '"NaN"'
    assert one(data_type, float("inf")) == '"Infinity"'
    assert one(data_type, float("-inf")) == '"-Infinity"'


def test_doubles_round_trip() -> None:
    for value in (0.1, 1e308, 5e-324, -0.0, 123456789.123456789):
        assert float(one(t.DoubleType(), value)) == value


def test_booleans_and_ints() -> None:
    assert one(t.BooleanType(), True) == "true"
    assert one(t.BooleanType(), False) == "false"
    assert one(t.IntegerType(), 0) == "0"
    assert one(t.ShortType(), -32768) == "-32768"
    assert one(t.ByteType(), 127) == "127"


def test_binary_is_base64() -> None:
    assert one(t.BinaryType(), bytearray(b"\x00\xff\x10binary")) == '"AP8QYmluYXJ5"'
    assert one(t.BinaryType(), b"") == '""'


def test_date_and_timestamp_text() -> None:
    assert one(t.DateType(), dt.date(2024, 2, 29)) == '"2024-02-29"'
    assert one(t.TimestampType(), dt.datetime(2024, 1, 2, 3, 4, 5)) == '"2024-01-02 03:04:05"'
    assert one(t.TimestampType(), dt.datetime(2024, 1, 2, 3, 4, 5, 120000)) == '"2024-01-02 03:04:05.12"'
    assert one(t.TimestampNTZType(), dt.datetime(1999, 12, 31, 23, 59, 59, 1)) == '"1999-12-31 23:59:59.000001"'


@pytest.mark.parametrize(
    "value",
    [
        'he said "hi"',
        "it's",
        'back\\slash \\" both',
        "ünïcödé 日本語 😀",
        "tab\tnew\nline\r\x00\x1f",
        "</script>",
        "",
        "'",
        '"',
    ],
)
def test_strings_round_trip(value: str) -> None:
    text = one(t.StringType(), value)
    assert json.loads(text) == value
    assert "😀" not in value or "😀" in text  # unicode is written as is, not escaped


def test_nulls() -> None:
    for data_type in (t.StringType(), t.LongType(), t.DecimalType(10, 2), t.ArrayType(t.IntegerType()), t.NullType()):
        assert one(data_type, None) == "null"


# -- nested ---------------------------------------------------------------------------------------


NESTED = t.StructType(
    [
        t.StructField("id", t.LongType()),
        t.StructField("tags", t.ArrayType(t.StringType())),
        t.StructField("scores", t.MapType(t.StringType(), t.DecimalType(20, 2))),
        t.StructField(
            "info",
            t.StructType(
                [
                    t.StructField("name", t.StringType()),
                    t.StructField("at", t.TimestampType()),
                    t.StructField("f", t.FloatType()),
                    t.StructField("raw", t.BinaryType()),
                ]
            ),
        ),
        t.StructField("matrix", t.ArrayType(t.ArrayType(t.LongType()))),
        t.StructField("by_id", t.MapType(t.IntegerType(), t.ArrayType(t.StringType()))),
        t.StructField("by_date", t.MapType(t.DateType(), t.BooleanType())),
    ]
)


def test_nested_values() -> None:
    row = Row(
        id=2**62,
        tags=["a", None, 'q"uote'],
        scores={"x": Decimal("123456789012345678.91"), "y": None},
        info=Row(name="ñ", at=dt.datetime(2020, 5, 6, 7, 8, 9), f=f32(1.1), raw=bytearray(b"\x01")),
        matrix=[[1, 2], [], [2**63 - 1]],
        by_id={1: ["one"], 2: []},
        by_date={dt.date(2024, 1, 1): True},
    )
    assert lossless_rows(NESTED, [row]) == [
        [
            2**62,
            ["a", None, 'q"uote'],
            {"x": Decimal("123456789012345678.91"), "y": None},
            {"name": "ñ", "at": "2020-05-06 07:08:09", "f": Decimal("1.1"), "raw": "AQ=="},
            [[1, 2], [], [2**63 - 1]],
            {"1": ["one"], "2": []},
            {"2024-01-01": True},
        ]
    ]


def test_nested_nulls() -> None:
    row = Row(id=None, tags=None, scores=None, info=None, matrix=[None, [None]], by_id={3: None}, by_date=None)
    assert lossless_rows(NESTED, [row]) == [[None, None, None, None, [None, [None]], {"3": None}, None]]


# -- the whole encoding ---------------------------------------------------------------------------


SCHEMA = t.StructType(
    [
        t.StructField("name", t.StringType()),
        t.StructField("n", t.LongType()),
        t.StructField("price", t.DecimalType(38, 9)),
        t.StructField("ratio", t.FloatType()),
        t.StructField("ts", t.TimestampNTZType()),
        t.StructField("nothing", t.NullType()),
    ]
)
ROWS = [
    Row(
        name='it\'s "quoted"',
        n=2**53 + 1,
        price=Decimal("12345678901234567890.123456789"),
        ratio=f32(1.1),
        ts=dt.datetime(2024, 1, 2),
        nothing=None,
    ),
    Row(name=None, n=None, price=None, ratio=None, ts=None, nothing=None),
]


def test_lossless_form() -> None:
    _, _, lossless = encode(SCHEMA, ROWS)
    assert [(c.name, c.type) for c in lossless.schema_] == [
        ("name", "string"),
        ("n", "long"),
        ("price", "decimal"),
        ("ratio", "float"),
        ("ts", "timestamp"),
        ("nothing", "null"),
    ]
    assert lossless.total == 2
    assert lossless.datarows == (
        '[["it\'s \\"quoted\\"",9007199254740993,12345678901234567890.123456789,1.1,"2024-01-02 00:00:00",null],'
        "[null,null,null,null,null,null]]"
    )
    assert json.loads(lossless.datarows, parse_float=Decimal)[0][:3] == [
        'it\'s "quoted"',
        9007199254740993,
        Decimal("12345678901234567890.123456789"),
    ]


def test_reference_encoding_single_quotes_and_no_null_columns() -> None:
    result, _, _ = encode(SCHEMA, ROWS)
    assert result == [
        "{'name':'it's \\'quoted\\'','n':9007199254740993,'price':12345678901234567890.123456789,'ratio':1.1,'ts':'2024-01-02 00:00:00'}",
        "{}",
    ]
    assert all('"' not in r for r in result)


def test_reference_encoding_is_readable_when_no_quote_is_in_a_value() -> None:
    """The reference plugin turns single quotes back into double quotes and parses JSON."""
    schema = t.StructType([t.StructField("a", t.IntegerType()), t.StructField("b", t.StringType())])
    result, reference_schema, _ = encode(schema, [Row(a=1, b="x y"), Row(a=None, b="z")])
    assert [json.loads(r.replace("'", '"')) for r in result] == [{"a": 1, "b": "x y"}, {"b": "z"}]
    assert [json.loads(s.replace("'", '"')) for s in reference_schema] == [
        {"column_name": "a", "data_type": "integer"},
        {"column_name": "b", "data_type": "string"},
    ]


def test_reference_schema_strings_use_spark_type_names() -> None:
    _, reference_schema, _ = encode(SCHEMA, [])
    assert reference_schema == [
        "{'column_name':'name','data_type':'string'}",
        "{'column_name':'n','data_type':'long'}",
        "{'column_name':'price','data_type':'decimal'}",
        "{'column_name':'ratio','data_type':'float'}",
        "{'column_name':'ts','data_type':'timestamp_ntz'}",
        "{'column_name':'nothing','data_type':'void'}",
    ]


def test_empty_result() -> None:
    result, reference_schema, lossless = encode(SCHEMA, [])
    assert result == []
    assert len(reference_schema) == 6
    assert lossless.datarows == "[]" and lossless.total == 0


@pytest.mark.parametrize(
    ("data_type", "name"),
    [
        (t.BooleanType(), "boolean"),
        (t.LongType(), "long"),
        (t.IntegerType(), "integer"),
        (t.ShortType(), "short"),
        (t.ByteType(), "byte"),
        (t.DoubleType(), "double"),
        (t.FloatType(), "float"),
        (t.StringType(), "string"),
        (t.DateType(), "date"),
        (t.TimestampType(), "timestamp"),
        (t.TimestampNTZType(), "timestamp"),
        (t.BinaryType(), "binary"),
        (t.DecimalType(10, 2), "decimal"),
        (t.ArrayType(t.LongType()), "array"),
        (t.MapType(t.StringType(), t.LongType()), "map"),
        (t.StructType([]), "struct"),
        (t.NullType(), "null"),
    ],
)
def test_schema_type_names(data_type: t.DataType, name: str) -> None:
    assert type_name(data_type) == name


def test_dumps_refuses_unknown_values() -> None:
    with pytest.raises(TypeError):
        dumps(object())
