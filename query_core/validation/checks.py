"""The checks every validator makes, whatever parsed the statement: one element at a time.

Validators (SQL at the plugin, PPL, Flint statements, the job's check on Spark's own parse) walk
their tree and call these; the first element the policy denies raises :class:`QueryRefusedError`.
"""

from __future__ import annotations

from collections.abc import Sequence

from query_core.validation.elements import GrammarElement, function_element
from query_core.validation.policy import ValidationPolicy, is_protected_key, is_under
from query_core.validation.refusal import QueryRefusedError

#: Spark's data sources that a ``<source>.`<path>``` name reads files (or streams) with.
DATA_SOURCE_NAMES = frozenset(
    {
        "parquet", "orc", "json", "csv", "text", "avro", "binaryfile", "xml", "delta", "iceberg", "hudi",
        "libsvm", "image", "jdbc", "kafka", "socket", "rate", "noop", "console", "hive", "opensearch",
    }
)  # fmt: skip


class Checks:
    """The element checks of one policy."""

    def __init__(self, policy: ValidationPolicy) -> None:
        self.policy = policy

    def element(self, element: GrammarElement, detail: str = "") -> None:
        if self.policy.denies(element):
            raise QueryRefusedError(element, detail)

    def function(self, name: str) -> None:
        """A call of the function ``name`` (dotted when qualified), typed by the policy's table."""
        element = function_element(name, self.policy.function_table)
        if element is not None:
            self.element(element, name.lower())

    def table(self, parts: Sequence[str], second_quoted: bool = False) -> None:
        """A relation named ``parts``: a path-based one (``text.`/etc/hostname```) is FILE.

        As Spark reads it: two parts, the first a data source (a known one or a class name); and,
        as the reference reads it, a word then a back-quoted part."""
        if len(parts) != 2:
            return
        source = parts[0]
        if source.lower() in DATA_SOURCE_NAMES or "." in source or (second_quoted and source.isalpha()):
            self.element(GrammarElement.FILE)

    def location(self, location: str) -> None:
        """A table's, partition's or database's location (or a ``path`` option)."""
        if not is_under(location, self.policy.warehouse_root):
            self.element(GrammarElement.LOCATION, location)

    def checkpoint(self, location: str) -> None:
        """A Flint index's ``checkpoint_location`` (written by its stream, deleted by VACUUM)."""
        if not is_under(location, self.policy.checkpoint_root):
            self.element(GrammarElement.CHECKPOINT_LOCATION, location)

    def config(self, element: GrammarElement, key: str | None) -> None:
        """``SET``/``RESET`` (``element``) of ``key`` (None: all of them, or a listing)."""
        self.element(element)
        if key is not None and is_protected_key(key):
            self.element(GrammarElement.PROTECTED_CONFIG, key)
