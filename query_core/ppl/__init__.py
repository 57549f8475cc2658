"""PPL (Piped Processing Language) front end: parsed here, translated to Spark SQL text.

:func:`parse_ppl` checks the syntax (the plugin does it at POST time, a :class:`PplSyntaxError` is a
400); :func:`to_spark_sql` translates a query for the job, which runs the SQL on Spark.
"""

from query_core.ppl.errors import PplSemanticError, PplSyntaxError
from query_core.ppl.parser import parse_ppl
from query_core.ppl.translate import to_spark_sql

__all__ = ["PplSemanticError", "PplSyntaxError", "parse_ppl", "to_spark_sql"]
