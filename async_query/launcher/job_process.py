"""How a local job's process starts: as the job user, with the environment it needs there, in a
private view where that user cannot pass to what it needs (:mod:`async_query.security.views`).

The launcher (:mod:`.local`) decides what a job runs and keeps track of it; this starts it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from async_query.security import views
from async_query.security.job_user import JobPython, JobUser, JobUserError, installation_places
from query_core.jobconf import job_package_dir

OPEN_LOG = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
#: First on a local job's ``PYTHONPATH``: its ``sitecustomize``, which every Python process of the
#: job runs at its start, those Spark starts with its own daemon too (docs/job.md, "PySpark from
#: its installed package").
STARTUP_DIR = job_package_dir() / "startup"


class JobProcesses:
    """Starts the job processes of one launcher (its job user, Python and ``spark-submit``)."""

    def __init__(self, user: JobUser, python: JobPython, spark_submit: str, spark_home: str | None) -> None:
        self.user = user
        self.python = python
        #: ``SPARK_HOME`` of pyspark's own ``spark-submit`` (None: a configured one's own).
        self.spark_home = spark_home
        installed, submit = installation_places(python), Path(os.path.realpath(spark_submit))
        #: What every job reads of this machine's software.
        self.software = [*installed, submit.parent]
        #: What the job user must be let in by its own modes: the software's places, and the
        #: ``spark-submit`` it runs (not the directory that holds it, which it only passes).
        self._must_read = [*installed, submit]

    def environment(self, tmp: Path) -> dict[str, str]:
        """What the job's processes need as the job user: its Python (and where this
        installation's code is, when that Python is not this one), its temporary directory, and
        its name and home (its temporary directory) when it is another user."""
        python = self.python.executable
        env = {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "TMPDIR": str(tmp)}
        inherited = os.environ.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join([str(STARTUP_DIR), *self.python.path, *([inherited] if inherited else [])])
        if self.python.path:
            env["PYTHONNOUSERSITE"] = "1"
        if self.spark_home is not None and "SPARK_HOME" not in os.environ:
            env["SPARK_HOME"] = self.spark_home
        if self.user.switches:
            env.update(HOME=str(tmp), USER=self.user.name, LOGNAME=self.user.name)
        return env

    def view(self, writes: list[Path]) -> views.View:
        """What a job sees where the job user cannot pass to what it needs: this machine's
        software (read-only) and ``writes``, its own places."""
        return views.plan_view(self.user, self.software, writes)

    def spawn(self, command: list[str], env: dict[str, str], tmp: Path, log_file: Path, writes: list[Path]) -> subprocess.Popen[bytes]:
        """Start ``command`` as the job user, through its view where it needs one, in its own
        process group, in ``tmp``, its output appended to ``log_file`` (a file of the service's,
        never followed if it is a link)."""
        out = os.open(log_file, OPEN_LOG, 0o600)
        try:
            return views.spawn(
                command, self.user, view=self.view(writes), cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, new_session=True
            )
        finally:
            os.close(out)

    def problem(self, writes: list[Path]) -> str | None:
        """What keeps the job user from what its jobs need (None: nothing): a private view this
        machine cannot make, or a place whose own modes refuse that user."""
        try:
            views.check(self.user, self.view(writes), self._must_read)
        except JobUserError as exc:
            return exc.message
        return None
