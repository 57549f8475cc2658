"""Named datasources, in the reference's dialect (docs/datasources.md): each has its connector
(``S3GLUE`` or ``SECURITY_LAKE``), the engine that runs its queries (its ``engine`` property), its
result index and its Spark settings.

Datasources come from a configuration file (read-only at run time) and from the REST API, which
keeps them in the ``.ql-datasources`` index so every plugin process sees them, their credentials
sealed (:mod:`async_query.security.sealing`). Lookups are on every request, so index-backed ones
are cached for a few seconds, in a bounded cache (a name that names nothing is remembered too, so
a client asking for many names cannot make one index read per request, nor grow the cache
without bound).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from async_query import datasource_dialect as dialect
from async_query.caches import Cache
from async_query.security.sealing import Sealer
from query_core.errors import DataSourceNotFoundError, DocumentExistsError, InvalidRequestError, UnknownDatasourceError
from query_core.ids import DATASOURCE_NAME, RESULT_INDEX_PREFIX, default_result_index
from query_core.store import Store
from query_core.validation.policy import PolicyError, check_properties

log = logging.getLogger(__name__)


class _Missing:
    """What the lookup cache keeps for a name that names no datasource."""


MISSING = _Missing()
#: The masters ``spark-submit`` takes in client mode (``properties.master`` of a local datasource).
SPARK_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|(spark|mesos)://[\w.,:\[\]-]+|yarn|k8s://\S+")
#: The fields of the wire shape (the reference's, and ``sparkConf``, an addition).
WIRE_FIELDS = ("name", "description", "connector", "allowedRoles", "properties", "resultIndex", "status", "sparkConf")
MAX_RESULT_INDEX = 255
_RESULT_INDEX_CHARS = re.compile(r"[a-z0-9_-]+")


class Datasource(BaseModel):
    """A datasource, in the reference's datasource API shape (camelCase on the wire)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    name: str
    description: str = ""
    #: The reference's connector type (``S3GLUE`` or ``SECURITY_LAKE``); this product's ``local``
    #: and ``emr-serverless`` are read as ``S3GLUE`` with that ``engine`` property.
    connector: str = dialect.S3GLUE
    result_index: str = ""
    #: The reference's connector properties (``glue.*``), and this product's (``engine``,
    #: ``master``, ``executionRoleARN``, ``validation.*``).
    properties: dict[str, str] = Field(default_factory=dict)
    #: Extra Spark conf for the jobs of this datasource (catalog settings, warehouse, resources):
    #: only keys of the allow list (docs/datasources.md).
    spark_conf: dict[str, str] = Field(default_factory=dict)
    allowed_roles: list[str] = Field(default_factory=list)
    status: Literal["ACTIVE", "DISABLED"] = "ACTIVE"

    @model_validator(mode="before")
    @classmethod
    def _dialect(cls, raw: Any) -> Any:
        """This product's connector names become ``S3GLUE`` and an ``engine`` property."""
        if not isinstance(raw, dict) or "connector" not in raw:
            return raw
        connector, engine = dialect.connector_and_engine(raw["connector"])  # or a 400
        raw = {**raw, "connector": connector}
        if engine:
            properties = raw.get("properties") or {}
            if isinstance(properties, dict):
                raw["properties"] = {**properties, dialect.ENGINE: engine}
        return raw

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not DATASOURCE_NAME.match(name):
            raise ValueError("a datasource name starts with a letter and holds letters, digits, '_' or '-'")
        return name

    @field_validator("description", mode="before")
    @classmethod
    def _no_null(cls, value: object) -> object:
        return "" if value is None else value

    @field_validator("status", mode="before")
    @classmethod
    def _status_in_any_case(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("result_index")
    @classmethod
    def _valid_result_index(cls, index: str) -> str:
        if index and not index.startswith(RESULT_INDEX_PREFIX):
            raise ValueError(f"a custom result index name must start with {RESULT_INDEX_PREFIX!r}")
        if index != index.lower():
            raise ValueError("an index name must be lower case")
        return index

    @field_validator("properties")
    @classmethod
    def _valid_validation(cls, properties: dict[str, str]) -> dict[str, str]:
        """``validation.profile`` and ``validation.allow`` (docs/validation.md), read strictly."""
        try:
            check_properties(properties)
        except PolicyError as exc:
            raise ValueError(str(exc)) from None
        return properties

    @field_validator("properties")
    @classmethod
    def _valid_master(cls, properties: dict[str, str]) -> dict[str, str]:
        master = properties.get("master")
        if master is not None and not SPARK_MASTER.fullmatch(master):
            raise ValueError(
                f"master {master!r} is not a Spark master: use local[N], spark://host:port, yarn or k8s://https://host:port"
            )
        return properties

    @field_validator("properties")
    @classmethod
    def _valid_engine(cls, properties: dict[str, str]) -> dict[str, str]:
        engine = properties.get(dialect.ENGINE)
        if engine is not None and engine not in dialect.ENGINES:
            raise ValueError(f"engine must be one of {', '.join(dialect.ENGINES)}")
        return properties

    @field_validator("properties")
    @classmethod
    def _valid_pool_size(cls, properties: dict[str, str]) -> dict[str, str]:
        size = properties.get(dialect.WARM_POOL_SIZE)
        if size is not None and not (size.isascii() and size.isdigit() and int(size) <= dialect.MAX_WARM_POOL_SIZE):
            raise ValueError(f"{dialect.WARM_POOL_SIZE} must be a whole number from 0 to {dialect.MAX_WARM_POOL_SIZE}")
        return properties

    @property
    def warm_pool_size(self) -> int | None:
        """Idle jobs kept started for its sessions (None: the deployment's default)."""
        size = self.properties.get(dialect.WARM_POOL_SIZE)
        return int(size) if size is not None else None

    @property
    def results(self) -> str:
        """The result index of this datasource."""
        return self.result_index or default_result_index(self.name)

    @property
    def engine(self) -> str:
        """What runs its queries: ``local`` or ``emr-serverless`` ("": the deployment's default)."""
        return self.properties.get(dialect.ENGINE, "")

    @property
    def glue_backed(self) -> bool:
        """Whether it is the reference's kind, with a Glue catalog and an index store of its own."""
        return dialect.is_glue_backed(self.connector, self.properties)

    def __repr_args__(self) -> Any:
        """Its repr (as a log line may show it) without credentials."""
        for name, value in super().__repr_args__():
            yield name, dialect.masked(value) if name in ("properties", "spark_conf") else value

    def to_document(self) -> dict[str, Any]:
        """Everything, credentials in clear: what the registry seals and stores."""
        return self.model_dump(by_alias=True, mode="json")

    def to_reply(self) -> dict[str, Any]:
        """The reference's reply shape: credentials left out, the result index filled in."""
        reply = self.to_document()
        reply["properties"] = dialect.masked(self.properties)
        reply["sparkConf"] = dialect.masked(self.spark_conf)
        reply["resultIndex"] = self.results
        return reply


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())


def _check_wire(raw: Any) -> dict[str, Any]:
    """The reference's checks of the body's shape and of its name, connector and result index."""
    if not isinstance(raw, dict):
        raise InvalidRequestError("invalid datasource: the body must be a JSON object")
    unknown = [key for key in raw if key not in WIRE_FIELDS]
    if unknown:
        raise InvalidRequestError(f"Unknown field: {unknown[0]}")
    missing = [key for key in ("name", "connector") if raw.get(key) in (None, "")]
    if missing:
        raise InvalidRequestError(f"Datasource configuration error: {', '.join(missing)} cannot be null or empty.")
    name = raw["name"]
    if not isinstance(name, str) or not DATASOURCE_NAME.match(name):
        raise InvalidRequestError(
            f"DataSource Name: {name} contains illegal characters. Allowed characters: a-zA-Z0-9_-*@."
        )
    status = raw.get("status")
    if status is not None and (not isinstance(status, str) or status.upper() not in ("ACTIVE", "DISABLED")):
        raise InvalidRequestError(f"No DataSourceStatus with text {status} found")
    _check_result_index(raw.get("resultIndex"))
    return raw


def _check_result_index(index: object) -> None:
    """The reference's result index rules and messages (``DataSourceMetadata``)."""
    if index is None or index == "":
        return
    if not isinstance(index, str):
        raise InvalidRequestError("resultIndex must be a string")
    message = ""
    if len(index) > MAX_RESULT_INDEX:
        message += f"Result index name size must contains less than {MAX_RESULT_INDEX} characters."
    if not _RESULT_INDEX_CHARS.fullmatch(index):
        message += (
            "Result index name has invalid character. Valid characters are a-z, 0-9, -(hyphen) and _(underscore)."
        )
    if not index.startswith(RESULT_INDEX_PREFIX):
        message += f"Result index must start with {RESULT_INDEX_PREFIX}"
    if message:
        raise InvalidRequestError(message)


def parse_datasource(raw: Any) -> Datasource:
    """A datasource from untrusted JSON, checked as the reference checks it and refused (a 400)
    where it could reconfigure the job. No message holds a property's or a conf value."""
    body = _check_wire(raw)
    try:
        datasource = Datasource.model_validate(body)
    except ValidationError as exc:
        raise InvalidRequestError(f"invalid datasource: {_problems(exc)}") from None
    dialect.check_service_properties(datasource.properties)
    dialect.check_spark_conf(datasource.spark_conf)
    if dialect.needs_glue_check(datasource.connector, datasource.properties):
        properties = dialect.check_glue(datasource.connector, datasource.properties)
        datasource = datasource.model_copy(update={"properties": properties})
    return datasource


def parse_patch(current: Datasource, raw: Any) -> Datasource:
    """``current`` with a PATCH body applied as the reference applies one: ``description``,
    ``allowedRoles``, ``resultIndex`` and ``status`` replace, ``properties`` are merged in,
    ``connector`` is ignored; then checked as a new datasource."""
    if not isinstance(raw, dict):
        raise InvalidRequestError("invalid datasource: the body must be a JSON object")
    unknown = [key for key in raw if key not in WIRE_FIELDS]
    if unknown:
        raise InvalidRequestError(f"Unknown field: {unknown[0]}")
    merged = current.to_document()
    for key in ("description", "allowedRoles", "resultIndex", "status", "sparkConf"):
        if key in raw:
            merged[key] = raw[key]
    if "properties" in raw:
        if not isinstance(raw["properties"], dict):
            raise InvalidRequestError("invalid datasource: properties must be an object")
        merged["properties"] = {**current.properties, **raw["properties"]}
    return parse_datasource(merged)


class DatasourceRegistry:
    """The datasources this deployment serves, by name."""

    def __init__(
        self,
        configured: list[Datasource],
        store: Store | None = None,
        cache_s: float = 5.0,
        entries: int = 1000,
        *,
        sealer: Sealer | None = None,
    ) -> None:
        self._configured = {d.name: d for d in configured}
        self._store = store
        self._sealer = sealer or Sealer.ephemeral()
        #: The master key's holder, whose derived keys other parts use (the console's cookies).
        self.sealer = self._sealer
        #: Stored datasources as read (None: there is none of that name), for ``cache_s`` seconds.
        self._cache: Cache[str, Datasource | _Missing] = Cache(entries, ttl_s=cache_s)
        #: The engine of datasources that name none (the service sets it from its settings).
        self.default_engine = dialect.LOCAL
        #: At most this many datasources may be created over REST (the reference's
        #: ``plugins.query.datasources.limit``).
        self.limit = 20

    def get(self, name: str) -> Datasource:
        """The active datasource ``name``, for a query."""
        found = self._configured.get(name) or self._stored(name)
        if found is None:
            raise UnknownDatasourceError(f"no datasource named {name!r} is configured")
        if found.status != "ACTIVE":
            raise UnknownDatasourceError(f"Datasource {name} is disabled.")
        return found

    def find(self, name: str) -> Datasource | None:
        """The datasource ``name`` whatever its status (None: there is none, or it was deleted)."""
        return self._configured.get(name) or self._stored(name)

    def describe(self, name: str) -> Datasource:
        """The datasource ``name`` whatever its status, for the datasource API (a 404 if none)."""
        found = self.find(name)
        if found is None:
            raise DataSourceNotFoundError(f"DataSource with name {name} doesn't exist.")
        return found

    def known(self, name: str) -> Datasource | None:
        """The active datasource ``name`` if it is known without reading the index (configured,
        or stored and read recently); None otherwise, also when it may exist."""
        found = self._configured.get(name)
        if found is None:
            cached = self._cache.get(name)
            found = cached if isinstance(cached, Datasource) else None
        return found if found is not None and found.status == "ACTIVE" else None

    def _stored(self, name: str) -> Datasource | None:
        if self._store is None or not DATASOURCE_NAME.match(name):
            return None
        cached = self._cache.get(name)
        if cached is not None:
            return cached if isinstance(cached, Datasource) else None
        source = self._store.datasources.get(name)
        found = self._from_document(source) if source else None
        self._cache.put(name, found if found is not None else MISSING)
        return found

    @property
    def configured(self) -> list[Datasource]:
        """The datasources of the configuration (known without reading the index)."""
        return list(self._configured.values())

    def all(self) -> list[Datasource]:
        stored = [self._from_document(s) for s in self._store.datasources.list()] if self._store else []
        return [*self._configured.values(), *(d for d in stored if d.name not in self._configured)]

    def with_engine(self, datasource: Datasource) -> Datasource:
        """``datasource`` naming its engine: the deployment's default when it names none."""
        if datasource.engine:
            return datasource
        properties = {**datasource.properties, dialect.ENGINE: self.default_engine}
        return datasource.model_copy(update={"properties": properties})

    def create(self, datasource: Datasource) -> None:
        store = self._writable(datasource.name)
        if datasource.name in self._configured:
            raise InvalidRequestError(f"A datasource already exists with name: {datasource.name}")
        if len(store.datasources.list()) >= self.limit:
            raise InvalidRequestError(f"domain concurrent datasources can not exceed {self.limit}")
        try:
            store.datasources.create(datasource.name, self._to_document(datasource))
        except DocumentExistsError:
            raise InvalidRequestError(f"A datasource already exists with name: {datasource.name}") from None
        self._forget(datasource.name)

    def update(self, datasource: Datasource) -> None:
        store = self._writable(datasource.name)
        if not store.datasources.replace(datasource.name, self._to_document(datasource)):
            raise DataSourceNotFoundError(f"Datasource with name: {datasource.name} doesn't exist")
        self._forget(datasource.name)

    def delete(self, name: str) -> None:
        store = self._writable(name)
        if not store.datasources.delete(name):
            raise DataSourceNotFoundError(f"Datasource with name: {name} doesn't exist")
        self._forget(name)

    def _to_document(self, datasource: Datasource) -> dict[str, Any]:
        """The stored shape: confidential properties and Spark conf values sealed."""
        document = datasource.to_document()
        document["properties"] = self._sealed(datasource.properties)
        document["sparkConf"] = self._sealed(datasource.spark_conf)
        return document

    def _sealed(self, values: dict[str, str]) -> dict[str, str]:
        return {key: self._sealer.seal(value) if dialect.is_confidential(key) else value for key, value in values.items()}

    def _from_document(self, source: dict[str, Any]) -> Datasource:
        name = source.get("name")
        return Datasource.model_validate(
            {
                **source,
                "properties": self._unsealed(name, "property", source.get("properties") or {}),
                "sparkConf": self._unsealed(name, "sparkConf key", source.get("sparkConf") or {}),
            }
        )

    def _unsealed(self, name: object, what: str, stored: dict[str, str]) -> dict[str, str]:
        """``stored`` with its confidential values unsealed (a value stored before its key was
        confidential is taken as it is; one sealed under another key is left out)."""
        clear: dict[str, str] = {}
        for key, value in stored.items():
            found = self._sealer.unseal(value) if dialect.is_confidential(key) else value
            if found is None:
                log.warning("datasource %s: %s %s was sealed under another key; left out", name, what, key)
                continue
            clear[key] = found
        return clear

    def _writable(self, name: str) -> Store:
        if name in self._configured:
            raise InvalidRequestError(
                f"datasource {name!r} comes from the configuration file and cannot be changed over REST"
            )
        if self._store is None:
            raise InvalidRequestError("datasources cannot be changed in this deployment")
        return self._store

    def _forget(self, name: str) -> None:
        self._cache.pop(name)

    @classmethod
    def from_file(cls, path: Path, store: Store | None = None, *, sealer: Sealer | None = None) -> DatasourceRegistry:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidRequestError(f"cannot read datasources from {path}: {exc}") from exc
        if not isinstance(raw, list):
            raise InvalidRequestError(f"{path} must hold a JSON list of datasources")
        return cls([parse_datasource(d) for d in raw], store, sealer=sealer)


def local_datasource(name: str = "local") -> Datasource:
    """The embedded default's datasource: Spark on this machine (``properties.master`` may point it
    at a cluster), its tables in the catalog the local launcher gives its jobs. It is listed as
    ``S3GLUE``, the connector Dashboards offers for Spark queries."""
    return Datasource(
        name=name,
        connector=dialect.S3GLUE,
        description="Spark on this machine, tables in the local catalog",
        properties={dialect.ENGINE: dialect.LOCAL},
    )
