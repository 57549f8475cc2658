"""Authentication: from a request's ``Authorization`` header to a :class:`Principal`.

Three authenticators, one per ``ASYNC_QUERY_AUTH`` mode:

* :class:`NoAuthentication` (``none``): everyone is the anonymous admin (the REST layer allows it
  on loopback only).
* :class:`BasicAuthentication` (``basic``): HTTP Basic against the users file.
* :class:`ClusterAuthentication` (``cluster``): the header is handed to the index cluster's
  security plugin (``GET /_plugins/_security/authinfo``), which says who it is and their roles.

A header that checked out is trusted for ``auth_cache_s`` seconds (:class:`CredentialCache`), so
the costly check (an argon2 hash, or a round trip to the cluster) is paid once per client and
interval, not per request. Concurrent requests with the same unverified header share one check.
Failed checks are not remembered as answers (a wrong password costs a full check every time), but
they are counted per client address: an address that fails too often is refused for a while
without a check (:mod:`.throttle`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import secrets
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

import anyio
import anyio.to_thread
import httpx
from cachetools import TTLCache

from async_query.security.errors import AuthUnavailableError, UnauthorizedError
from async_query.security.principal import ANONYMOUS, DEFAULT_ADMIN_ROLES, Principal
from async_query.security.throttle import FailedLogins
from async_query.security.users import UserDirectory

log = logging.getLogger(__name__)

AUTHINFO = "/_plugins/_security/authinfo"
#: Longer Authorization headers are refused unread (a Basic header of a maximal user and password
#: is about 1.5 KB; bearer tokens of identity providers stay well below this).
MAX_HEADER = 16_384
#: Password checks running at once (each takes 64 MiB and a core for about 0.1 s).
HASH_CHECKS = 2


class Authenticator(Protocol):
    mode: str

    async def authenticate(self, authorization: bytes | None, client: str | None = None) -> Principal:
        """The caller, or :class:`UnauthorizedError` / :class:`AuthUnavailableError`
        (:class:`TooManyFailedLoginsError` while ``client``, the caller's address, is refused)."""
        ...

    async def aclose(self) -> None: ...


class CredentialCache:
    """Verified Authorization headers, for a short while and a bounded number of them.

    Keys are an HMAC-SHA256 of the header under a key drawn at start-up, never the header: what
    the cache holds cannot be replayed, nor attacked offline without this process's key.
    """

    def __init__(self, ttl_s: float, entries: int) -> None:
        self._key = secrets.token_bytes(32)
        #: Bumped by every clear, so a check that started before one does not refill the cache.
        self.generation = 0
        self._entries: TTLCache[bytes, Principal] | None = (
            TTLCache(maxsize=entries, ttl=ttl_s) if ttl_s > 0 and entries > 0 else None
        )

    def key(self, header: bytes) -> bytes:
        return hmac.digest(self._key, header, "sha256")

    def get(self, key: bytes) -> Principal | None:
        return self._entries.get(key) if self._entries is not None else None

    def put(self, key: bytes, principal: Principal, generation: int) -> None:
        """Remember a check's answer, unless the cache was cleared since the check started."""
        if self._entries is not None and generation == self.generation:
            self._entries[key] = principal

    def clear(self) -> None:
        self.generation += 1
        if self._entries is not None:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries) if self._entries is not None else 0


class NoAuthentication:
    mode = "none"

    async def authenticate(self, authorization: bytes | None, client: str | None = None) -> Principal:
        return ANONYMOUS

    async def aclose(self) -> None:
        return None


def parse_basic(header: bytes) -> tuple[str, str] | None:
    """(user, password) of a ``Basic`` header (RFC 7617, UTF-8), or None if it is not one."""
    scheme, _, token = header.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon and user else None


class _HeaderAuthentication:
    """What ``basic`` and ``cluster`` share: the cache, and one check per header at a time."""

    mode = ""

    def __init__(
        self, cache: CredentialCache, admin_roles: Iterable[str], failed_logins: FailedLogins | None = None
    ) -> None:
        self.cache = cache
        self.admin_roles = frozenset(admin_roles)
        #: Failed checks per client address (:mod:`.throttle`); None: not counted.
        self.failed_logins = failed_logins or FailedLogins(0, 0, 0)
        self._pending: dict[bytes, asyncio.Future[Principal]] = {}

    async def authenticate(self, authorization: bytes | None, client: str | None = None) -> Principal:
        if not authorization:
            raise UnauthorizedError()
        self._before_lookup()
        key = self.cache.key(authorization)
        found = self.cache.get(key)
        if found is not None:
            return found  # verified already: let in even from a refused address (.throttle)
        if len(authorization) > MAX_HEADER:
            raise UnauthorizedError()
        self.failed_logins.check(client)
        try:
            return await self._once(key, lambda: self._verify_and_keep(key, authorization))
        except UnauthorizedError:
            self.failed_logins.failed(client)
            raise

    def _before_lookup(self) -> None:
        """A hook run before each cache lookup (``basic`` notices a changed users file here)."""

    async def _verify_and_keep(self, key: bytes, authorization: bytes) -> Principal:
        generation = self.cache.generation
        principal = await self._verify(authorization)
        self.cache.put(key, principal, generation)
        return principal

    async def _verify(self, authorization: bytes) -> Principal:
        raise NotImplementedError

    async def _once(self, key: bytes, check: Callable[[], Awaitable[Principal]]) -> Principal:
        """Run ``check`` once for every concurrent request with the same header."""
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(check())
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._settled(key, done))
        # shield: a request whose client went away must not cancel the check the others await
        return await asyncio.shield(pending)

    def _settled(self, key: bytes, done: asyncio.Future[Principal]) -> None:
        self._pending.pop(key, None)
        if not done.cancelled():
            done.exception()  # retrieved: every awaiter has seen it (or none was left to)

    async def aclose(self) -> None:
        return None


class BasicAuthentication(_HeaderAuthentication):
    """HTTP Basic against the users file."""

    mode = "basic"

    def __init__(
        self,
        users: UserDirectory,
        cache: CredentialCache,
        admin_roles: Iterable[str] = DEFAULT_ADMIN_ROLES,
        failed_logins: FailedLogins | None = None,
    ) -> None:
        super().__init__(cache, admin_roles, failed_logins)
        self.users = users
        self._limiter: anyio.CapacityLimiter | None = None

    def _before_lookup(self) -> None:
        if self.users.changed():
            self.cache.clear()  # a removed user or a changed password takes effect now

    async def _verify(self, authorization: bytes) -> Principal:
        parsed = parse_basic(authorization)
        if parsed is None:
            raise UnauthorizedError()
        name, password = parsed
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(HASH_CHECKS)
        user = await anyio.to_thread.run_sync(self.users.verify, name, password, limiter=self._limiter)
        if user is None:
            raise UnauthorizedError(claimed_user=name if self.users.knows(name) else "")
        return Principal.of(user.name, user.roles, self.admin_roles)


class ClusterAuthentication(_HeaderAuthentication):
    """The caller's header, checked by the index cluster's security plugin.

    Only the caller's ``Authorization`` header is sent (never the service's own credentials), to
    ``GET <url>/_plugins/_security/authinfo``: 200 names the user and its roles, 401 or 403 refuse
    it; anything else (no plugin there, the cluster down) is a 503, so that an outage never reads
    as a wrong password.
    """

    mode = "cluster"

    def __init__(
        self,
        url: str,
        cache: CredentialCache,
        admin_roles: Iterable[str] = DEFAULT_ADMIN_ROLES,
        verify: bool | ssl.SSLContext = True,
        timeout_s: float = 5.0,
        failed_logins: FailedLogins | None = None,
    ) -> None:
        super().__init__(cache, admin_roles, failed_logins)
        self.url = url.rstrip("/")
        self._verify_tls = verify
        self._timeout = timeout_s
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.url,
                verify=self._verify_tls,
                timeout=self._timeout,
                limits=httpx.Limits(max_connections=16, max_keepalive_connections=8),
                trust_env=False,
            )
        return self._http

    async def _verify(self, authorization: bytes) -> Principal:
        try:
            reply = await self._client().get(AUTHINFO, headers={"Authorization": authorization.decode("latin-1")})
        except httpx.HTTPError as exc:
            log.warning("cannot ask the index cluster's security plugin who is calling: %s", type(exc).__name__)
            raise AuthUnavailableError(
                "the credentials could not be checked: the index cluster did not answer"
            ) from None
        if reply.status_code in (401, 403):
            raise UnauthorizedError()
        if reply.status_code != 200:
            log.error(
                "the index cluster answered %d to %s: is its security plugin installed and enabled?",
                reply.status_code,
                AUTHINFO,
            )
            raise AuthUnavailableError(
                "the credentials could not be checked: the index cluster's security plugin did not answer"
            )
        return self._principal(reply)

    def _principal(self, reply: httpx.Response) -> Principal:
        try:
            info: Any = reply.json()
        except ValueError:
            info = None
        name = info.get("user_name") if isinstance(info, dict) else None
        if not isinstance(name, str) or not name:
            raise UnauthorizedError()
        roles = [r for key in ("roles", "backend_roles") for r in _strings(info.get(key))]
        return Principal.of(name, roles, self.admin_roles)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
