"""The console's two cookies (``docs/console.md``).

**The login cookie** holds the caller's own ``Authorization`` header, sealed (Fernet: AES-128-CBC
with an HMAC-SHA256) under a key derived from the service's master key, with its time of issue.
Every console request hands that header back to the API's authenticator, so a console request is
checked exactly as an API request is (the credential cache, the users file re-read when it
changes, the cluster's security plugin, the failed-login limit), and a user removed or a
password changed stops the console as it stops the API. The page never sees the credential: the
cookie is ``HttpOnly``.

**The CSRF token** is a signed double-submit token: a random nonce and its HMAC under another
derived key, set as a cookie and written into the page, and sent back by the page's scripts in
the ``X-CSRF-Token`` header of every state-changing request; the two must be equal and the HMAC
valid. Another site can neither read the page nor set a cookie that passes the HMAC.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken

LOGIN_COOKIE = "aq_console"
CSRF_COOKIE = "aq_csrf"
CSRF_HEADER = b"x-csrf-token"


class ConsoleTokens:
    """Seals login cookies and makes and checks CSRF tokens, with keys derived from ``secret``."""

    def __init__(self, secret: bytes, session_s: int) -> None:
        login_key = hmac.digest(secret, b"login", "sha256")
        self._fernet = Fernet(base64.urlsafe_b64encode(login_key))
        self._csrf_key = hmac.digest(secret, b"csrf", "sha256")
        self.session_s = session_s

    # -- the login cookie ---------------------------------------------------------------------

    def seal_login(self, authorization: bytes, issued_at: int | None = None) -> str:
        """The login cookie's value (``issued_at``: seconds since the epoch, now by default)."""
        if issued_at is None:
            return self._fernet.encrypt(authorization).decode("ascii")
        return self._fernet.encrypt_at_time(authorization, issued_at).decode("ascii")

    def open_login(self, cookie: str) -> bytes | None:
        """The ``Authorization`` header a login cookie holds; None when it is not one of ours or
        is older than ``session_s``."""
        try:
            return self._fernet.decrypt(cookie.encode("ascii"), ttl=self.session_s)
        except (InvalidToken, ValueError):
            return None

    # -- CSRF -------------------------------------------------------------------------------------

    def new_csrf(self) -> str:
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self._sign(nonce)}"

    def csrf_valid(self, token: str | None) -> bool:
        """Whether ``token`` is one this service made."""
        if not token or token.count(".") != 1:
            return False
        nonce, signature = token.split(".")
        return hmac.compare_digest(signature, self._sign(nonce))

    def csrf_matches(self, cookie: str | None, header: str | None) -> bool:
        """A state-changing request's check: the header equals the cookie, and it is ours."""
        if not cookie or not header:
            return False
        return hmac.compare_digest(cookie.encode(), header.encode()) and self.csrf_valid(cookie)

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._csrf_key, nonce.encode("ascii", "replace"), hashlib.sha256).hexdigest()
