"""Local data files checked before ``datasets`` reads them.

``datasets`` reads CSV, JSON Lines/JSON and Parquet files, but some broken files it
reads wrongly without a word (a quote left open merges records; a CSV row with an
extra field loses it when only some columns are read) and others it refuses with a
message that can quote the records. ``check_file`` reads a file once and refuses
those in one ``DataError`` naming the file and the line or row, never a record's
content: an empty file; bytes that are not UTF-8 text (a binary file, UTF-16, a mix
of encodings); a JSON line or document that does not hold JSON objects; a CSV header
that names a used column twice, a row with more fields than the header, a quote
never closed, or a quoted field that runs over lines reading as records of their own.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from swagppm.errors import DataError


@dataclass(frozen=True, kw_only=True)
class Columns:
    """The columns a source's settings name: read as given, checked where the file allows it before reading."""

    text: str
    label: str
    title: str | None = None

    @property
    def used(self) -> list[str]:
        return [self.text, self.label, *([self.title] if self.title else [])]


def check_file(path: Path, kind: str, columns: Columns, *, origin: str) -> list[str] | None:
    """Refuse what ``datasets`` would misread or report with the records in its message; a CSV file's header.

    ``kind`` is ``csv``, ``json`` or ``parquet``; ``origin`` names the file in messages.
    """
    if kind == "parquet":
        _check_parquet(path, origin)
        return None
    text = _text_of(path.read_bytes(), origin, path.suffix[1:].upper())
    if kind == "json":
        _check_json(text, origin, columns, lines=path.suffix.lower() == ".jsonl")
        return None
    return _check_csv(text, origin, columns)


def missing_column(origin: str, column: str, present: Sequence[object]) -> DataError:
    """The one error for a text or label column the data does not have, listing the columns it has."""
    hint = ""
    if len(present) == 1 and any(mark in str(present[0]) for mark in ";\t|"):
        hint = " (one column only: CSV files here must be comma-separated)"
    return DataError(f"{origin}: column {column!r} not found; columns present: {', '.join(map(str, present))}"
                     f"{hint}. Set data.text_column / data.label_column.")


# --- Bytes to text ----------------------------------------------------------------------------


def _text_of(data: bytes, origin: str, kind: str) -> str:
    """The text of a ``kind`` (CSV, JSONL, JSON) file: UTF-8, a leading byte-order mark dropped; a file that is
    empty or not text is refused."""
    if not data.strip():
        raise DataError(f"{origin}: the file is empty (no records)")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise DataError(f"{origin}: UTF-16 text, not UTF-8; re-save the file as UTF-8")
    if (nul := data.find(b"\x00")) >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise DataError(f"{origin}: a NUL byte at byte {nul} (line {line}): a binary file (or UTF-16 text), "
                        f"not {kind} text")
    body = data.removeprefix(codecs.BOM_UTF8)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        line = body.count(b"\n", 0, error.start) + 1
        raise DataError(f"{origin}: not valid UTF-8 at byte {error.start + len(data) - len(body)} (line {line}); "
                        "re-save the file as UTF-8") from None


def _check_parquet(path: Path, origin: str) -> None:
    import pyarrow.parquet as pq

    if path.stat().st_size == 0:
        raise DataError(f"{origin}: the file is empty (no records)")
    try:
        rows = pq.read_metadata(path).num_rows
    except PermissionError:
        raise
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types; all mean "not Parquet"
        raise DataError(f"{origin}: cannot be read as parquet: {type(error).__name__}") from None
    if rows == 0:
        raise DataError(f"{origin}: no records")


# --- JSON -------------------------------------------------------------------------------------


def _check_json(text: str, origin: str, columns: Columns, *, lines: bool) -> None:
    """JSON Lines (one object a line; also in a .json file) or, in a .json file, one array of objects."""
    if not lines:
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            if error.msg != "Extra data":  # more than one value: JSON Lines in a .json file
                raise DataError(f"{origin}: cannot be read as json: ValueError at line {error.lineno}") from None
        else:
            _check_labels(_array_records(document, origin), columns.label, origin)
            return
    _check_labels(_line_records(text, origin), columns.label, origin)


def _line_records(text: str, origin: str) -> Iterator[dict[str, object]]:
    rows = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        rows += 1
        try:
            value = json.loads(line)
        except ValueError:
            raise DataError(f"{origin}: cannot be read as json: ValueError at line {number}") from None
        if not isinstance(value, dict):
            hint = " (a file holding one JSON array is named .json)" if isinstance(value, list) and rows == 1 else ""
            raise DataError(f"{origin}: line {number} (row {rows}) is {_json_kind(value)}, not a JSON object: "
                            f"JSON Lines hold one record a line, as an object{hint}")
        yield value


def _array_records(document: object, origin: str) -> list[dict[str, object]]:
    """One JSON document's records: an array of objects, or one object (JSON Lines of one record)."""
    if isinstance(document, dict):
        return [document]
    if not isinstance(document, list):
        raise DataError(f"{origin}: the file holds {_json_kind(document)}; a .json data file holds an array of "
                        "records (objects), or one object a line")
    for row, item in enumerate(document, start=1):
        if not isinstance(item, dict):
            raise DataError(f"{origin}: row {row} of the JSON array is {_json_kind(item)}, not a JSON object")
    return document


def explain_json_failure(path: Path, origin: str) -> None:
    """After ``datasets`` failed to read a JSON file that ``check_file`` passed: refuse a key that repeats within
    one record of JSON Lines (the only such case known), naming its line; return when there is none."""
    rows = 0
    for number, line in enumerate(_text_of(path.read_bytes(), origin, "JSON").split("\n"), start=1):
        if line.strip():
            rows += 1
            try:
                pairs = json.loads(line, object_pairs_hook=list)
            except ValueError:
                return  # one JSON document over several lines, not JSON Lines
            keys = [key for key, _ in pairs]
            if repeated := next((key for k, key in enumerate(keys) if key in keys[:k]), None):
                raise DataError(f"{origin}: line {number} (row {rows}): the key {repeated!r} appears twice in one "
                                "record")


def _check_labels(records: Iterable[dict[str, object]], column: str, origin: str) -> None:
    """Refuse no records, and a label column with numbers beside text that reads as JSON (``"1"``, ``"null"``).

    ``datasets`` keeps a column of mixed JSON types (``Json``) by writing each value as
    JSON text, but leaves a string that already reads as JSON unquoted: ``"1"`` would
    come back as the number 1 and ``"null"`` as a missing label. Numbers beside numbers
    written as text are refused anyway (which of them are one class cannot be told).
    """
    number_at = text_at = None
    what, rows = "", 0
    for rows, record in enumerate(records, start=1):
        value = record.get(column)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number_at = number_at or rows
        elif text_at is None and isinstance(value, str) and _reads_as_json(value):
            text_at, what = rows, "numbers written as text" if reads_as_number(value) else "text that reads as JSON"
        if number_at and text_at:
            raise DataError(f"{origin}: column {column!r} mixes numbers (row {number_at}) and {what} (row {text_at}): "
                            "write every label one way, all as numbers or all as text")
    if not rows:
        raise DataError(f"{origin}: no records")


def _reads_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def reads_as_number(text: str) -> bool:
    """Whether a text reads as a number ("1", "2.0", "1e3", "nan")."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _json_kind(value: object) -> str:
    """A JSON value's kind in words: messages must not quote the records."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "true/false", type(None): "null"}
    return kinds.get(type(value), "a number")


# --- CSV --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Record:
    line: int  # where the record starts
    fields: list[str]


def _check_csv(text: str, origin: str, columns: Columns) -> list[str]:
    """The header, after the checks of the records' shape against it."""
    with _no_field_limit():
        return _checked_header(io.StringIO(text, newline="").readlines(), origin, columns)


def _checked_header(lines: list[str], origin: str, columns: Columns) -> list[str]:
    records = _records(lines, origin)
    if not records:
        raise DataError(f"{origin}: the file is empty (no records)")
    header, body = records[0].fields, records[1:]
    for column in columns.used:
        if header.count(column) > 1:
            where = ", ".join(str(i) for i, name in enumerate(header, start=1) if name == column)
            raise DataError(f"{origin}: column {column!r} appears more than once in the header (columns {where}); "
                            "give each column its own name")
    if not body:
        raise DataError(f"{origin}: no records (a header and nothing else)")
    _check_closed(lines, body[-1].line, origin)
    for row, record in enumerate(body, start=1):
        if len(record.fields) > len(header):
            raise DataError(f"{origin}: cannot be read as csv: ParserError at line {record.line} (row {row} has "
                            f"{len(record.fields)} fields, the header {len(header)})")
    if columns.label in header:
        _check_not_merged(body, header, header.index(columns.label), origin)
    return header


def _records(lines: list[str], origin: str) -> list[_Record]:
    """The file's records (blank lines skipped, as ``datasets``' CSV reader does), each with its first line."""
    reader = csv.reader(lines)
    records: list[_Record] = []
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return records
        except csv.Error:
            raise DataError(f"{origin}: cannot be read as csv: Error at line {start}") from None
        if fields:
            records.append(_Record(start, fields))


@contextmanager
def _no_field_limit() -> Iterator[None]:
    """Long texts are records too: the ``csv`` module's field limit (128 KiB) lifted while reading, then restored."""
    before = csv.field_size_limit(sys.maxsize)
    try:
        yield
    finally:
        csv.field_size_limit(before)


def _check_closed(lines: list[str], start: int, origin: str) -> None:
    """Refuse a last record whose quote is never closed: it would run to the end of the file."""
    try:
        for _ in csv.reader(lines[start - 1:], strict=True):
            pass
    except csv.Error as error:
        if "unexpected end of data" not in str(error):  # a stray quote that the CSV reader takes as text
            return
        raise DataError(f"{origin}: cannot be read as csv: ParserError at line {start} (a quote opened in this "
                        "record is never closed)") from None


def _check_not_merged(body: list[_Record], header: list[str], label_at: int, origin: str) -> None:
    """Refuse a quoted field that runs over lines which read as records of their own (a quote left open).

    A line inside such a field that splits into the fields still due (from the field's column to the
    end) or into a whole record, with a label cell that is a label of this file, was most likely meant
    as a record: a quote opened and not closed merged it into the record before.
    """
    labels = {fields[label_at].strip() for fields in (r.fields for r in body) if len(fields) > label_at}
    labels.discard("")
    for row, record in enumerate(body, start=1):
        for column, value in enumerate(record.fields):
            if "\n" in value or "\r" in value:
                parts = value.splitlines()[:-1]
                if any(_reads_as_record(part, column, len(header), label_at, labels) for part in parts):
                    raise DataError(
                        f"{origin}: column {header[column]!r}, row {row} (line {record.line}): a quoted field runs "
                        f"over {len(value.splitlines())} lines that read as records of their own: a quote left "
                        "open? Close it (a quote inside a quoted field is written twice)")


def _reads_as_record(part: str, column: int, width: int, label_at: int, labels: set[str]) -> bool:
    fields = next(csv.reader([part]), [])
    if len(fields) == width - column and label_at >= column:
        return fields[label_at - column].strip() in labels
    return len(fields) == width and fields[label_at].strip() in labels

