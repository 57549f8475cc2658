"""Query acceleration by Flint indexes: skipping indexes prune the files a query reads, covering
indexes answer the queries they cover (``docs/acceleration.md``).

- :mod:`.accelerator`: where statements go in (``Accelerator.sql``) and plans are rewritten;
- :mod:`.plans`: Spark's plans read (as JSON) and rebuilt through the JVM gateway;
- :mod:`.expressions`: filters as column predicates; :mod:`.skipping`: which files may match;
- :mod:`.covering`: whether a covering index answers a query; :mod:`.files`: paths, snapshots;
- :mod:`.lookup`: the indexes of a table through the store; :mod:`.switches`: the session's
  switches; :mod:`.report`: what was used, for EXPLAIN, logs and figures.

Nothing is imported here, so that :mod:`.report` (read by the job's figures) stays light.
"""
