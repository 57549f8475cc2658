"""What a caller writes that validation lets through and should not (docs/validation.md).

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
        "CREATE INDEX c ON t (id) WITH (auto_refresh = true, checkpoint_location = '/srv/var/checkpoints/x\\u0000')",
    ],
)
def test_a_location_holding_a_nul_character_is_a_refusal_not_a_crash(query: str) -> None:
    assert refusal(LOCAL, query) is not None


@pytest.mark.parametrize(
    "settings",
    ['{"number_of_shards": 900}', '{"index.number_of_shards": 1000}', '{"number_of_replicas": 900}'],
)
def test_a_flint_index_cannot_take_the_node_s_every_shard(settings: str) -> None:
    """Found by an attack: carol (no admin role) ran ``CREATE INDEX ci1 ON mkt.default.camp (id)
    WITH (index_settings = '{"number_of_shards": 900}')`` and another of 94 shards on the embedded
    node (1,000 shards at most): from then on no index could be made by anyone, a new datasource's
    first query was ``create index .query_execution_request_newds: ... this cluster currently has
    [1000]/[1000] maximum shards open``, and other users' Flint indexes failed the same way."""
    assert refusal(LOCAL, f"CREATE INDEX c ON t (id) WITH (index_settings = '{settings}')") is not None
