"""Keeps the database listings someone browsed recently warm in the read model's cache.

A listing (SHOW TABLE EXTENDED over a database) asked for within ``catalog_keep_warm_s`` is fetched
again in the background shortly before its cached parts reach the staleness bound, so that a
Dashboards user who comes back to it is answered from the cache instead of paying the catalog's
cold fetch again. It never serves anything staler than the bound: a refresh only replaces entries
with fresher ones, and is dropped if an invalidation came in while it fetched (docs/catalog.md).
"""

from __future__ import annotations

import logging

from async_query.catalog.readmodel import CatalogReadModel
from async_query.workers import Worker

log = logging.getLogger(__name__)

#: How often the keeper looks for listings about to expire (a look reads the cache only).
TICK_S = 2.0


class CatalogKeepWarm(Worker):
    """Refreshes the read model's due listings (:meth:`CatalogReadModel.due`), one at a time."""

    name = "catalog-keep-warm"

    def __init__(self, model: CatalogReadModel, interval_s: float = TICK_S) -> None:
        super().__init__(interval_s)
        self.model = model
        #: Listings refreshed, and refreshes dropped or failed, since start.
        self.refreshed = 0
        self.dropped = 0

    def run_once(self) -> None:
        for asked in self.model.due():
            if self._stop.is_set():
                return
            if self.model.refresh(asked):
                self.refreshed += 1
                log.debug("listing %s.%s refreshed in %.2f s", asked.datasource.name, asked.database, asked.refresh_s)
            else:
                self.dropped += 1
