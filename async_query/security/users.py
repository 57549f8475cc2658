"""The users of ``basic`` authentication: a JSON file of names, roles and argon2id password hashes.

::

    {"version": 1, "users": [{"name": "alice", "roles": ["all_access"], "hash": "$argon2id$v=19$..."}]}

The file is written only by ``async-query user ...`` (:class:`UsersFile`): 0600, replaced
atomically, writers serialized by a lock file beside it. The service reads it
(:class:`UserDirectory`) and notices a change within a second, so ``user remove`` takes effect
without a restart.

Hashes are argon2id (``argon2-cffi``, the parameters of RFC 9106's second recommendation: 64 MiB,
3 passes, 4 lanes; about 0.1 s per check on one core). A check is costly on purpose: the service
checks a password once and then trusts the same Authorization header for a short while
(:mod:`async_query.security.authn`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from async_query.security.files import PRIVATE_DIR, write_private
from async_query.security.principal import ANONYMOUS_NAME

log = logging.getLogger(__name__)

VERSION = 1
#: User names: no ``:`` (HTTP Basic splits there), no spaces, nothing a log or terminal would mangle.
USER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\Z")
#: Role names: printable, no spaces or commas (role lists are comma separated in the environment).
ROLE_NAME = re.compile(r"^[^\s,\x00-\x1f\x7f]{1,128}\Z")
MIN_PASSWORD = 8
MAX_PASSWORD = 1024


class UsersFileError(Exception):
    """The users file cannot be used; ``str()`` says why and what to do, for a person."""


@dataclass(frozen=True)
class User:
    name: str
    roles: tuple[str, ...]
    password_hash: str = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "roles": list(self.roles), "hash": self.password_hash}


def check_name(name: str) -> str:
    if not USER_NAME.match(name):
        raise UsersFileError(
            f"invalid user name {name[:70]!r}: use up to 64 letters, digits, '_', '.', '@' or '-', "
            "starting with a letter, digit or '_'"
        )
    if name == ANONYMOUS_NAME:
        raise UsersFileError(f"the user name {ANONYMOUS_NAME!r} is reserved (it is the caller when auth is none)")
    return name


def check_roles(roles: Iterable[str]) -> tuple[str, ...]:
    kept = tuple(dict.fromkeys(roles))
    if not kept:
        raise UsersFileError("give the user at least one role (--role ROLE; all_access makes an admin)")
    for role in kept:
        if not ROLE_NAME.match(role):
            raise UsersFileError(f"invalid role {role[:70]!r}: no spaces, commas or control characters, at most 128")
    return kept


def check_password(password: str) -> str:
    if len(password) < MIN_PASSWORD:
        raise UsersFileError(f"the password is too short: use at least {MIN_PASSWORD} characters")
    if len(password) > MAX_PASSWORD:
        raise UsersFileError(f"the password is too long: use at most {MAX_PASSWORD} characters")
    return password


def read_users(path: Path) -> dict[str, User]:
    """The users in ``path``; :class:`UsersFileError` if it is missing, unreadable or malformed."""
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise UsersFileError(f"the users file {path} does not exist") from None
    except OSError as exc:
        raise UsersFileError(f"cannot read the users file {path}: {exc.strerror}") from None
    except ValueError:
        raise UsersFileError(f"the users file {path} is not valid JSON") from None
    entries = raw.get("users") if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise UsersFileError(f"the users file {path} has no 'users' list")
    users: dict[str, User] = {}
    for i, entry in enumerate(entries):
        user = _user_from_json(entry)
        if user is None:
            raise UsersFileError(f"the users file {path}: entry {i} is not a user (name, roles, hash)")
        users[user.name] = user
    return users


def _user_from_json(entry: object) -> User | None:
    if not isinstance(entry, dict):
        return None
    name, roles, hashed = entry.get("name"), entry.get("roles"), entry.get("hash")
    if not (isinstance(name, str) and USER_NAME.match(name) and isinstance(hashed, str) and hashed.startswith("$")):
        return None
    if not isinstance(roles, list) or not all(isinstance(r, str) and ROLE_NAME.match(r) for r in roles):
        return None
    return User(name, tuple(roles), hashed)


class UsersFile:
    """The users file, for the commands that change it."""

    def __init__(self, path: Path, hasher: PasswordHasher | None = None) -> None:
        self.path = path
        self.hasher = hasher or PasswordHasher()

    def users(self) -> list[User]:
        """Every user, by name; [] when the file does not exist yet."""
        if not self.path.exists():
            return []
        return sorted(read_users(self.path).values(), key=lambda u: u.name)

    def add(self, name: str, password: str, roles: Iterable[str], replace: bool = False) -> bool:
        """Add a user (or, with ``replace``, set an existing user's password and roles); True when
        an existing user was replaced."""
        user = User(check_name(name), check_roles(roles), "")
        hashed = self.hasher.hash(check_password(password))
        with self._locked():
            users = {u.name: u for u in self.users()}
            existed = name in users
            if existed and not replace:
                raise UsersFileError(f"user {name!r} exists; pass --replace to set its password and roles")
            users[name] = User(user.name, user.roles, hashed)
            self._write(users.values())
        return existed

    def remove(self, name: str) -> bool:
        """Remove a user; False when there was none of that name."""
        with self._locked():
            users = {u.name: u for u in self.users()}
            if users.pop(name, None) is None:
                return False
            self._write(users.values())
        return True

    def _write(self, users: Iterable[User]) -> None:
        body = {"version": VERSION, "users": [u.to_json() for u in sorted(users, key=lambda u: u.name)]}
        write_private(self.path, (json.dumps(body, indent=1) + "\n").encode())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialize writers (two ``user add`` at once must not lose one of the users)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


class UserDirectory:
    """The service's view of the users file: checked for a change at most every ``recheck_s``
    seconds (one ``stat``), re-read when it changed, and the password check.

    A file that becomes unreadable or malformed keeps the users last read (and logs why); a file
    that is removed leaves no users, so every request is refused.
    """

    def __init__(self, path: Path, recheck_s: float = 1.0, hasher: PasswordHasher | None = None) -> None:
        self.path = path
        self.recheck_s = recheck_s
        self.hasher = hasher or PasswordHasher()
        self._users: dict[str, User] = {}
        self._signature: tuple[int, int, int] | None = None
        self._checked = 0.0
        self._dummy: str | None = None
        self._lock = threading.Lock()
        self.refresh()

    def changed(self) -> bool:
        """Re-read the file if it changed since the last look (looking at most every
        ``recheck_s``); True when the users may differ from before."""
        now = time.monotonic()
        if now - self._checked < self.recheck_s:
            return False
        return self.refresh()

    def refresh(self) -> bool:
        self._checked = time.monotonic()
        try:
            st = self.path.stat()
        except FileNotFoundError:
            if self._signature is None and not self._users:
                return False
            log.warning("the users file %s is gone: every request is refused until it is back", self.path)
            self._users, self._signature = {}, None
            return True
        signature = (st.st_mtime_ns, st.st_size, st.st_ino)
        if signature == self._signature:
            return False
        if st.st_mode & 0o077:
            log.warning("the users file %s can be read by other users: chmod 600 it", self.path)
        try:
            users = read_users(self.path)
        except UsersFileError as exc:
            log.error("%s; keeping the %d users read before", exc, len(self._users))
            return False
        self._users, self._signature = users, signature
        return True

    def __len__(self) -> int:
        return len(self._users)

    def knows(self, name: str) -> bool:
        return name in self._users

    def verify(self, name: str, password: str) -> User | None:
        """The user if ``password`` is theirs, else None. Blocking (about 0.1 s of CPU): call it
        from a worker thread. An unknown name costs the same as a known one, so timing does not
        tell which names exist."""
        user = self._users.get(name)
        hashed = user.password_hash if user is not None else self._dummy_hash()
        try:
            self.hasher.verify(hashed, password)
        except (VerificationError, InvalidHashError):
            return None
        return user

    def _dummy_hash(self) -> str:
        with self._lock:
            if self._dummy is None:
                self._dummy = self.hasher.hash(os.urandom(16).hex())
            return self._dummy
