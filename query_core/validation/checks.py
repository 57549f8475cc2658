"""The checks every validator makes, whatever parsed the statement: one element at a time.

Validators (SQL at the plugin, PPL, Flint statements, the job's check on Spark's own parse) walk
their tree and call these; the first element the policy denies raises :class:`QueryRefusedError`.
What a validator could not read is noted with :meth:`Checks.leave`: the statement is then left to
the job's check, which decides on Spark's own parse (docs/validation.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from query_core.validation import allowlists
from query_core.validation.allowlists import Provider
from query_core.validation.elements import GrammarElement, function_element
from query_core.validation.index_settings import check_index_settings
from query_core.validation.paths import Resolver, shown_location
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
    """The element checks of one policy.

    ``resolve`` reads a location as the job's Hadoop does (:func:`query_core.validation.paths.is_below`);
    by default the port of Hadoop's ``Path`` does."""

    def __init__(self, policy: ValidationPolicy, resolve: Resolver | None = None) -> None:
        self.policy = policy
        self.resolve = resolve
        #: Why a part of the statement could not be read here (empty: every part was).
        self.undecided: list[str] = []

    def element(self, element: GrammarElement, detail: str = "") -> None:
        if self.policy.denies(element):
            raise QueryRefusedError(element, detail)

    def leave(self, reason: str) -> None:
        """A part of the statement this validator cannot read: the job's check decides it."""
        self.undecided.append(reason)

    def function(self, name: str) -> None:
        """A call of the function ``name`` (dotted when qualified), typed by the policy's table. A
        function that takes an options map is left to the job's check, which reads its arguments
        (:meth:`function_options`)."""
        element = function_element(name, self.policy.function_table)
        if element is not None:
            self.element(element, name.lower())
        if self.policy.denies(GrammarElement.DATA_SOURCE_OPTION) and allowlists.function_options(name) is not None:
            self.leave(f"the options of {name}")

    def function_options(self, name: str, options: Iterable[tuple[str, str]] | None) -> None:
        """The options map a call of ``name`` is given (None: not a map of literals, which cannot
        be read before it runs): each key must be one of the function's, in any case."""
        known = allowlists.function_options(name)
        if known is None:
            return
        if options is None:
            self.element(GrammarElement.DATA_SOURCE_OPTION, f"{name}: options not given as a map of literals")
            return
        for key, _ in options:
            if key.lower() not in known.allowed.keys:
                self.element(GrammarElement.DATA_SOURCE_OPTION, f"{name}: {key}")

    def table(self, parts: Sequence[str], second_quoted: bool = False) -> None:
        """A relation named ``parts``: a path-based one (``text.`/etc/hostname```) is FILE.

        As Spark reads it: two parts, the first a data source (a known one or a class name); and,
        as the reference reads it, a word then a back-quoted part."""
        if len(parts) != 2:
            return
        source = parts[0]
        if source.lower() in DATA_SOURCE_NAMES or "." in source or (second_quoted and source.isalpha()):
            self.element(GrammarElement.FILE)

    # -- places ---------------------------------------------------------------------------------

    def location(self, location: str) -> None:
        """A table's, partition's or database's location (or a ``path`` option)."""
        if self.policy.denies(GrammarElement.LOCATION) and not is_under(
            location, self.policy.warehouse_root, self.resolve
        ):
            self.element(GrammarElement.LOCATION, shown_location(location))

    def checkpoint(self, location: str) -> None:
        """A Flint index's ``checkpoint_location`` (written by its stream, deleted by VACUUM)."""
        if self.policy.denies(GrammarElement.CHECKPOINT_LOCATION) and not is_under(
            location, self.policy.checkpoint_root, self.resolve
        ):
            self.element(GrammarElement.CHECKPOINT_LOCATION, shown_location(location))

    # -- configuration ------------------------------------------------------------------------------

    def config(self, element: GrammarElement, key: str | None) -> None:
        """``SET``/``RESET`` (``element``) of ``key`` (None: all of them, or a listing)."""
        self.element(element)
        if key is not None and is_protected_key(key):
            self.element(GrammarElement.PROTECTED_CONFIG, key)
        elif key is None and element is GrammarElement.RESET:
            # Every key, the protected ones too: a job sets some of them for its session at run
            # time (a warm pool job at its claim), and a RESET would put Spark's defaults back.
            self.element(GrammarElement.PROTECTED_CONFIG, "RESET of every key")

    # -- data sources, their options and storage ---------------------------------------------------

    def provider_named(self, name: str) -> Provider | None:
        """The allowed provider ``name`` stands for (None: none). The job overrides this to ask
        Spark which implementation the name resolves to."""
        return allowlists.provider_named(name)

    def provider(self, name: str) -> Provider | None:
        """A data source provider a statement names (``USING <name>``): refused unless allowed.
        Returns the provider (None when DATA_SOURCE is allowed and the name is not on the list)."""
        found = self.provider_named(name)
        if found is None:
            self.element(GrammarElement.DATA_SOURCE, name)
        return found

    def options(self, provider: Provider | None, options: Iterable[tuple[str, str]]) -> None:
        """A provider's options, read case-insensitively as Spark reads them: ``path`` is a
        location, every other key must be one of the provider's."""
        for key, value in options:
            lowered = key.lower()
            if lowered == allowlists.PATH_OPTION:
                self.location(value)
            elif provider is None or lowered not in provider.keys:
                name = provider.name if provider is not None else "?"
                self.element(GrammarElement.DATA_SOURCE_OPTION, f"{name}: {key}")
            elif provider.name == "hive" and lowered == "fileformat":
                self.stored_as(value)

    def stored_as(self, name: str) -> None:
        """``STORED AS <name>`` (a Hive table's file format)."""
        if name.upper() not in allowlists.STORED_AS:
            self.element(GrammarElement.DATA_SOURCE, f"STORED AS {name}")

    def storage_class(self, clause: str, name: str) -> None:
        """``ROW FORMAT SERDE '<class>'``, ``INPUTFORMAT '<class>'``, ``OUTPUTFORMAT '<class>'``."""
        if name not in allowlists.STORAGE_CLASSES:
            self.element(GrammarElement.DATA_SOURCE, f"{clause} {name}")

    def properties(self, properties: Iterable[tuple[str, str]]) -> None:
        """Table, SerDe or database properties: keys without a dot are the user's own, keys with a
        dot must be on the list, and ``path`` is a location."""
        for key, value in properties:
            lowered = key.lower()
            if lowered == allowlists.PATH_OPTION:
                self.location(value)
            elif lowered in allowlists.LOCATION_PROPERTIES or ("." in key and lowered not in allowlists.PROPERTY_KEYS):
                self.element(GrammarElement.TABLE_PROPERTY, key)

    # -- Flint options ----------------------------------------------------------------------------------

    def flint_options(self, options: Mapping[str, str], index_names: Iterable[str] = ()) -> None:
        """A Flint statement's ``WITH`` options, and the keys of its ``extra_options``: per source
        table, how the stream reads it; for the index (``sink`` or its name), how it is written;
        never a connection setting."""
        for name in options:
            if name not in allowlists.FLINT_OPTIONS:
                self.element(GrammarElement.FLINT_OPTION, name)
        text = options.get("extra_options", "").strip()
        if text:
            self.extra_options(text, frozenset(index_names))
        if options.get("index_settings", "").strip():
            self.index_settings(options["index_settings"])
        if options.get("index_mappings", "").strip():
            self.index_mappings(options["index_mappings"])

    def index_settings(self, text: str) -> None:
        """The settings of the Flint index a statement creates: known keys, bounded values
        (:func:`query_core.validation.index_settings.check_index_settings`)."""
        check_index_settings(self._json_object("index_settings", text), self.policy)

    def index_mappings(self, text: str) -> None:
        """Field mappings of the Flint index a statement creates, as the job reads them (the
        ``properties`` object, or the whole object as properties): known types and parameters."""
        parsed = self._json_object("index_mappings", text)
        properties = parsed.get("properties", parsed)
        self._field_mappings(properties if isinstance(properties, dict) else {"properties": properties}, "", 0)

    def _field_mappings(self, properties: Mapping[str, object], path: str, depth: int) -> None:
        for name, mapping in properties.items():
            where = f"index_mappings: {path}{name}"
            if not isinstance(mapping, dict) or depth > 16:
                self.element(GrammarElement.FLINT_OPTION, where)
                continue
            for key, value in mapping.items():
                if key not in allowlists.INDEX_MAPPING_PARAMETERS:
                    self.element(GrammarElement.FLINT_OPTION, f"{where}: {key}")
                elif key == "type" and value not in allowlists.INDEX_FIELD_TYPES:
                    self.element(GrammarElement.FLINT_OPTION, f"{where}: type {value}")
                elif key in ("fields", "properties"):
                    if isinstance(value, dict):
                        self._field_mappings(value, f"{path}{name}.", depth + 1)
                    else:
                        self.element(GrammarElement.FLINT_OPTION, f"{where}: {key}")
                elif isinstance(value, dict | list):
                    self.element(GrammarElement.FLINT_OPTION, f"{where}: {key}")

    def _json_object(self, option: str, text: str) -> dict[str, object]:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            self.element(GrammarElement.FLINT_OPTION, f"{option} is not a JSON object")
            return {}
        return parsed

    def extra_options(self, text: str, index_names: frozenset[str]) -> None:
        try:
            parsed = json.loads(text)
        except ValueError:
            self.element(GrammarElement.FLINT_OPTION, "extra_options is not JSON")
            return
        if not isinstance(parsed, dict):
            self.element(GrammarElement.FLINT_OPTION, "extra_options is not a JSON object")
            return
        for target, entry in parsed.items():
            sink = str(target) in allowlists.SINK_KEYS or str(target) in index_names
            allowed = allowlists.EXTRA_SINK_OPTIONS if sink else allowlists.EXTRA_SOURCE_OPTIONS
            for key in entry if isinstance(entry, dict) else ():
                if str(key).lower() not in allowed:
                    self.element(GrammarElement.FLINT_OPTION, f"extra_options {target}: {key}")
