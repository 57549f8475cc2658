"""Named datasources: each has its launcher kind, its result index and its Spark settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from query_core.errors import InvalidRequestError, UnknownDatasourceError
from query_core.ids import DATASOURCE_NAME, default_result_index

RESULT_INDEX_PREFIX = "query_execution_result"


class Datasource(BaseModel):
    name: str
    #: ``local`` runs spark-submit on this machine; ``emr-serverless`` starts EMR Serverless jobs.
    connector: Literal["local", "emr-serverless"] = "local"
    result_index: str = ""
    #: Extra Spark conf for the jobs of this datasource (catalog settings, warehouse, ...).
    spark_conf: dict[str, str] = Field(default_factory=dict)
    #: Connector properties (EMR Serverless: applicationId, executionRoleARN, region, ...).
    properties: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not DATASOURCE_NAME.match(name):
            raise ValueError("a datasource name starts with a letter and holds letters, digits, '_' or '-'")
        return name

    @field_validator("result_index")
    @classmethod
    def _valid_result_index(cls, index: str) -> str:
        if index and not index.startswith(RESULT_INDEX_PREFIX):
            raise ValueError(f"a custom result index name must start with {RESULT_INDEX_PREFIX!r}")
        return index

    @property
    def results(self) -> str:
        """The result index of this datasource."""
        return self.result_index or default_result_index(self.name)


class DatasourceRegistry:
    """The datasources this deployment serves, by name."""

    def __init__(self, datasources: list[Datasource]) -> None:
        self._by_name = {d.name: d for d in datasources}

    def get(self, name: str) -> Datasource:
        found = self._by_name.get(name)
        if found is None:
            raise UnknownDatasourceError(f"no datasource named {name!r} is configured")
        return found

    def all(self) -> list[Datasource]:
        return list(self._by_name.values())

    @classmethod
    def from_file(cls, path: Path) -> DatasourceRegistry:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidRequestError(f"cannot read datasources from {path}: {exc}") from exc
        return cls([Datasource.model_validate(d) for d in raw])


def local_datasource(warehouse: Path) -> Datasource:
    """The embedded default's one datasource: Spark's in-memory catalog over a local warehouse."""
    return Datasource(
        name="local",
        connector="local",
        spark_conf={
            "spark.sql.warehouse.dir": str(warehouse.resolve()),
            "spark.sql.catalogImplementation": "in-memory",
        },
    )
