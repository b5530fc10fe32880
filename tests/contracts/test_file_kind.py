"""What a file is, in words: the sentence a reader's error starts with."""

from __future__ import annotations

import pytest

from workbench.contracts.file_kind import describe_bytes, parquet_problem, text_problem


@pytest.mark.parametrize("data, says", [
    (b"", "is empty (0 bytes)"),
    (b"PAR1....PAR1", "is a Parquet file"),
    (b"\x1f\x8b\x08\x00", "is gzip-compressed"),
    ("step,length\n0,1\n".encode("utf-16"), "is UTF-16 text"),
    ("step,length\n0,1\n".encode("utf-16-le"), "is UTF-16 text"),  # no byte-order mark
    (b"ab\x00cd", "is binary (a NUL byte at byte 2)"),
    ("café".encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 3"),
    (b"\xef\xbb\xbfstep,length\n", "is text beginning 'step,length'"),
    (b" \n\t\n", "holds only white space"),
])
def test_a_file_is_described_by_its_first_bytes(data, says):
    assert describe_bytes(data).startswith(says)


def test_a_character_cut_by_the_head_is_still_text():
    head = "é".encode() * 10
    assert describe_bytes(head[:-1], size=100).startswith("is text beginning")


def test_text_problem_passes_utf8_and_names_a_late_nul():
    assert text_problem("name: café\n".encode()) is None
    assert text_problem(b"x" * 70000 + b"\x00") == "is binary (a NUL byte at byte 70000)"


def test_parquet_problem_says_what_the_file_is_instead(tmp_path):
    f = tmp_path / "t.parquet"
    f.write_bytes(b"step,length\n0,1\n")
    assert parquet_problem(f) == "is text beginning 'step,length', not Parquet"
    f.write_bytes(b"PAR1\x15\x04")
    assert parquet_problem(f) == "is a Parquet file cut short (its footer is missing)"
