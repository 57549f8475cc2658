"""The launchers of a deployment, by engine: which one starts, describes and stops a datasource's jobs.

Shared launchers are given by engine (``local``, and whatever the runtime adds); an EMR Serverless
launcher is otherwise built from the settings, one per execution role, the first time a datasource
of that role needs it. Handlers, liveness, the workers and health are all given this registry, so
none of them calls back into the service (``docs/datasources.md``, engines).
"""

from __future__ import annotations

import threading

from async_query import datasource_dialect as dialect
from async_query.datasources import Datasource, DatasourceRegistry
from async_query.launcher.base import Launcher, stop_job_within
from async_query.settings import Settings
from query_core.errors import InvalidRequestError, UnknownDatasourceError
from query_core.models import SessionDoc


class LauncherRegistry:
    """Launchers by engine, and the EMR Serverless ones built per execution role."""

    def __init__(self, settings: Settings, datasources: DatasourceRegistry, shared: dict[str, Launcher]) -> None:
        self.settings = settings
        self.datasources = datasources
        #: Launchers by engine (``local``, ``emr-serverless``), given when the plugin is built.
        self.shared = shared
        self._emr: dict[str, Launcher] = {}
        self._lock = threading.Lock()

    @property
    def default_engine(self) -> str:
        """The engine of datasources that name none: EMR Serverless when the settings configure
        it (as the reference runs every S3GLUE datasource there), else local Spark."""
        if self.settings.spark_execution_engine_config is not None:
            return dialect.EMR_SERVERLESS
        return dialect.LOCAL if dialect.LOCAL in self.shared else next(iter(self.shared), dialect.LOCAL)

    def check(self, datasource: Datasource) -> None:
        """Refuse (a 400) a datasource this deployment cannot run: an engine it has no launcher
        for, or an execution role its settings do not list (docs/datasources.md)."""
        engine = datasource.engine or self.default_engine
        emr = self.settings.spark_execution_engine_config
        if engine not in self.shared and not (engine == dialect.EMR_SERVERLESS and emr is not None):
            raise InvalidRequestError(
                f"engine {engine} is not available here: EMR Serverless needs ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG"
            )
        role = datasource.properties.get(dialect.EXECUTION_ROLE)
        allowed = {*self.settings.emr_execution_roles, *([emr.execution_role_arn] if emr else [])}
        if role is not None and role not in allowed:
            raise InvalidRequestError(
                f"{dialect.EXECUTION_ROLE} must be one of the execution roles listed in ASYNC_QUERY_EMR_EXECUTION_ROLES"
            )

    def for_datasource(self, datasource: Datasource) -> Launcher:
        """The launcher of a datasource's engine: shared, or built for EMR Serverless from the
        settings (one per execution role)."""
        engine = datasource.engine or self.default_engine
        if engine in self.shared:
            return self.shared[engine]
        if engine == dialect.EMR_SERVERLESS:
            from async_query.launcher.emr import execution_role_of, launcher_from_settings

            role = execution_role_of(datasource, self.settings)
            with self._lock:
                launcher = self._emr.get(role)
                if launcher is None:
                    launcher = self._emr[role] = launcher_from_settings(self.settings, role)
                return launcher
        raise UnknownDatasourceError(f"no launcher for engine {engine!r} of datasource {datasource.name!r}")

    def for_session(self, session: SessionDoc) -> Launcher:
        """The launcher of the datasource a session belongs to."""
        return self.for_datasource(self.datasources.get(session.data_source_name))

    def check_name(self, datasource: Datasource) -> str:
        """The health check's name for a datasource's launcher: a shared one's engine, an EMR
        Serverless one's datasource."""
        shared = datasource.connector in self.shared
        return f"launcher:{datasource.connector if shared else datasource.name}"

    def stop_job(self, datasource: str, job_id: str) -> None:
        """Cancel a job through its datasource's launcher, waiting at most ``stop_job_timeout_s``."""
        launcher = self.for_datasource(self.datasources.get(datasource))
        stop_job_within(launcher, job_id, self.settings.stop_job_timeout_s)

    def all(self) -> list[Launcher]:
        """The shared launchers, and those built per EMR Serverless execution role so far."""
        with self._lock:
            built = list(self._emr.values())
        return [*self.shared.values(), *built]

    def close(self) -> None:
        for launcher in self.all():
            launcher.close()
