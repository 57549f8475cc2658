"""Paths a caller writes that the validation's own path handling cannot take (docs/validation.md).

Found by an attack: ``LOCATION '...\\u0000x'`` (Spark's string escape for a NUL character) made
POST answer 500 with ``ValueError: embedded null byte`` from ``os.path.realpath``; bad input must
be a 400 in the reference's error shape.
"""

from __future__ import annotations

import pytest

from tests.unit.test_validation import LOCAL, refusal


@pytest.mark.parametrize(
    "query",
    [
        "CREATE TABLE t (id INT) USING parquet LOCATION 'file:///srv/var/warehouse/t\\u0000x'",
        "CREATE TABLE t (id INT) USING parquet LOCATION '/srv/var/warehouse/t\\0x'",
        "ALTER TABLE t ADD PARTITION (p=1) LOCATION '/srv/var/warehouse/t/\\u0000'",
    ],
)
def test_a_location_holding_a_nul_character_is_a_refusal_not_a_crash(query: str) -> None:
    assert refusal(LOCAL, query) is not None
