"""The command-line client of the async query REST API: ``async-query submit/get/cancel/sessions``.

It speaks only HTTP (the public wire contract), so it works against any deployment of the service;
it imports no module of the service itself (``async_query``), which a test checks.
"""
