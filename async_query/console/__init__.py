"""The web console (``docs/console.md``), served under ``/console`` by the service itself.

- :mod:`.tokens`: the login cookie (the caller's credential, sealed) and the CSRF tokens;
- :mod:`.guard`: the one ASGI middleware in front of every console request: static assets and
  the page, the cookie turned back into the credential that the API's authentication checks,
  CSRF on every state-changing request, and the Content-Security-Policy on every reply;
- :mod:`.routes`: the console's JSON endpoints, over the service's use cases and the API's
  authorization (no second path to the index);
- :mod:`.history`, :mod:`.downloads`, :mod:`.figures`: a user's past queries, whole results as
  CSV or JSON, and the operators' figures;
- ``static/``: the page, its style sheet and its plain ES modules (no build step).
"""

from async_query.console.guard import CONSOLE, ConsoleGuard
from async_query.console.routes import console_router
from async_query.console.tokens import ConsoleTokens

__all__ = ["CONSOLE", "ConsoleGuard", "ConsoleTokens", "console_router"]
