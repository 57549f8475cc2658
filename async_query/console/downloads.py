"""A whole stored result as CSV or JSON, read page by page through GET's paging (the service's
``get_page`` use case, with its authorization), so that memory holds one page at a time whatever
the result's size (``docs/console.md``).

JSON passes each page's rows through as the service holds them (their text is never re-read);
CSV writes a header of column names, then one line per row: ``null`` as an empty field, booleans
as ``true``/``false``, numbers as their stored text, nested values (arrays, structs, maps) as
their JSON text.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from query_core.errors import InvalidRequestError

_DECODER = json.JSONDecoder(parse_float=Decimal)
_RAW = json.JSONDecoder()
#: Reads one page of a query's result: (offset, size) -> the paged GET's reply.
PageReader = Callable[[int, int], bytes]


@dataclass
class FirstPage:
    """The first page of a result, read before the reply starts (so that a refusal or a query
    that has not succeeded is an error reply, not a broken download)."""

    schema: list[dict[str, Any]]
    rows_text: str
    size: int
    result_rows: int


def members(text: str) -> dict[str, str]:
    """The raw JSON text of each member of the object ``text``, by name (values are not re-read)."""
    found: dict[str, str] = {}
    pos = _skip(text, 0)
    if text[pos : pos + 1] != "{":
        raise ValueError("not a JSON object")
    pos = _skip(text, pos + 1)
    while text[pos : pos + 1] not in ("}", ""):
        name, pos = _RAW.raw_decode(text, pos)
        pos = _skip(text, pos)
        if text[pos : pos + 1] != ":":
            raise ValueError("malformed JSON object")
        start = _skip(text, pos + 1)
        _, end = _RAW.raw_decode(text, start)
        found[str(name)] = text[start:end]
        pos = _skip(text, end)
        if text[pos : pos + 1] == ",":
            pos = _skip(text, pos + 1)
    return found


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def first_page(read: PageReader, page_rows: int) -> FirstPage:
    reply = members(read(0, page_rows).decode("utf-8"))
    status = json.loads(reply.get("status", '""'))
    if status != "SUCCESS":
        raise InvalidRequestError(f"only a successful query's result can be downloaded; this one is {status}")
    size = int(json.loads(reply.get("size", "0")))
    return FirstPage(json.loads(reply["schema"]), reply["datarows"], size, int(json.loads(reply.get("resultRows", str(size)))))


def row_texts(read: PageReader, first: FirstPage, page_rows: int) -> Iterator[str]:
    """Each page's rows as JSON text (an array), the first one's included."""
    yield first.rows_text
    offset = first.size
    while first.size and offset < first.result_rows:
        reply = members(read(offset, page_rows).decode("utf-8"))
        size = int(json.loads(reply.get("size", "0")))
        if size == 0:
            return
        yield reply["datarows"]
        offset += size


def as_json(read: PageReader, first: FirstPage, page_rows: int) -> Iterator[bytes]:
    yield b'{"schema":' + json.dumps(first.schema, ensure_ascii=False).encode() + b',"datarows":['
    written = False
    for rows in row_texts(read, first, page_rows):
        inner = rows.strip()[1:-1].strip()
        if inner:
            yield (b"," if written else b"") + inner.encode("utf-8")
            written = True
    yield b"]}"


def as_csv(read: PageReader, first: FirstPage, page_rows: int) -> Iterator[bytes]:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([column.get("name", "") for column in first.schema])
    yield out.getvalue().encode("utf-8")
    for rows in row_texts(read, first, page_rows):
        out.seek(0)
        out.truncate()
        writer.writerows([csv_cell(value) for value in row] for row in _DECODER.decode(rows))
        yield out.getvalue().encode("utf-8")


def csv_cell(value: Any) -> str:
    """How CSV writes one value (see the module's documentation)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(value)
