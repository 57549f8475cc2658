"""What acceleration did for one query: the indexes it used, and why others were not used. EXPLAIN
shows it, the job's log and figures count it (``docs/acceleration.md``)."""

from __future__ import annotations

from dataclasses import dataclass

SKIPPING = "skipping"
COVERING = "covering"
#: The section EXPLAIN adds before Spark's own plan.
EXPLAIN_HEADER = "== Flint Acceleration =="


@dataclass(frozen=True)
class IndexUse:
    """One index a query used: a skipping index kept ``kept`` of the ``listed`` files of the scan
    of ``table``; a covering index was read instead of ``table``."""

    index_name: str
    kind: str
    table: str
    kept: int = 0
    listed: int = 0
    why: str = ""

    @property
    def skipped(self) -> int:
        return self.listed - self.kept if self.kind == SKIPPING else 0

    def describe(self) -> str:
        if self.kind == SKIPPING:
            text = f"{self.index_name}: skipping index, kept {self.kept} of {self.listed} files of {self.table}"
            return text + (f" ({self.why})" if self.why else "")
        return f"{self.index_name}: covering index read instead of {self.table}"


@dataclass(frozen=True)
class Acceleration:
    """The indexes a query used, notes on those it did not, and what looking them up cost."""

    used: tuple[IndexUse, ...] = ()
    notes: tuple[str, ...] = ()
    #: Time spent reading the indexes and choosing files (index calls included), and in all of
    #: acceleration (plans read and rebuilt too), in milliseconds.
    lookup_ms: float = 0.0
    total_ms: float = 0.0

    @property
    def accelerated(self) -> bool:
        return any(use.kind == COVERING or use.skipped > 0 for use in self.used)

    def summary(self) -> str:
        """One line: what was used (empty when nothing was)."""
        return "; ".join(use.describe() for use in self.used)

    def explain(self) -> str:
        lines = [EXPLAIN_HEADER]
        lines += [use.describe() for use in self.used] or ["no Flint index used"]
        lines += self.notes
        return "\n".join(lines) + "\n"


__all__ = ["COVERING", "EXPLAIN_HEADER", "SKIPPING", "Acceleration", "IndexUse"]
