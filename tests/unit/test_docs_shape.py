"""The documentation holds to its shape: README is a front page, docs/README.md indexes every
page, every setting is documented as the code has it, and relative links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import settings_doc

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README_MAX_LINES = 300
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name != "README.md")


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_readme_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "pip install -e . && .venv/bin/async-query serve" in text
    assert "pip install -q -e '.[test]' && .venv/bin/ruff check . && .venv/bin/mypy && .venv/bin/python -m pytest -q -n 3 --dist loadfile" in text


def test_docs_index_links_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    linked = set(LINK.findall(index))
    missing = [p.name for p in _pages() if p.name not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


def test_settings_page_is_rendered_from_the_code() -> None:
    assert (DOCS / "settings.md").read_text() == settings_doc.render(), (
        "docs/settings.md differs from the settings' source: run `python -m tests.settings_doc`"
    )


def test_every_setting_is_on_the_settings_page() -> None:
    page = (DOCS / "settings.md").read_text()
    missing = [n for n in settings_doc.Settings.model_fields if f"ASYNC_QUERY_{n.upper()}`" not in page]
    assert not missing


@pytest.mark.parametrize(
    "page",
    [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "bench" / "README.md", *sorted(DOCS.glob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_lead_to_files(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name} links to missing files: {broken}"
