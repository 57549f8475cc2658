"""The error a refused statement raises, in the reference's words."""

from __future__ import annotations

from query_core.errors import InvalidRequestError
from query_core.validation.elements import GrammarElement


class QueryRefusedError(InvalidRequestError):
    """A statement holds an element its datasource denies: a 400 at POST, a failed statement in
    a job. The message is the reference's: ``<element> is not allowed.`` or, naming what was
    found, ``<element> (<detail>) is not allowed.``"""

    error_type = "IllegalArgumentException"

    def __init__(self, element: GrammarElement, detail: str = "") -> None:
        shown = f"{element.description} ({detail})" if detail else element.description
        super().__init__(f"{shown} is not allowed.")
        self.element = element
        self.detail = detail
