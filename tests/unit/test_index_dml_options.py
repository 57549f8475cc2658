"""The options an ALTER to manual refresh leaves in an index's ``_meta``, and the reference's
refusals (the SQL plugin's ``FlintIndexMetadataServiceImpl``, opensearch-spark's
``validateUpdateAllowed``)."""

from __future__ import annotations

from typing import Any

import pytest

from async_query.handlers.index_dml_ops import manual_refresh_options
from query_core.errors import InvalidRequestError


def meta(kind: str = "skipping", **options: str) -> dict[str, Any]:
    return {"kind": kind, "options": {"auto_refresh": "true", "incremental_refresh": "false", **options}}


def test_the_alter_options_are_merged_and_auto_refresh_turned_off() -> None:
    merged = manual_refresh_options(meta(refresh_interval="1 minute"), {"auto_refresh": "false"})
    assert merged == {"auto_refresh": "false", "incremental_refresh": "false", "refresh_interval": "1 minute"}


def test_incremental_refresh_keeps_what_it_needs() -> None:
    provided = {"auto_refresh": "false", "incremental_refresh": "true", "watermark_delay": "1 minute"}
    merged = manual_refresh_options(meta("mv", checkpoint_location="s3://cp"), provided)
    assert merged == {
        "auto_refresh": "false",
        "incremental_refresh": "true",
        "checkpoint_location": "s3://cp",
        "watermark_delay": "1 minute",
    }


@pytest.mark.parametrize(
    ("existing", "provided", "message"),
    [
        ({"kind": "skipping", "options": {"auto_refresh": "false"}}, {}, "auto_refresh option must be updated"),
        ({"kind": "skipping"}, {}, "auto_refresh option must be updated"),
        (
            meta(),
            {"auto_refresh": "false", "checkpoint_location": "s3://cp"},
            "Altering to full refresh only allows: [auto_refresh, incremental_refresh] options",
        ),
        (
            meta(),
            {"auto_refresh": "false", "incremental_refresh": "true", "refresh_interval": "1 minute"},
            "Altering to incremental refresh only allows: "
            "[auto_refresh, incremental_refresh, watermark_delay, checkpoint_location] options",
        ),
        (
            meta("mv"),
            {"auto_refresh": "false", "incremental_refresh": "true"},
            "Conversion to incremental refresh index cannot proceed due to missing attributes: "
            "checkpoint_location, watermark_delay.",
        ),
        (
            meta("covering", incremental_refresh="true"),
            {"auto_refresh": "false"},
            "Conversion to incremental refresh index cannot proceed due to missing attributes: checkpoint_location.",
        ),
    ],
    ids=["not auto", "no options at all", "full: option refused", "incremental: option refused", "mv", "covering"],
)
def test_refusals_use_the_reference_messages(existing: dict[str, Any], provided: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        manual_refresh_options(existing, provided)
    assert refused.value.message == message
