"""Render docs/settings.md from the settings object's source: every field, its environment
variables, its default and the ``#:`` comment above it.

``python -m tests.settings_doc`` rewrites the page; ``tests/unit/test_docs.py`` fails while the page
differs from what this renders, so the page cannot drift from the code.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic.fields import FieldInfo

from async_query.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "async_query" / "settings.py"
PAGE = ROOT / "docs" / "settings.md"

HEADER = """# Settings

One settings object (`async_query/settings.py`) holds every setting of the service. Each is read
from an environment variable, `ASYNC_QUERY_` followed by the field's name in capitals (the index
connection's also without the prefix, as `OPENSEARCH_URL`); `async-query serve`'s options set a
few of them too. Lists are comma separated. Datasources override some per datasource in their
`properties` ([datasources.md](datasources.md)).

This page is rendered from the settings' source by `python -m tests.settings_doc`, and a test
holds it to the code.
"""


@dataclass
class Row:
    section: str
    names: list[str]
    comment: str


def _rows() -> list[Row]:
    """Fields in source order with their section and comment; a field with no comment of its
    own, right under another, shares that one's row."""
    lines = SOURCE.read_text().splitlines()
    tree = ast.parse(SOURCE.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    rows: list[Row] = []
    section = ""
    prev_end = 0
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        comment: list[str] = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#:"):
            comment.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        for j in range(prev_end, node.lineno - 1):
            text = lines[j].strip()
            if text.startswith("# --"):
                section = text.strip("# -").strip()
        name = node.target.id
        if not comment and rows and prev_end == node.lineno - 1 and rows[-1].section == section:
            rows[-1].names.append(name)
        else:
            rows.append(Row(section, [name], " ".join(comment)))
        prev_end = node.end_lineno or node.lineno
    return rows


def _env_names(name: str, field: FieldInfo) -> str:
    alias = field.validation_alias
    choices = getattr(alias, "choices", None)
    if choices:
        return " / ".join(f"`{c}`" for c in choices)
    return f"`ASYNC_QUERY_{name.upper()}`"


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if value is None or value == "" or value == []:
        return "(unset)"
    if isinstance(value, list):
        return "`" + ",".join(str(v) for v in value) + "`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("``", "`")


def render() -> str:
    """The page's text."""
    fields = Settings.model_fields
    out = [HEADER]
    section = None
    for row in _rows():
        if row.section != section:
            section = row.section
            out.append(f"\n## {section[:1].upper() + section[1:]}\n")
            out.append("| variable | default | meaning |")
            out.append("|---|---|---|")
        envs = "<br>".join(_env_names(n, fields[n]) for n in row.names)
        defaults = ", ".join(_default(fields[n]) for n in row.names)
        out.append(f"| {envs} | {defaults} | {_cell(row.comment)} |")
    return "\n".join(out) + "\n"


def main() -> int:
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
