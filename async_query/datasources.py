"""Named datasources: each has its connector (launcher), its result index and its Spark settings.

Datasources come from a configuration file (read-only at run time) and from the REST API, which
keeps them in the ``.ql-datasources`` index so every plugin process sees them. Lookups are on
every request, so index-backed ones are cached for a few seconds, in a bounded cache (a name that
names nothing is remembered too, so a client asking for many names cannot make one index read per
request, nor grow the cache without bound).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from async_query.caches import Cache
from query_core.errors import DocumentExistsError, InvalidRequestError, UnknownDatasourceError
from query_core.ids import DATASOURCE_NAME, RESULT_INDEX_PREFIX, default_result_index
from query_core.store import Store
from query_core.validation.policy import PolicyError, check_properties


class _Missing:
    """What the lookup cache keeps for a name that names no datasource."""


MISSING = _Missing()
#: The masters ``spark-submit`` takes in client mode (``properties.master`` of a local datasource).
SPARK_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|(spark|mesos)://[\w.,:\[\]-]+|yarn|k8s://\S+")
Connector = Literal["local", "emr-serverless"]


class Datasource(BaseModel):
    """A datasource, in the reference's datasource API shape (camelCase on the wire)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    name: str
    description: str = ""
    #: ``local`` runs spark-submit on this machine; ``emr-serverless`` starts EMR Serverless jobs.
    connector: Connector = "local"
    result_index: str = ""
    #: Connector properties (EMR Serverless: applicationId, executionRoleARN, region, ...).
    properties: dict[str, str] = Field(default_factory=dict)
    #: Extra Spark conf for the jobs of this datasource (catalog settings, warehouse, ...).
    spark_conf: dict[str, str] = Field(default_factory=dict)
    allowed_roles: list[str] = Field(default_factory=list)
    status: Literal["ACTIVE", "DISABLED"] = "ACTIVE"

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not DATASOURCE_NAME.match(name):
            raise ValueError("a datasource name starts with a letter and holds letters, digits, '_' or '-'")
        return name

    @field_validator("connector", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower().replace("_", "-") if isinstance(value, str) else value

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

    @property
    def results(self) -> str:
        """The result index of this datasource."""
        return self.result_index or default_result_index(self.name)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def parse_datasource(raw: Any) -> Datasource:
    """A datasource from untrusted JSON; a clear 400 when it is not one."""
    try:
        return Datasource.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
        raise InvalidRequestError(f"invalid datasource: {problems}") from None


class DatasourceRegistry:
    """The datasources this deployment serves, by name."""

    def __init__(
        self, configured: list[Datasource], store: Store | None = None, cache_s: float = 5.0, entries: int = 1000
    ) -> None:
        self._configured = {d.name: d for d in configured}
        self._store = store
        #: Stored datasources as read (None: there is none of that name), for ``cache_s`` seconds.
        self._cache: Cache[str, Datasource | _Missing] = Cache(entries, ttl_s=cache_s)

    def get(self, name: str) -> Datasource:
        found = self._configured.get(name) or self._stored(name)
        if found is None or found.status != "ACTIVE":
            raise UnknownDatasourceError(f"no datasource named {name!r} is configured")
        return found

    def find(self, name: str) -> Datasource | None:
        """The datasource ``name`` whatever its status (None: there is none, or it was deleted)."""
        return self._configured.get(name) or self._stored(name)

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
        found = Datasource.model_validate(source) if source else None
        self._cache.put(name, found if found is not None else MISSING)
        return found

    @property
    def configured(self) -> list[Datasource]:
        """The datasources of the configuration (known without reading the index)."""
        return list(self._configured.values())

    def all(self) -> list[Datasource]:
        stored = [Datasource.model_validate(s) for s in self._store.datasources.list()] if self._store else []
        return [*self._configured.values(), *(d for d in stored if d.name not in self._configured)]

    def create(self, datasource: Datasource) -> None:
        store = self._writable(datasource.name)
        if datasource.name in self._configured:
            raise InvalidRequestError(f"datasource {datasource.name!r} already exists")
        try:
            store.datasources.create(datasource.name, datasource.to_wire())
        except DocumentExistsError:
            raise InvalidRequestError(f"datasource {datasource.name!r} already exists") from None
        self._forget(datasource.name)

    def update(self, datasource: Datasource) -> None:
        store = self._writable(datasource.name)
        if not store.datasources.replace(datasource.name, datasource.to_wire()):
            raise UnknownDatasourceError(f"no datasource named {datasource.name!r} is configured")
        self._forget(datasource.name)

    def delete(self, name: str) -> None:
        store = self._writable(name)
        if not store.datasources.delete(name):
            raise UnknownDatasourceError(f"no datasource named {name!r} is configured")
        self._forget(name)

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
    def from_file(cls, path: Path, store: Store | None = None) -> DatasourceRegistry:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidRequestError(f"cannot read datasources from {path}: {exc}") from exc
        if not isinstance(raw, list):
            raise InvalidRequestError(f"{path} must hold a JSON list of datasources")
        return cls([parse_datasource(d) for d in raw], store)


def local_datasource(name: str = "local") -> Datasource:
    """The embedded default's datasource: Spark on this machine (``properties.master`` may point it
    at a cluster), its tables in the catalog the local launcher gives its jobs."""
    return Datasource(name=name, connector="local", description="Spark on this machine, tables in the local catalog")
