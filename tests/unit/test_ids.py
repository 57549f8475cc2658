"""Query and session ids: they carry their datasource, are URL-safe and unguessable."""

from __future__ import annotations

import base64

import pytest

from query_core.errors import InvalidRequestError, MalformedIdError
from query_core.ids import RANDOM_LEN, datasource_of, default_result_index, new_id, request_index


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize("datasource", ["local", "mys3", "A", "my_glue-1", "x" * 100, "Mixed_Case-DS"])
def test_new_id_round_trips_its_datasource(datasource: str) -> None:
    any_id = new_id(datasource)
    assert datasource_of(any_id) == datasource


def test_ids_are_base64_of_random_alphanumerics_and_the_datasource() -> None:
    """The reference's shape, so either implementation reads the other's ids."""
    for _ in range(200):
        raw = base64.b64decode(new_id("mys3"), validate=True).decode()
        assert raw.endswith("mys3")
        random_part = raw[: -len("mys3")]
        assert len(random_part) >= 10 == RANDOM_LEN
        assert random_part.isascii() and random_part.isalnum()


def test_reference_issued_ids_are_understood() -> None:
    assert datasource_of(_b64("Ab3dE5gH9z" + "mys3")) == "mys3"


def test_ids_never_contain_plus_or_slash() -> None:
    # 2000 draws: without the redraw, about one id in three would hold one of them.
    ids = [new_id("my_datasource") for _ in range(2000)]
    assert not [i for i in ids if "+" in i or "/" in i]


def test_ids_are_distinct_and_random() -> None:
    ids = {new_id("local") for _ in range(5000)}
    assert len(ids) == 5000
    random_parts = {base64.b64decode(i).decode()[:RANDOM_LEN] for i in ids}
    assert len(random_parts) == 5000
    # every position varies (no fixed prefix)
    for pos in range(RANDOM_LEN):
        assert len({p[pos] for p in random_parts}) > 20


MALFORMED = {
    "empty": "",
    "garbage": "not-an-id",
    "garbage_long": "this is not an id at all!!",
    "bad_base64_padding": "QWJjZGVmZ2hpamtsb2NhbA=",
    "base64_too_short_for_shape": _b64("abc"),
    "random_part_only": _b64("abcdefghij"),  # 10 chars: no datasource after the random part
    "too_short_random_part": _b64("abcde"),
    "datasource_with_slash": _b64("abcdefghij" + "bad/name"),
    "datasource_with_space": _b64("abcdefghij" + "bad name"),
    "datasource_with_dot": _b64("abcdefghij" + "bad.name"),
    "datasource_starting_with_digit": _b64("abcdefghij" + "1abc"),
    "datasource_with_unicode": _b64("abcdefghij" + "dätä"),
    "datasource_with_newline": _b64("abcdefghij" + "local\n"),
    "datasource_too_long": _b64("abcdefghij" + "a" * 200),
    "not_utf8": _b64(b"\xff\xfe" * 12),
    "url_safe_alphabet": _b64("abcdefghij" + "local").replace("a", "-") + "-_",
    "huge": "QUFB" * 10_000,
    "huge_valid_looking": _b64("abcdefghij" + "a" * 10_000),
    "path_traversal": "../../etc/passwd",
    "json": '{"queryId": 1}',
}


@pytest.mark.parametrize("bad", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_ids_raise(bad: str) -> None:
    with pytest.raises(MalformedIdError) as err:
        datasource_of(bad)
    assert isinstance(err.value, InvalidRequestError)
    assert err.value.http_status == 400
    assert len(err.value.message) < 200  # a huge id is not echoed whole


def test_index_names() -> None:
    assert request_index("MyS3") == ".query_execution_request_mys3"
    assert default_result_index("MyS3") == "query_execution_result_mys3"


def test_datasource_names_with_a_trailing_newline_are_refused() -> None:
    """``$`` in a regex matches before a final newline; names and ids must not pass with one."""
    from async_query.datasources import Datasource

    with pytest.raises(ValueError):
        Datasource(name="local\n")
    with pytest.raises(MalformedIdError):
        datasource_of(new_id("local") + "\n")
