"""Who may call the service and what they may do (docs/security.md):

- :mod:`.middleware`: ``SecurityMiddleware`` authenticates and audits every request;
  ``current_principal`` (a FastAPI dependency) and ``audit_note`` for endpoints.
- :mod:`.authn`: the authenticators of ``none``, ``basic`` and ``cluster``, and the credential cache.
- :mod:`.authz`: ``check_datasource_access``, ``check_owner``, ``may_use_session``, ``require_admin``.
- :mod:`.users`, :mod:`.user_cli`: the users file and ``async-query user``.
- :mod:`.audit`, :mod:`.files`, :mod:`.hosts`, :mod:`.setup`: the audit log, private files,
  loopback names, and the checks ``serve`` makes.
- :mod:`.job_user`: the second wall: the unprivileged user local jobs run as, and what it may reach.

Kept free of imports, so that importing one light module (``hosts``) stays light.
"""
