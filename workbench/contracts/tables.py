"""A user's table file (CSV, JSONL or Parquet) read by its suffix, refused in the program's words:
the file, what it is (file_kind.describe), what was expected and the fix; a library's message is
kept only as the detail of a damaged file.

`read_table` returns a DataFrame for CSV and Parquet and the rows (a list of dicts) for JSONL, so
a reader keeps each row's line number.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from workbench.contracts.file_kind import describe, parquet_frame
from workbench.contracts.schema import ConfigError, decode_text, kind_of

TABLE_SUFFIXES = (".csv", ".jsonl", ".parquet")


def _detail(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]


def _rename_fix(problem: str) -> str:
    """A file whose content is another table kind than its suffix says: rename it."""
    if problem.startswith("is a Parquet file"):
        return "; rename it to .parquet if it is a Parquet table"
    if problem.startswith("is text beginning '{"):
        return "; rename it to .jsonl if it is one JSON object per line"
    if problem.startswith("is text"):
        return "; rename it to .csv if it is a comma-separated table"
    return ""


def read_parquet(path: str | Path, expected: str) -> pd.DataFrame:
    """A Parquet file as a DataFrame; refused, saying what the file is, when it is not one."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "<file>", describe(p), expected)
    frame, problem = parquet_frame(p)
    if problem is not None:
        fix = "; write it again" if "damaged" in problem else _rename_fix(problem)
        raise ConfigError(str(p), "<file>", problem, expected + fix)
    return frame


def _bytes(p: Path, expected: str, raw: bytes | None) -> bytes:
    if raw is not None:
        return raw
    if not p.is_file():
        raise ConfigError(str(p), "<file>", describe(p), expected)
    return p.read_bytes()


def read_csv(path: str | Path, expected: str, raw: bytes | None = None) -> pd.DataFrame:
    """A CSV file (UTF-8 text with a header line) as a DataFrame (`raw`: its bytes, already
    uncompressed)."""
    p = Path(path)
    raw = _bytes(p, expected, raw)
    if raw.startswith(b"PAR1"):
        raise ConfigError(str(p), "<file>", "is a Parquet file, not CSV text",
                          f"{expected}; rename it to .parquet")
    text = decode_text(raw, str(p), expected)
    if not text.strip():
        raise ConfigError(str(p), "<file>", "is empty" if not raw else "holds only white space",
                          f"{expected}: a header line, then rows")
    try:
        return pd.read_csv(io.StringIO(text))
    except Exception as exc:  # pandas raises several kinds for a malformed CSV
        raise ConfigError(str(p), "<file>", f"is not a CSV table ({_detail(exc)})",
                          f"{expected}: a header line, then one row a line, comma-separated"
                          ) from None


def read_jsonl(path: str | Path, expected: str, raw: bytes | None = None) -> list[dict]:
    """The JSON objects of a JSONL file, one a line (blank lines skipped); a line that is not one is
    refused naming FILE:LINE (`raw`: the file's bytes, already uncompressed)."""
    p = Path(path)
    raw = _bytes(p, expected, raw)
    if raw.startswith(b"PAR1"):
        raise ConfigError(str(p), "<file>", "is a Parquet file, not JSON lines",
                          f"{expected}; rename it to .parquet")
    rows = []
    for n, line in enumerate(decode_text(raw, str(p), expected).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise ConfigError(f"{p}:{n}", "<line>", f"is not JSON ({why}): {line.strip()[:60]!r}",
                              f"{expected}: one JSON object per line") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{p}:{n}", "<line>", f"holds {kind_of(row)}, not a JSON object",
                              f"{expected}: one JSON object per line") from None
        rows.append(row)
    if not rows:
        raise ConfigError(str(p), "<file>", "is empty" if not raw.strip() else "holds no rows",
                          f"{expected}: at least one line")
    return rows


def read_table(path: str | Path, expected: str) -> pd.DataFrame | list[dict]:
    """A table by its suffix (.csv, .jsonl, .parquet); any other suffix is refused, saying what
    the file is."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return read_csv(p, expected)
    if suffix == ".jsonl":
        return read_jsonl(p, expected)
    if suffix == ".parquet":
        return read_parquet(p, expected)
    what = describe(p)
    if p.is_file():
        what = f"is a {suffix or 'suffix-less'} file that {what}"
    raise ConfigError(str(p), "<file>", what,
                      f"{expected}, named .csv, .jsonl or .parquet by what it holds")
