"""Entry file for ``spark-submit`` and EMR Serverless ``StartJobRun`` (entryPoint).

The only argument is the result index. Everything else comes from Spark conf keys
(``spark.flint.*``, ``spark.datasource.flint.*``) and the EMR Serverless environment variables.
"""

import os
import sys

# spark-submit puts this file's folder first on sys.path; drop it so that the modules beside this
# file are only ever imported as ``flint_repl_job.<name>`` and cannot shadow top-level packages.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

from flint_repl_job.pypath import prefer_installed_pyspark

sys.path[:] = prefer_installed_pyspark(sys.path)

from flint_repl_job.runners import main  # noqa: E402 (after the path is set: it imports PySpark)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
