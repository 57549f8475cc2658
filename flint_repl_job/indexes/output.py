"""What a Flint statement answers, and how it fails."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


class FlintIndexError(Exception):
    """A Flint statement that cannot run as asked (reported as ``Fail to run query``)."""


@dataclass
class FlintOutput:
    """A statement's answer: its columns and rows (tuples in column order)."""

    schema: StructType
    rows: list[tuple[Any, ...]] = field(default_factory=list)


def strings(*names: str, boolean: tuple[str, ...] = ()) -> StructType:
    """A schema of string columns (``boolean`` ones boolean)."""
    from pyspark.sql.types import BooleanType, StringType, StructField, StructType

    return StructType([StructField(n, BooleanType() if n in boolean else StringType()) for n in names])


def no_rows() -> FlintOutput:
    """The answer of a statement with no rows and no columns (DDL)."""
    from pyspark.sql.types import StructType

    return FlintOutput(StructType([]))
