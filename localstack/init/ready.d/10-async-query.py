"""LocalStack ready hook: create the async query service's resources (see ../setup.py).

LocalStack runs ``ready.d/*.py`` with ``exec()`` inside its own interpreter (no ``__main__``, no
``__file__``), so this file only loads setup.py from where docker-compose.yml mounts it and calls it.
An exception marks the hook as failed in LocalStack's log; nothing here exits the process.
"""

import os
import runpy

_setup = runpy.run_path(os.environ.get("ASYNC_QUERY_SETUP_SCRIPT", "/etc/localstack/async-query/setup.py"))
_setup["run_from_env"]()
