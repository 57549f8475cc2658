"""What the plugin and the job share: document models, the state machine, ids and index access.

Nothing here imports the web layer or Spark, so both halves (``async_query`` and ``flint_repl_job``)
can depend on it.
"""
