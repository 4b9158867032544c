"""Broken data files a careful tester would try: each ends in one line naming the file and the line, row or
column, never a traceback and never a record's content (``swagppm.data.files``, through ``load_records``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from swagppm import DataConfig, DataError, load_records

SECRET = "Zq7-SECRET-name-of-a-patient"
ROWS = [{"text": f"{SECRET} fell from ladder {i}", "label": f"k{i % 2}"} for i in range(6)]


def _refusal(path: Path, **options: object) -> str:
    """The one-line message of the ``DataError`` reading ``path`` raises; it names the file and quotes no record."""
    with pytest.raises(DataError) as info:
        load_records(DataConfig(source=str(path), **options))  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert "SECRET" not in message
    return message.removeprefix(f"{path}: ")


def _lines(rows: list[object]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


@pytest.mark.parametrize("name", ["records.csv", "records.jsonl", "records.json", "records.parquet"])
def test_an_empty_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"" if name.endswith("parquet") else b"\n \n")
    assert _refusal(path) == "the file is empty (no records)"


@pytest.mark.parametrize("name, content", [("records.csv", "text,label\n\n"), ("records.json", "[]"),
                                           ("records.jsonl", "\n\n")], ids=["csv header", "json", "jsonl blank"])
def test_a_file_without_records(tmp_path: Path, name: str, content: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    assert "no records" in _refusal(path)


def test_a_parquet_file_without_rows(tmp_path: Path) -> None:
    path = tmp_path / "records.parquet"
    pd.DataFrame({"text": pd.Series([], dtype=str), "label": pd.Series([], dtype=str)}).to_parquet(path)
    assert _refusal(path) == "no records"


@pytest.mark.parametrize("name", ["records.csv", "records.jsonl"])
def test_a_binary_file_under_a_data_name(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"PK\x03\x04\x14\x00\x00\x00" + SECRET.encode() + bytes(range(256)))  # a zip archive's start
    kind = path.suffix[1:].upper()
    assert _refusal(path) == f"a NUL byte at byte 5 (line 1): a binary file (or UTF-16 text), not {kind} text"


def test_nul_bytes_inside_a_csv_record(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_bytes(b"text,label\nfell,k0\n\x00\x00,k1\n")
    assert _refusal(path).startswith("a NUL byte at byte 19 (line 3)")


def test_utf16_text(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text("text,label\nfell,k0\ncut,k1\n", encoding="utf-16")
    assert _refusal(path) == "UTF-16 text, not UTF-8; re-save the file as UTF-8"


@pytest.mark.parametrize("line, kind", [("[1, 2]", "an array"), (f'"{SECRET}"', "a string"), ("42", "a number"),
                                        ("null", "null")])
def test_a_json_lines_line_that_is_not_an_object(tmp_path: Path, line: str, kind: str) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(_lines(ROWS[:2]) + "\n" + line + "\n" + _lines(ROWS[2:]))
    assert _refusal(path).startswith(f"line 4 (row 3) is {kind}, not a JSON object")


def test_one_json_array_in_a_json_lines_file_says_to_name_it_json(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(ROWS))
    assert _refusal(path).endswith("(a file holding one JSON array is named .json)")
    renamed = path.rename(tmp_path / "records.json")
    assert len(load_records(DataConfig(source=str(renamed)))[0]) == 6


@pytest.mark.parametrize("document, problem", [([ROWS[0], [1]], "row 2 of the JSON array is an array"),
                                               (42, "the file holds a number")])
def test_a_json_document_that_is_not_records(tmp_path: Path, document: object, problem: str) -> None:
    path = tmp_path / "records.json"
    path.write_text(json.dumps(document))
    assert _refusal(path).startswith(problem)


def test_a_key_twice_in_one_record(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(_lines(ROWS[:2]) + f'{{"text": "a", "label": "k0", "text": "{SECRET}"}}\n')
    assert _refusal(path) == "line 3 (row 3): the key 'text' appears twice in one record"


def test_json_lines_in_a_json_file_are_read(tmp_path: Path) -> None:
    path = tmp_path / "records.json"
    path.write_text(_lines(ROWS))
    assert load_records(DataConfig(source=str(path)))[1] == [row["label"] for row in ROWS]


@pytest.mark.parametrize("name", ["records.csv", "records.jsonl"])
def test_a_byte_order_mark_is_read_past(tmp_path: Path, name: str) -> None:
    plain, marked = tmp_path / name, tmp_path / f"marked-{name}"
    if name.endswith(".csv"):
        pd.DataFrame(ROWS).to_csv(plain, index=False)
    else:
        plain.write_text(_lines(ROWS))
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert load_records(DataConfig(source=str(marked))) == load_records(DataConfig(source=str(plain)))


def test_a_used_column_named_twice_in_the_header(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text("text,label,text\na,k0,b\nc,k1,d\n")
    assert _refusal(path) == ("column 'text' appears more than once in the header (columns 1, 3); give each column "
                              "its own name")
    unused = tmp_path / "unused.csv"
    unused.write_text("note,text,label,note\nx,a,k0,y\nz,c,k1,w\n")
    assert load_records(DataConfig(source=str(unused))) == (["a", "c"], ["k0", "k1"])


def test_a_semicolon_separated_file_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text("text;label\na;k0\nc;k1\n")
    assert "(one column only: CSV files here must be comma-separated)" in _refusal(path)


# --- A quote left open ---------------------------------------------------------------------------


def test_a_quote_left_open_that_merges_two_records(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text(f'text,label\nburned a hand,k0\n"{SECRET} fell,k0\ncut a finger",k1\nslipped,k1\n')
    assert _refusal(path) == ("column 'text', row 2 (line 3): a quoted field runs over 2 lines that read as records "
                              "of their own: a quote left open? Close it (a quote inside a quoted field is written "
                              "twice)")


def test_a_quote_left_open_in_a_middle_column(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text(f'id,text,label\n1,burned,k0\n2,"{SECRET} fell,k0\n3,cut",k1\n4,slipped,k1\n')
    assert _refusal(path).startswith("column 'text', row 2 (line 3): a quoted field runs over 2 lines")


def test_texts_over_several_lines_with_commas_are_read(tmp_path: Path) -> None:
    rows = [{"text": "He fell, and broke\nhis arm,\nk1 was not involved", "label": "k0"},
            {"text": "cut,\nthen treated", "label": "k1"}, {"text": "burned", "label": "k0"}]
    path = tmp_path / "records.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert load_records(DataConfig(source=str(path)))[0] == [row["text"] for row in rows]


def test_a_stray_quote_in_the_last_record_is_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text('text,label\nfell,k0\n"cut" twice,k1\n')
    assert load_records(DataConfig(source=str(path))) == (["fell", "cut twice"], ["k0", "k1"])


def test_a_label_over_several_lines(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text('text,label\nfell,"k0\nk1"\ncut,k2\n')
    assert _refusal(path) == "column 'label', row 1: a label that runs over lines (a quote left open?)"


# --- Labels ------------------------------------------------------------------------------------


def test_nan_written_as_a_label_is_a_missing_label(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text("text,label\nfell,k0\ncut,NaN\nburned,k1\n")
    assert _refusal(path) == "column 'label', row 2: missing label (written as NaN)"


@pytest.mark.parametrize("value, problem", [("NaN", "missing label"), ("Infinity", "an infinite number, not a label")])
def test_non_finite_numbers_as_labels(tmp_path: Path, value: str, problem: str) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(f'{{"text": "fell", "label": 1}}\n{{"text": "cut", "label": {value}}}\n')
    assert _refusal(path) == f"column 'label', row 2: {problem}"


def test_nan_labels_in_parquet(tmp_path: Path) -> None:
    path = tmp_path / "records.parquet"
    pd.DataFrame({"text": ["fell", "cut", "burned"], "label": [1.0, float("nan"), 2.0]}).to_parquet(path)
    assert _refusal(path) == "column 'label', row 2: missing label"


@pytest.mark.parametrize("name", ["records.csv", "records.jsonl"])
def test_a_label_missing_in_some_rows(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("text,label\nfell,k0\ncut\nburned,k1\n" if name.endswith(".csv") else
                    '{"text": "fell", "label": "k0"}\n{"text": "cut"}\n{"text": "burned", "label": "k1"}\n')
    assert _refusal(path) == "column 'label', row 2: missing label"


def test_text_that_reads_as_json_beside_number_labels(tmp_path: Path) -> None:
    """``datasets`` would read the text "null" beside numbers as a missing label: refused before."""
    path = tmp_path / "records.jsonl"
    path.write_text(_lines([{"text": "fell", "label": 1}, {"text": "cut", "label": "cat"},
                            {"text": "burned", "label": "null"}]))
    assert _refusal(path) == ("column 'label' mixes numbers (row 1) and text that reads as JSON (row 3): write every "
                              "label one way, all as numbers or all as text")


# --- Long texts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["records.csv", "records.jsonl"])
def test_very_long_texts_are_read_whole(tmp_path: Path, name: str) -> None:
    rows = [{"text": "word " * 100_000, "label": "k0"}, *ROWS,  # 500 kB: past the csv module's 128 kB field limit
            {"text": "last " * 100_000, "label": "k1"}]
    path = tmp_path / name
    if name.endswith(".csv"):
        pd.DataFrame(rows).to_csv(path, index=False)
    else:
        path.write_text(_lines(rows))
    limit = csv.field_size_limit()
    assert load_records(DataConfig(source=str(path)))[0] == [row["text"] for row in rows]
    assert csv.field_size_limit() == limit
