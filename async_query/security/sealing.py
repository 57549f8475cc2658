"""Datasource credentials sealed in the index (docs/datasources.md).

The reference encrypts the credential properties of the datasources it keeps in ``.ql-datasources``
with a master key (``plugins.query.datasources.encryption.masterkey``). So does this product: a
property whose key is confidential is stored as ``sealed:v1:<token>``, a Fernet token (AES-128-CBC
with an HMAC-SHA256, from the ``cryptography`` package) under a key derived from
``ASYNC_QUERY_DATASOURCES_MASTER_KEY``, or without one from ``<data dir>/datasources.key`` (32
random bytes, made on first use, private to the service's user). Plugin processes that share an
index must share the key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

log = logging.getLogger(__name__)

SEALED = "sealed:v1:"
KEY_FILE = "datasources.key"


class Sealer:
    """Seals and unseals property values with one key."""

    def __init__(self, secret: bytes) -> None:
        self._fernet = Fernet(base64.urlsafe_b64encode(hashlib.sha256(secret).digest()))
        self._secret = secret

    def derived(self, purpose: str) -> bytes:
        """A 32-byte key of its own for ``purpose`` (the console's cookies), from the same master
        key: processes that share the master key share it, and it never equals the sealing key."""
        return hmac.digest(self._secret, b"async-query/" + purpose.encode("utf-8"), "sha256")

    @classmethod
    def ephemeral(cls) -> Sealer:
        """A key of this process alone (what it seals is lost with it): for tests and tools."""
        return cls(secrets.token_bytes(32))

    @classmethod
    def from_settings(cls, master_key: str, data_dir: Path) -> Sealer:
        """The configured master key, else the data directory's key file (made if missing)."""
        if master_key:
            return cls(master_key.encode("utf-8"))
        return cls(_key_file(data_dir / KEY_FILE))

    def seal(self, value: str) -> str:
        return SEALED + self._fernet.encrypt(value.encode("utf-8")).decode("ascii")

    def unseal(self, value: str) -> str | None:
        """The clear value; a value that is not sealed is returned as is; None when it was sealed
        under another key (it is then unusable, and said so in the log without the value)."""
        if not value.startswith(SEALED):
            return value
        try:
            return self._fernet.decrypt(value[len(SEALED) :].encode("ascii")).decode("utf-8")
        except (InvalidToken, ValueError):
            return None


def _key_file(path: Path) -> bytes:
    """The key in ``path``, made (mode 0600, never overwritten) when there is none. The key is
    written in full to a file of its own first, then linked into place, so a process that finds
    the file finds the whole key."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(key)
            out.flush()
            os.fsync(out.fileno())
        os.link(draft, path)
    except FileExistsError:
        return path.read_bytes()  # another process made it first
    finally:
        draft.unlink(missing_ok=True)
    log.info("made the datasource credentials key %s", path)
    return key
