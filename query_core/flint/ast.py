"""The statements of Flint's SQL extension, as immutable values.

:func:`query_core.flint.parse` builds them; the plugin classifies a query by them and the job runs
them. Everything the reference decides while parsing (names, skipping parameters and their
defaults, option names and values) is decided here once, so both sides agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TypeAlias

DEFAULT_DATABASE = "default"


class IndexKind(StrEnum):
    """The ``kind`` of a Flint index, as its ``_meta`` records it."""

    SKIPPING = "skipping"
    COVERING = "covering"
    MV = "mv"


class SkippingKind(StrEnum):
    PARTITION = "PARTITION"
    VALUE_SET = "VALUE_SET"
    MIN_MAX = "MIN_MAX"
    BLOOM_FILTER = "BLOOM_FILTER"


# -- names --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QualifiedName:
    """A table or materialized-view name as written: one to three parts, back-quotes removed."""

    parts: tuple[str, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.parts) <= 3:
            raise ValueError(f"a name has one to three parts, not {len(self.parts)}: {self.parts!r}")

    def qualify(self, datasource: str) -> QualifiedName:
        """``catalog.db.name``: a missing catalog is the datasource, a missing database ``default``."""
        if len(self.parts) == 3:
            return self
        if len(self.parts) == 2:
            return QualifiedName((datasource, *self.parts))
        return QualifiedName((datasource, DEFAULT_DATABASE, self.parts[0]))

    @property
    def is_qualified(self) -> bool:
        return len(self.parts) == 3

    @property
    def name(self) -> str:
        """The last part: the table or view itself."""
        return self.parts[-1]

    def sql(self) -> str:
        """The name back-quoted part by part, safe to splice into Spark SQL."""
        return ".".join("`" + part.replace("`", "``") + "`" for part in self.parts)

    def __str__(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class IndexRef:
    """Which Flint index a statement is about.

    ``table`` is the source table of a skipping or covering index and the view's own name for a
    materialized view; ``name`` is the covering index's name (``None`` for the other kinds).
    """

    kind: IndexKind
    table: QualifiedName
    name: str | None = None

    def __post_init__(self) -> None:
        if (self.kind is IndexKind.COVERING) != (self.name is not None):
            raise ValueError("a covering index, and only a covering index, has a name of its own")

    def qualify(self, datasource: str) -> IndexRef:
        return IndexRef(self.kind, self.table.qualify(datasource), self.name)


# -- options ------------------------------------------------------------------------------------


class OptionName(StrEnum):
    """The options a ``WITH (...)`` clause may set; names are case-sensitive, as in the reference."""

    AUTO_REFRESH = "auto_refresh"
    SCHEDULER_MODE = "scheduler_mode"
    REFRESH_INTERVAL = "refresh_interval"
    INCREMENTAL_REFRESH = "incremental_refresh"
    CHECKPOINT_LOCATION = "checkpoint_location"
    WATERMARK_DELAY = "watermark_delay"
    OUTPUT_MODE = "output_mode"
    INDEX_SETTINGS = "index_settings"
    INDEX_MAPPINGS = "index_mappings"
    ID_EXPRESSION = "id_expression"
    EXTRA_OPTIONS = "extra_options"


#: Every option name a ``WITH (...)`` clause may use.
OPTION_NAMES = frozenset(option.value for option in OptionName)
_BOOLEAN_OPTIONS = frozenset({OptionName.AUTO_REFRESH, OptionName.INCREMENTAL_REFRESH})
_JSON_OPTIONS = frozenset({OptionName.INDEX_SETTINGS, OptionName.INDEX_MAPPINGS, OptionName.EXTRA_OPTIONS})
_SCHEDULER_MODES = ("internal", "external")


def option_problem(name: str, value: str) -> str | None:
    """Why ``name = value`` is not a valid option, or ``None`` when it is.

    The reference refuses unknown names and bad scheduler modes when the options are built (the
    messages below are its own, without Scala's ``requirement failed:`` prefix); it finds a
    non-boolean ``auto_refresh`` or malformed JSON only later, mid-operation. Here all of them are
    refused up front, before anything has started.
    """
    if name not in OPTION_NAMES:
        return f"option name {name} is invalid"
    option = OptionName(name)
    if option in _BOOLEAN_OPTIONS and value.lower() not in ("true", "false"):
        return f"option {name} must be true or false, not {value!r}"
    if option is OptionName.SCHEDULER_MODE and value.lower() not in _SCHEDULER_MODES:
        return f"Scheduler mode {value} is invalid. Must be 'internal' or 'external'."
    if option in _JSON_OPTIONS:
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            return f"option {name} must be a JSON object: {exc}"
        if not isinstance(parsed, dict):
            return f"option {name} must be a JSON object"
        if option is OptionName.EXTRA_OPTIONS and not all(isinstance(v, dict) for v in parsed.values()):
            return f"option {name} must map each source table (or the index) to an object of options"
    return None


@dataclass(frozen=True)
class FlintOptions:
    """The ``WITH (...)`` options: the reference's string map, plus typed accessors.

    Values are strings as the reference stores them: string literals unescaped, numbers as written,
    booleans lower-cased. Construction validates every entry (:func:`option_problem`).
    """

    raw: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in self.raw.items():
            if problem := option_problem(name, value):
                raise ValueError(problem)
        object.__setattr__(self, "raw", MappingProxyType(dict(self.raw)))

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.raw.items())))

    def get(self, name: OptionName) -> str | None:
        return self.raw.get(name.value)

    def __contains__(self, name: object) -> bool:
        return name in self.raw

    @property
    def auto_refresh(self) -> bool:
        return (self.get(OptionName.AUTO_REFRESH) or "false").lower() == "true"

    @property
    def incremental_refresh(self) -> bool:
        return (self.get(OptionName.INCREMENTAL_REFRESH) or "false").lower() == "true"

    @property
    def scheduler_mode(self) -> str | None:
        mode = self.get(OptionName.SCHEDULER_MODE)
        return mode.lower() if mode is not None else None

    @property
    def refresh_interval(self) -> str | None:
        return self.get(OptionName.REFRESH_INTERVAL)

    @property
    def checkpoint_location(self) -> str | None:
        return self.get(OptionName.CHECKPOINT_LOCATION)

    @property
    def watermark_delay(self) -> str | None:
        return self.get(OptionName.WATERMARK_DELAY)

    @property
    def output_mode(self) -> str | None:
        return self.get(OptionName.OUTPUT_MODE)

    @property
    def index_settings(self) -> str | None:
        """JSON text of the OpenSearch index settings."""
        return self.get(OptionName.INDEX_SETTINGS)

    @property
    def index_mappings(self) -> str | None:
        """JSON text of extra OpenSearch index mappings."""
        return self.get(OptionName.INDEX_MAPPINGS)

    @property
    def id_expression(self) -> str | None:
        return self.get(OptionName.ID_EXPRESSION)

    @property
    def extra_options(self) -> str | None:
        """JSON text: ``{"<source table>": {...}, "<index name>": {...}}`` (the streaming job
        reads it: :func:`flint_repl_job.indexes.streaming.extra_source_options`)."""
        return self.get(OptionName.EXTRA_OPTIONS)

    def with_defaults(self) -> dict[str, str]:
        """The map the index's ``_meta.options`` stores: ``auto_refresh`` and ``incremental_refresh`` filled in."""
        options = dict(self.raw)
        options.setdefault(OptionName.AUTO_REFRESH.value, str(self.auto_refresh).lower())
        options.setdefault(OptionName.INCREMENTAL_REFRESH.value, str(self.incremental_refresh).lower())
        return options


# -- skipping columns ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SkippingColumn:
    """One indexed column of a skipping index.

    ``params`` is the full parameter map the reference stores in ``_meta.indexedColumns``, defaults
    filled in: ``{}`` for PARTITION and MIN_MAX, ``{"max_size": "100"}`` for VALUE_SET, and for
    BLOOM_FILTER either ``{"adaptive": "true", "num_candidates": "10", "fpp": "0.03"}`` or
    ``{"adaptive": "false", "num_items": "10000", "fpp": "0.03"}``.
    """

    name: str
    kind: SkippingKind
    params: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    def __hash__(self) -> int:
        return hash((self.name, self.kind, tuple(sorted(self.params.items()))))


# -- statements ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlintStatement:
    """Base of every Flint statement."""


@dataclass(frozen=True)
class CreateSkippingIndex(FlintStatement):
    table: QualifiedName
    columns: tuple[SkippingColumn, ...]
    if_not_exists: bool = False
    options: FlintOptions = field(default_factory=FlintOptions)

    @property
    def index(self) -> IndexRef:
        return IndexRef(IndexKind.SKIPPING, self.table)


@dataclass(frozen=True)
class CreateCoveringIndex(FlintStatement):
    """``where`` is the filter condition exactly as written (without the ``WHERE``), or ``None``."""

    name: str
    table: QualifiedName
    columns: tuple[str, ...]
    where: str | None = None
    if_not_exists: bool = False
    options: FlintOptions = field(default_factory=FlintOptions)

    @property
    def index(self) -> IndexRef:
        return IndexRef(IndexKind.COVERING, self.table, self.name)


@dataclass(frozen=True)
class CreateMaterializedView(FlintStatement):
    """``query`` is the view's query exactly as written, a substring of the statement."""

    name: QualifiedName
    query: str
    if_not_exists: bool = False
    options: FlintOptions = field(default_factory=FlintOptions)

    @property
    def index(self) -> IndexRef:
        return IndexRef(IndexKind.MV, self.name)


@dataclass(frozen=True)
class IndexStatement(FlintStatement):
    """A statement about one existing index of any kind."""

    index: IndexRef

    @property
    def index_kind(self) -> IndexKind:
        return self.index.kind


@dataclass(frozen=True)
class RefreshIndex(IndexStatement):
    pass


@dataclass(frozen=True)
class DescribeIndex(IndexStatement):
    pass


@dataclass(frozen=True)
class DropIndex(IndexStatement):
    pass


@dataclass(frozen=True)
class VacuumIndex(IndexStatement):
    pass


@dataclass(frozen=True)
class AnalyzeIndex(IndexStatement):
    """``ANALYZE SKIPPING INDEX ON t``: the only kind the grammar allows."""


@dataclass(frozen=True)
class AlterIndex(IndexStatement):
    """``options`` always sets ``auto_refresh`` (the parser refuses an ALTER that does not)."""

    options: FlintOptions = field(default_factory=FlintOptions)


@dataclass(frozen=True)
class ShowFlintIndexes(FlintStatement):
    """``SHOW FLINT INDEX[ES] [EXTENDED] IN catalog[.database]``."""

    catalog: str
    database: str | None = None
    extended: bool = False


@dataclass(frozen=True)
class ShowCoveringIndexes(FlintStatement):
    """``SHOW INDEX[ES] ON table``."""

    table: QualifiedName


@dataclass(frozen=True)
class ShowMaterializedViews(FlintStatement):
    """``SHOW MATERIALIZED VIEW[S] IN catalog[.database]``."""

    catalog: str
    database: str | None = None


@dataclass(frozen=True)
class RecoverIndexJob(FlintStatement):
    """``RECOVER INDEX JOB <flint index name>``: restart an auto-refresh index's streaming job."""

    index_name: str


#: Statements that create an index: they carry options and an :class:`IndexRef` as ``index``.
CreateStatement: TypeAlias = CreateSkippingIndex | CreateCoveringIndex | CreateMaterializedView

Statement: TypeAlias = (
    CreateSkippingIndex
    | CreateCoveringIndex
    | CreateMaterializedView
    | RefreshIndex
    | DescribeIndex
    | DropIndex
    | VacuumIndex
    | AnalyzeIndex
    | AlterIndex
    | ShowFlintIndexes
    | ShowCoveringIndexes
    | ShowMaterializedViews
    | RecoverIndexJob
)
