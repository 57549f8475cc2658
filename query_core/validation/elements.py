"""The grammar elements a statement is made of, and how a function name is classified.

The element names and descriptions are the reference's (opensearch-project/sql: its SQL and PPL
grammar elements); the descriptions are what refusal messages say: ``TRANSFORM is not allowed.``,
``Misc functions (reflect) is not allowed.``. A few elements are this product's own (the checks the
reference does not make: locations outside the warehouse, protected configuration keys, ...); see
docs/validation.md for the whole table.
"""

from __future__ import annotations

import functools
import json
from enum import Enum
from importlib import resources


class GrammarElement(Enum):
    """A part of a statement that a datasource's deny list can refuse.

    The value is the description used in messages; the name is what deny lists and the
    ``validation.allow`` datasource property use."""

    # -- SQL: the reference's elements --------------------------------------------------------
    ALTER_NAMESPACE = "ALTER (DATABASE|TABLE|NAMESPACE)"
    ALTER_VIEW = "ALTER VIEW"
    CREATE_NAMESPACE = "CREATE (DATABASE|TABLE|NAMESPACE)"
    CREATE_FUNCTION = "CREATE FUNCTION"
    CREATE_VIEW = "CREATE VIEW"
    DROP_NAMESPACE = "DROP (DATABASE|TABLE|NAMESPACE)"
    DROP_FUNCTION = "DROP FUNCTION"
    DROP_VIEW = "DROP VIEW"
    DROP_TABLE = "DROP TABLE"
    REPAIR_TABLE = "REPAIR TABLE"
    TRUNCATE_TABLE = "TRUNCATE TABLE"
    INSERT = "INSERT"
    LOAD = "LOAD"
    EXPLAIN = "EXPLAIN"
    WITH = "WITH"
    CLUSTER_BY = "CLUSTER BY"
    DISTRIBUTE_BY = "DISTRIBUTE BY"
    HINTS = "HINTS"
    INLINE_TABLE = "Inline Table(VALUES)"
    FILE = "File"
    INNER_JOIN = "INNER JOIN"
    CROSS_JOIN = "CROSS JOIN"
    LEFT_OUTER_JOIN = "LEFT OUTER JOIN"
    LEFT_SEMI_JOIN = "LEFT SEMI JOIN"
    RIGHT_OUTER_JOIN = "RIGHT OUTER JOIN"
    FULL_OUTER_JOIN = "FULL OUTER JOIN"
    LEFT_ANTI_JOIN = "LEFT ANTI JOIN"
    TABLESAMPLE = "TABLESAMPLE"
    TABLE_VALUED_FUNCTION = "Table-valued function"
    LATERAL_VIEW = "LATERAL VIEW"
    LATERAL_SUBQUERY = "LATERAL SUBQUERY"
    TRANSFORM = "TRANSFORM"
    MANAGE_RESOURCE = "Resource management statements"
    ANALYZE_TABLE = "ANALYZE TABLE(S)"
    CACHE_TABLE = "CACHE TABLE"
    CLEAR_CACHE = "CLEAR CACHE"
    DESCRIBE_NAMESPACE = "DESCRIBE (NAMESPACE|DATABASE|SCHEMA)"
    DESCRIBE_FUNCTION = "DESCRIBE FUNCTION"
    DESCRIBE_QUERY = "DESCRIBE QUERY"
    DESCRIBE_TABLE = "DESCRIBE TABLE"
    REFRESH_RESOURCE = "REFRESH"
    REFRESH_TABLE = "REFRESH TABLE"
    REFRESH_FUNCTION = "REFRESH FUNCTION"
    RESET = "RESET"
    SET = "SET"
    SHOW_COLUMNS = "SHOW COLUMNS"
    SHOW_CREATE_TABLE = "SHOW CREATE TABLE"
    SHOW_NAMESPACES = "SHOW (DATABASES|SCHEMAS)"
    SHOW_FUNCTIONS = "SHOW FUNCTIONS"
    SHOW_PARTITIONS = "SHOW PARTITIONS"
    SHOW_TABLE_EXTENDED = "SHOW TABLE EXTENDED"
    SHOW_TABLES = "SHOW TABLES"
    SHOW_TBLPROPERTIES = "SHOW TBLPROPERTIES"
    SHOW_VIEWS = "SHOW VIEWS"
    UNCACHE_TABLE = "UNCACHE TABLE"
    MAP_FUNCTIONS = "Map functions"
    BITWISE_FUNCTIONS = "Bitwise functions"
    CSV_FUNCTIONS = "CSV functions"
    GENERATOR_FUNCTIONS = "Generator functions"
    MISC_FUNCTIONS = "Misc functions"
    OTHER_FUNCTIONS = "Other functions"
    UDF = "User Defined functions"

    # -- PPL: the reference's elements ----------------------------------------------------------
    PATTERNS_COMMAND = "patterns command"
    JOIN_COMMAND = "join command"
    LOOKUP_COMMAND = "lookup command"
    SUBQUERY_COMMAND = "subquery command"
    FLATTEN_COMMAND = "flatten command"
    FILLNULL_COMMAND = "fillnull command"
    EXPAND_COMMAND = "expand command"
    DESCRIBE_COMMAND = "describe command"
    IPADDRESS_FUNCTIONS = "IP address functions"
    JSON_FUNCTIONS = "JSON functions"
    LAMBDA_FUNCTIONS = "Lambda functions"

    # -- this product's own ---------------------------------------------------------------------
    #: A table or database LOCATION (or a ``path`` option) outside the warehouse root.
    LOCATION = "LOCATION outside the warehouse"
    #: A Flint index's ``checkpoint_location`` outside the checkpoint root.
    CHECKPOINT_LOCATION = "checkpoint_location outside the checkpoint root"
    #: ``INSERT OVERWRITE [LOCAL] DIRECTORY``: a write to any path.
    INSERT_OVERWRITE_DIRECTORY = "INSERT OVERWRITE DIRECTORY"
    #: SET or RESET (or a read with ``SET key``) of a key that is not one of the settable keys.
    PROTECTED_CONFIG = "SET/RESET of a protected key"
    #: A data source provider, SerDe or storage format class that is not on the allow list.
    DATA_SOURCE = "Data source provider"
    #: A data source option that is not one of its provider's.
    DATA_SOURCE_OPTION = "Data source option"
    #: A table, SerDe or database property that is not on the allow list.
    TABLE_PROPERTY = "Table property"
    #: A Flint ``WITH`` option, or a key of its ``extra_options``, that is not on the allow list.
    FLINT_OPTION = "Flint index option"
    #: A statement or a name only known when the statement runs (EXECUTE IMMEDIATE of a variable,
    #: IDENTIFIER() of an expression): it cannot be checked before it runs.
    DYNAMIC_SQL = "A statement or name built at run time"

    @property
    def description(self) -> str:
        return str(self.value)


#: The elements of each language, for documentation and property parsing.
PPL_ELEMENTS = frozenset(
    {
        GrammarElement.PATTERNS_COMMAND,
        GrammarElement.JOIN_COMMAND,
        GrammarElement.LOOKUP_COMMAND,
        GrammarElement.SUBQUERY_COMMAND,
        GrammarElement.FLATTEN_COMMAND,
        GrammarElement.FILLNULL_COMMAND,
        GrammarElement.EXPAND_COMMAND,
        GrammarElement.DESCRIBE_COMMAND,
        GrammarElement.IPADDRESS_FUNCTIONS,
        GrammarElement.JSON_FUNCTIONS,
        GrammarElement.LAMBDA_FUNCTIONS,
    }
)
PRODUCT_ELEMENTS = frozenset(
    {
        GrammarElement.LOCATION,
        GrammarElement.CHECKPOINT_LOCATION,
        GrammarElement.INSERT_OVERWRITE_DIRECTORY,
        GrammarElement.PROTECTED_CONFIG,
        GrammarElement.DYNAMIC_SQL,
        GrammarElement.DATA_SOURCE,
        GrammarElement.DATA_SOURCE_OPTION,
        GrammarElement.TABLE_PROPERTY,
        GrammarElement.FLINT_OPTION,
    }
)


def element_named(name: str) -> GrammarElement:
    """The element called ``name`` (case-insensitive); ``ValueError`` for an unknown name."""
    try:
        return GrammarElement[name.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown grammar element {name.strip()!r}") from None


# -- functions ----------------------------------------------------------------------------------


class FunctionType(Enum):
    """The reference's function types; only some of them are grammar elements."""

    AGGREGATE = "Aggregate"
    WINDOW = "Window"
    ARRAY = "Array"
    MAP = "Map"
    DATE_TIMESTAMP = "Date and Timestamp"
    JSON = "JSON"
    MATH = "Math"
    STRING = "String"
    CONDITIONAL = "Conditional"
    BITWISE = "Bitwise"
    CONVERSION = "Conversion"
    PREDICATE = "Predicate"
    CSV = "CSV"
    MISC = "Misc"
    GENERATOR = "Generator"
    OTHER = "Other"
    UDF = "User Defined Function"


#: The function types that are grammar elements (the others are never refused).
_ELEMENT_OF_TYPE: dict[FunctionType, GrammarElement] = {
    FunctionType.MAP: GrammarElement.MAP_FUNCTIONS,
    FunctionType.BITWISE: GrammarElement.BITWISE_FUNCTIONS,
    FunctionType.CSV: GrammarElement.CSV_FUNCTIONS,
    FunctionType.MISC: GrammarElement.MISC_FUNCTIONS,
    FunctionType.GENERATOR: GrammarElement.GENERATOR_FUNCTIONS,
    FunctionType.OTHER: GrammarElement.OTHER_FUNCTIONS,
    FunctionType.UDF: GrammarElement.UDF,
}


@functools.cache
def _reference_types() -> dict[str, FunctionType]:
    """The reference's function-name table (``function_types.json``): name -> type."""
    text = resources.files("query_core.validation").joinpath("function_types.json").read_text(encoding="utf-8")
    by_type: dict[str, list[str]] = json.loads(text)
    return {name: FunctionType[kind] for kind, names in by_type.items() for name in names}


@functools.cache
def spark_function_groups() -> dict[str, str]:
    """Spark's built-in functions (scalar, aggregate, generator and table-valued) and the group
    Spark's own registry files each under (``misc_funcs``, ``map_funcs``, ...)."""
    text = resources.files("query_core.validation").joinpath("spark_functions.json").read_text(encoding="utf-8")
    functions: dict[str, str] = json.loads(text)["functions"]
    return functions


#: How a built-in the reference's table does not name is typed, by its Spark group. Groups not
#: listed are typed OTHER. Protobuf functions read descriptor files from a path: typed MISC.
_TYPE_OF_SPARK_GROUP: dict[str, FunctionType] = {
    "misc_funcs": FunctionType.MISC,
    "protobuf_funcs": FunctionType.MISC,
    "map_funcs": FunctionType.MAP,
    "bitwise_funcs": FunctionType.BITWISE,
    "csv_funcs": FunctionType.CSV,
    "generator_funcs": FunctionType.GENERATOR,
}


class FunctionTable(Enum):
    """How function names are typed.

    ``REFERENCE``: exactly as the reference does, by its table; a name it does not list is a UDF
    (so are Spark built-ins it does not know, such as ``try_reflect`` or ``range``).
    ``SPARK``: by the reference's table first, then Spark's own registry for the built-ins it does
    not list (by their Spark group); only names Spark does not know are UDFs.
    """

    REFERENCE = "reference"
    SPARK = "spark"


def function_type(name: str, table: FunctionTable) -> FunctionType:
    """The type of the function called ``name`` (dotted when qualified)."""
    key = name.lower()
    known = _reference_types().get(key)
    if known is not None:
        return known
    if table is FunctionTable.SPARK:
        group = spark_function_groups().get(key)
        if group is not None:
            return _TYPE_OF_SPARK_GROUP.get(group, FunctionType.OTHER)
    return FunctionType.UDF


def function_element(name: str, table: FunctionTable) -> GrammarElement | None:
    """The grammar element a call of ``name`` is, or ``None`` for types no list can refuse."""
    return _ELEMENT_OF_TYPE.get(function_type(name, table))
