"""What an input file is, in words, so that a reader refuses it by saying what the file is, what
was expected and the fix, never with a library's message ("Parquet magic bytes not found",
"'utf-8' codec can't decode byte 0xff").

`describe` names a file's kind from its first bytes: empty, Parquet, gzip, zip, binary, UTF-16,
text in another encoding than UTF-8, or UTF-8 text and how it begins; `text_problem` says why bytes
are not UTF-8 text and `utf8_fix` how to make them so (schema.read_text raises it as a
ConfigError); `parquet_problem` says why a file is not Parquet, before pyarrow is asked, and
`parquet_frame` reads one, its text checked as UTF-8 (pyarrow decodes a column's strings only when
they are first used, far from the reader).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"
NUL = b"\x00"
_HEAD = 65536
_BOM_8 = b"\xef\xbb\xbf"
_BOMS_16 = (b"\xff\xfe", b"\xfe\xff")


def utf8_fix(problem: str) -> str:
    """How to make a file that `problem` describes UTF-8 text ("": no re-encoding helps)."""
    if "UTF-16" in problem:
        return "save it as UTF-8 text (e.g. `iconv -f UTF-16 -t UTF-8 FILE > NEW`)"
    if "not UTF-8" in problem:
        return "save it as UTF-8 text (e.g. `iconv -f LATIN1 -t UTF-8 FILE > NEW`)"
    return ""


def _head(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(_HEAD)


def describe_bytes(head: bytes, size: int | None = None) -> str:
    """What a file starting with `head` is, as the rest of a sentence "FILE ..."."""
    size = len(head) if size is None else size
    if size == 0:
        return "is empty (0 bytes)"
    if head.startswith(PARQUET_MAGIC):
        return "is a Parquet file"
    if head.startswith(GZIP_MAGIC):
        return "is gzip-compressed"
    if head.startswith(ZIP_MAGIC):
        return "is a zip archive"
    if head.startswith(_BOMS_16) or _looks_utf16(head):
        return "is UTF-16 text"
    nul = head.find(NUL)
    if nul >= 0:
        return f"is binary (a NUL byte at byte {nul})"
    body = head[len(_BOM_8):] if head.startswith(_BOM_8) else head
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(body) - 3 and size > len(head):
            text = body[:exc.start].decode("utf-8")  # a character cut by the head's end
        else:
            return (f"is not UTF-8 text (byte 0x{body[exc.start]:02x} at offset {exc.start}: "
                    "Latin-1, Windows-1252 or binary?)")
    if not text.strip():
        return "holds only white space"
    first = text.strip().splitlines()[0]
    return f"is text beginning {first[:60]!r}"


def _looks_utf16(head: bytes) -> bool:
    """ASCII text saved as UTF-16 without a byte-order mark: every other byte NUL."""
    pairs = head[:200]
    if len(pairs) < 8:
        return False
    odd, even = pairs[1::2], pairs[0::2]
    return ((odd.count(0) >= 0.9 * len(odd) and even.count(0) == 0)
            or (even.count(0) >= 0.9 * len(even) and odd.count(0) == 0))


def describe(path: str | Path) -> str:
    """What the file at `path` is (module docstring), as the rest of a sentence "FILE ..."."""
    p = Path(path)
    if p.is_dir():
        return "is a directory"
    if not p.is_file():
        return "does not exist"
    return describe_bytes(_head(p), p.stat().st_size)


def text_problem(raw: bytes) -> str | None:
    """Why `raw` is not UTF-8 text (None: it is)."""
    head = raw[:_HEAD]
    if NUL in head or raw.startswith((PARQUET_MAGIC, GZIP_MAGIC, ZIP_MAGIC, *_BOMS_16)):
        return describe_bytes(head, len(raw))
    if NUL in raw:
        return f"is binary (a NUL byte at byte {raw.find(NUL)})"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}: Latin-1, "
                "Windows-1252 or binary?)")
    return None


def parquet_problem(path: str | Path) -> str | None:
    """Why `path` cannot be a Parquet file, by its bytes (None: it starts and ends as one)."""
    p = Path(path)
    size = p.stat().st_size
    head = _head(p)
    if not head.startswith(PARQUET_MAGIC):
        return describe_bytes(head, size) + ", not Parquet"
    with p.open("rb") as fh:
        fh.seek(max(0, size - 4))
        if size < 12 or fh.read(4) != PARQUET_MAGIC:
            return "is a Parquet file cut short (its footer is missing)"
    return None


def parquet_frame(path: str | Path) -> tuple[Any, str | None]:
    """(the Parquet file as a pandas DataFrame, None), or (None, why it is not one)."""
    import pyarrow.parquet as pq

    problem = parquet_problem(path)
    if problem is not None:
        return None, problem
    try:
        table = pq.read_table(path)
        table.validate(full=True)  # every string is UTF-8, every offset in bounds
        return table.to_pandas(), None
    except Exception as exc:  # pyarrow raises several kinds for a damaged file
        return None, f"is a damaged Parquet file ({type(exc).__name__})"
