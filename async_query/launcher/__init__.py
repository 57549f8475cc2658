"""Launchers start, describe and cancel the Spark job of a session."""

from async_query.launcher.base import JobDescription, JobRequest, JobRunState, Launcher, job_conf

__all__ = ["JobDescription", "JobRequest", "JobRunState", "Launcher", "job_conf"]
