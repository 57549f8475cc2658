"""The order and units of work of a parallel run (``tests/conftest.py``, "the order of a parallel run")."""

from __future__ import annotations

import pytest

from tests.conftest import LONGEST_FIRST, SPARK_SESSION_FILES, SPARK_SESSION_SCOPE, TESTS_DIR, run_scope


def test_every_file_named_for_the_run_exists() -> None:
    named = [*SPARK_SESSION_FILES, *(name for name in LONGEST_FIRST if name != SPARK_SESSION_SCOPE)]
    assert [name for name in named if not (TESTS_DIR / name).is_file()] == []


def test_every_collected_test_of_the_spark_session_runs_in_its_unit(request: pytest.FixtureRequest) -> None:
    """A file with tests marked ``spark`` (they run PySpark in the test process) that is not listed
    would start a Spark session in each process that runs it; checked over the tests this run
    collected."""
    unlisted = {
        item.nodeid.split("::", 1)[0]
        for item in request.session.items
        if item.get_closest_marker("spark") is not None and run_scope(item.nodeid, "") != SPARK_SESSION_SCOPE
    }
    assert unlisted == set()


def test_the_session_s_files_make_one_unit_and_other_files_their_own() -> None:
    scopes = {run_scope(f"tests/{name}::test_x[1]", f"tests/{name}") for name in SPARK_SESSION_FILES}
    assert scopes == {SPARK_SESSION_SCOPE}
    assert run_scope("tests/integration/test_cli.py::test_x", "tests/integration/test_cli.py") == (
        "tests/integration/test_cli.py"
    )
