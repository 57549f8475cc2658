"""Which warm pool a datasource's sessions claim from, and how large it is.

A pool is keyed by everything fixed when a job starts: the engine that runs it (the launcher's
kind and application), what the launcher fixes for the datasource (a master, a catalog, an
execution role: :meth:`~async_query.launcher.base.Launcher.startup_settings`) and the start-up
part of the datasource's job conf (every Spark setting but the runtime ones:
:func:`query_core.jobconf.is_claim_key`). Datasources with equal keys share a pool; a setting that
becomes per-datasource (a catalog of its own) changes the key by itself, wherever it is added to
those. Everything else a session needs travels with its claim.

A pool's size is the largest ``warmPoolSize`` of its datasources, else the deployment's
``warm_pool_size`` (unset: 1 for local Spark, 0 for EMR Serverless). Datasources whose jobs reach
an index cluster of their own (a Glue-backed datasource's index store) have no pool: their pool
jobs could not read the slots the plugin writes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from async_query import datasource_dialect as dialect
from async_query.datasources import Datasource, DatasourceRegistry
from async_query.launcher.base import Launcher, launch_conf
from async_query.launcher.registry import LauncherRegistry
from async_query.settings import Settings
from query_core.config import OpenSearchConfig
from query_core.errors import AsyncQueryError
from query_core.jobconf import KEYS, is_claim_key
from query_core.models import PoolJobDoc, now_millis
from query_core.states import PoolJobState, SessionType

#: Hex digits of a pool key (in slot ids: ``pool-<key>-<n>``).
KEY_LENGTH = 16


@dataclass(frozen=True)
class Pool:
    """One warm pool: its key, the launcher of its jobs, a datasource whose jobs start as the
    pool's do (its jobs are started with that datasource's start-up settings), and its size."""

    key: str
    launcher: Launcher
    datasource: Datasource
    size: int


class Pools:
    """The deployment's pools, from its datasources and launchers."""

    def __init__(
        self,
        settings: Settings,
        datasources: DatasourceRegistry,
        launchers: LauncherRegistry,
        opensearch: OpenSearchConfig,
    ) -> None:
        self.settings = settings
        self.datasources = datasources
        self.launchers = launchers
        self.opensearch = opensearch
        #: Each pool's size as :meth:`all` last found it (a datasource may have made it larger
        #: than the one claiming needs).
        self.sizes: dict[str, int] = {}

    def conf(
        self, datasource: Datasource, launcher: Launcher, session_id: str, session_type: SessionType, **job: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        """The conf of a job of ``datasource`` (``launch_conf``), and its secret part."""
        return launch_conf(self.settings, datasource, launcher, self.opensearch, session_id, session_type, **job)

    def default_size(self, datasource: Datasource) -> int:
        if self.settings.warm_pool_size is not None:
            return self.settings.warm_pool_size
        return 1 if (datasource.engine or self.launchers.default_engine) == dialect.LOCAL else 0

    def size_of(self, datasource: Datasource) -> int:
        """The idle jobs ``datasource`` asks for (its own ``warmPoolSize``, else the default)."""
        own = datasource.warm_pool_size
        return own if own is not None else self.default_size(datasource)

    def key_of(self, datasource: Datasource, launcher: Launcher) -> str | None:
        """The pool ``datasource``'s sessions may claim from (None: it has none)."""
        if launcher.glue_region and datasource.glue_backed:
            return None
        conf, _ = self.conf(datasource, launcher, "", SessionType.INTERACTIVE, pool_slot="key")
        startup = {k: v for k, v in conf.items() if k not in KEYS and not is_claim_key(k)}
        material = {
            "engine": launcher.kind or type(launcher).__name__,
            "application": launcher.application_id,
            "launcher": launcher.startup_settings(datasource),
            "conf": startup,
        }
        text = json.dumps(material, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]

    def of(self, datasource: Datasource) -> Pool | None:
        """The pool of ``datasource`` when it has one to claim from (None: size 0, or no pool)."""
        size = self.size_of(datasource)
        launcher = self.launchers.for_datasource(datasource)
        key = self.key_of(datasource, launcher)
        if key is None:
            return None
        size = max(size, self.sizes.get(key, 0))
        return Pool(key, launcher, datasource, size) if size > 0 else None

    def all(self) -> list[Pool]:
        """Every pool of the deployment's active datasources, sized (the largest size asked)."""
        found: dict[str, Pool] = {}
        for datasource in self.datasources.all():
            if datasource.status != "ACTIVE":
                continue
            try:
                launcher = self.launchers.for_datasource(datasource)
                key = self.key_of(datasource, launcher)
            except AsyncQueryError:  # an engine this deployment cannot run: nothing to keep warm
                continue
            if key is None:
                continue
            size = self.size_of(datasource)
            known = found.get(key)
            if known is None or size > known.size:
                found[key] = Pool(key, launcher, known.datasource if known else datasource, size)
        self.sizes = {key: pool.size for key, pool in found.items()}
        return list(found.values())


def is_fresh(slot: PoolJobDoc, settings: Settings, now: int | None = None) -> bool:
    """Whether a slot's documents alone vouch for its job: an idle one beat within
    ``stale_heartbeats`` of its interval; a starting one was launched within the start-up limit; a
    claimed one was claimed within its heartbeat limit (it reads its slot every loop period), or,
    claimed while starting, launched within the start-up limit."""
    now = now if now is not None else now_millis()
    limit_ms = (slot.heartbeat_interval_millis or settings.heartbeat_idle_ms) * settings.stale_heartbeats
    if slot.state == PoolJobState.IDLE:
        return now - slot.last_update_time < limit_ms
    started_recently = now - slot.job_start_time < settings.session_start_timeout_s * 1000
    if slot.state == PoolJobState.STARTING:
        return started_recently
    if slot.state == PoolJobState.CLAIMED:
        return now - slot.claim_time < limit_ms if slot.heartbeat_interval_millis else started_recently
    return False
