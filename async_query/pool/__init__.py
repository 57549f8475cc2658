"""The warm pool: started, idle jobs that new interactive sessions claim (docs/job.md).

- :mod:`.pools`: which pool a datasource's sessions claim from (its key: the engine and every
  setting fixed when a job starts) and its size;
- :mod:`.claims`: :class:`SessionJobs`, the one call that gives a new session its job, claimed
  with one conditional write or launched, and the restart of a session whose claimed job died
  before it started it;
- :mod:`.keeper`: :class:`PoolKeeper`, the loop that refills the pools, ends silent jobs' slots,
  and stops jobs on scale-down and with the service.

The slot documents and their moves are the store's (``query_core/store/pool.py``); the job's side
is ``flint_repl_job/runners/pool.py``.
"""

from async_query.pool.claims import SessionJobs, StartedJob
from async_query.pool.keeper import PoolKeeper
from async_query.pool.pools import Pool, Pools

__all__ = ["Pool", "PoolKeeper", "Pools", "SessionJobs", "StartedJob"]
