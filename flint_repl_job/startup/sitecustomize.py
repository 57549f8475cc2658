"""Run by Python at the start of each process of a local job, ahead of any other ``sitecustomize``.

Local jobs have this file's directory on their ``PYTHONPATH`` (:mod:`async_query.launcher.job_process`),
so every Python process Spark starts for them runs it, those started by Spark's own daemon too:
the workers that plan Python data sources, which no setting gives another daemon. It moves the
zips of an installed pyspark to the end of the path (:mod:`flint_repl_job.pypath`; docs/job.md,
"PySpark from its installed package"), then runs the ``sitecustomize`` it shadows, if there is one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _prefer_installed_pyspark() -> None:
    try:
        from flint_repl_job.pypath import prefer_installed_pyspark
    except ImportError:  # this installation's modules are not on this process's path
        return
    sys.path[:] = prefer_installed_pyspark(sys.path)


def _shadowed() -> None:
    """Run the ``sitecustomize`` this one stands in front of (the next one on the path)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_prefer_installed_pyspark()
_shadowed()
