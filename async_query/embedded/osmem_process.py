"""``osmem-server`` as the index server's child, in a session of its own.

A session of its own keeps a terminal's Ctrl-C (SIGINT to the whole foreground process group)
from stopping it while the service shuts down and still writes (``osmem-server`` handles SIGINT
itself, so an inherited "ignore" does not hold). It still ends with its parent: it watches the
parent's pid and its stdin, which the index server holds. Its state is memory only: when the
index server dies it has nothing left to serve, as no reply can be acknowledged without the journal.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

#: Loading a large snapshot takes a while.
START_TIMEOUT_S = 600.0
STOP_GRACE_S = 5.0


class OsmemStartError(RuntimeError):
    """``osmem-server`` exited or stayed silent at start (a snapshot it cannot load, say)."""


class OsmemProcess:
    def __init__(self, process: subprocess.Popen[bytes], ready: dict[str, Any]) -> None:
        self.process = process
        self.url: str = ready["url"]

    @classmethod
    def start(cls, seed: Path | None) -> OsmemProcess:
        from osmem_server import resolve_binary

        command = [resolve_binary(), "--addr", "127.0.0.1:0", "--no-ja", "--parent-pid", str(os.getpid())]
        if seed is not None:
            command += ["--seed", str(seed)]
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        ready = ready_line(process)
        if ready is None:
            if process.poll() is None:
                process.kill()
            process.wait()
            raise OsmemStartError(f"osmem-server did not start (exit code {process.returncode}; its log is above)")
        return cls(process, ready)

    def close(self) -> None:
        """Stop it: stdin closed, then SIGKILL after a grace period."""
        if self.process.poll() is not None:
            return
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def ready_line(process: subprocess.Popen[bytes], name: str = "osmem-start") -> dict[str, Any] | None:
    """The first JSON line with a ``url`` on the process's stdout (how ``osmem-server`` and the
    embedded index's keeper say they are ready), or None if it exits or times out."""
    found: dict[str, Any] = {}

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "url" in message:
                found.update(message)
                return

    reader = threading.Thread(target=read, name=name, daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    return found or None
