"""``async-query package-job``: build and upload what EMR Serverless needs to run the job."""

from __future__ import annotations

from typing import Any


def add_commands(sub: Any) -> None:  # argparse's _SubParsersAction
    """Register ``package-job`` on the ``async-query`` parser."""
    del sub
