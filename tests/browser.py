"""The browser the console's tests and its bench drive: Debian's ``chromium`` (``.ci/run``
installs it), headless, through Playwright; never a browser downloaded at run time."""

from __future__ import annotations

import os
import shutil

#: Headless, and nothing that reaches beyond the machine (no QUIC, no background fetches,
#: updates or sync); no sandbox, as the tests run as root in CI.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """The Chromium to drive (``$ASYNC_QUERY_CHROMIUM``, else Debian's), or None when there is none."""
    for candidate in (os.environ.get("ASYNC_QUERY_CHROMIUM", ""), "/usr/bin/chromium", shutil.which("chromium") or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None
