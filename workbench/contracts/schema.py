"""Reading, validating and saving the YAML/JSON files behind Policy, Workload and Profile.

Every contract is a tree of frozen dataclasses. `from_mapping` builds one from
parsed YAML/JSON, checking each field's type and then the dataclass's own
`check()` rules, so a bad file fails with the file, the dotted field, the bad
value and what is allowed, never with a bare KeyError deep in the simulator.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
import warnings
from pathlib import Path
from typing import Any, TypeVar

import yaml

from workbench.contracts.file_kind import describe, text_problem, utf8_fix
from workbench.contracts.fileio import write_atomic

T = TypeVar("T")
MAPPING_FILE = "a YAML or JSON text file (.yaml, .yml or .json)"


class ConfigError(ValueError):
    """A config file (or mapping) that does not describe a valid contract.

    `field` is the dotted field, or a place in angle brackets (`<file>`, `<line>`, `<columns>`,
    `<option>`...) when the whole file, line or option is wrong: then `value` says what it is ("is
    binary (a NUL byte at byte 12)") and the message reads "SOURCE: VALUE; expected ALLOWED"."""

    def __init__(self, source: str, field: str, value: Any, allowed: str):
        field = str(field)  # a file's key may be any YAML scalar (null, 1, true)
        self.source, self.field, self.value, self.allowed = source, field, value, allowed
        where = f"{source}: " if source else ""
        if field.startswith("<") and isinstance(value, str):
            super().__init__(f"{where}{value}; expected {allowed}")
        else:
            super().__init__(f"{where}field '{field}' has value {value!r}; allowed: {allowed}")


class FieldError(ValueError):
    """Raised by a dataclass's check(); from_mapping adds the file and the field path."""

    def __init__(self, field: str, value: Any, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"field '{field}' has value {value!r}; allowed: {allowed}")


class Notice(UserWarning):
    """Something the user should know that stops nothing: the command line prints the message as
    a notice (workbench/cli/apps.py), the app shows it (workbench/ui/inputs.py, `notices`)."""


class RenameNotice(Notice):
    """Something asked for by its old name (a preset, a file's field): it still loads."""


class FieldRenamed(RenameNotice):
    """A file's field under its old name (a contract's RENAMED_FIELDS)."""


def require(ok: bool, field: str, value: Any, allowed: str) -> None:
    if not ok:
        raise FieldError(field, value, allowed)


def check_part(name: str, part: Any) -> None:
    """Run a nested part's check(), naming the field by its path from the parent."""
    try:
        part.check()
    except FieldError as exc:
        raise FieldError(f"{name}.{exc.field}", exc.value, exc.allowed) from None


def decode_text(raw: bytes, source: str, expected: str) -> str:
    """`raw` as UTF-8 text (a byte-order mark dropped), else a ConfigError saying what it is, that
    `expected` was, and how to re-encode it where that helps."""
    problem = text_problem(raw)
    if problem is not None:
        fix = utf8_fix(problem)
        raise ConfigError(source, "<file>", problem, expected + (f"; {fix}" if fix else ""))
    return raw.decode("utf-8").removeprefix("\ufeff")


def read_text(path: str | Path, expected: str) -> str:
    """The UTF-8 text of the file at `path`; a ConfigError naming the file, what it is and
    `expected` when it is missing, a directory, or not UTF-8 text."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "<file>", describe(p), expected)
    return decode_text(p.read_bytes(), str(p), expected)


def read_mapping(path: str | Path) -> dict:
    """Parse a YAML or JSON file into a mapping, with errors that name the file."""
    path = Path(path)
    return parse_mapping(read_text(path, MAPPING_FILE), str(path), path.suffix == ".json")


def parse_mapping(text: str, source: str, is_json: bool) -> dict:
    """YAML (or, `is_json`, JSON) text as a mapping; errors name `source`, the line and column."""
    syntax = "JSON" if is_json else "YAML"
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(source, "<file>", f"is not valid {syntax} ({_brief(exc)})",
                          f"{MAPPING_FILE}: fix the syntax there") from None
    if not isinstance(data, dict):
        raise ConfigError(source, "<top level>", f"holds {kind_of(data)} at the top level",
                          "a mapping of field: value (the fields in docs/formats.md)")
    return data


def _brief(exc: Exception) -> str:
    """A parser's error in one line: what and where (line and column)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    mark = getattr(exc, "problem_mark", None)
    what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{what} at line {mark.line + 1}, column {mark.column + 1}" if mark else what


def kind_of(data: Any) -> str:
    """A parsed value's kind in words (a list, a string, a number, null...)."""
    if data is None:
        return "nothing (null)"
    names = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return names.get(type(data), f"a {type(data).__name__}")


def from_mapping(cls: type[T], data: Any, source: str = "", prefix: str = "") -> T:
    """Build dataclass `cls` from `data`, validating types, unknown keys and check() rules."""
    if not isinstance(data, dict):
        if prefix:
            raise ConfigError(source, prefix, data, f"a mapping for {cls.__name__}")
        raise ConfigError(source, "<top level>", f"holds {kind_of(data)} at the top level",
                          f"a mapping of field: value for {cls.__name__}")
    data = _renamed_fields(cls, data, source, prefix)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        raise ConfigError(source, _join(prefix, unknown[0]), data[unknown[0]],
                          f"one of the known fields: {', '.join(sorted(fields))}")
    kwargs = {}
    for name, f in fields.items():
        path = _join(prefix, name)
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(source, path, "<missing>",
                                  f"a value of type {_type_name(hints[name])}")
            continue
        kwargs[name] = _convert(hints[name], data[name], source, path)
    try:
        obj = cls(**kwargs)
        if hasattr(obj, "check"):
            obj.check()
    except FieldError as exc:
        raise ConfigError(source, _join(prefix, exc.field), exc.value, exc.allowed) from None
    return obj


def _renamed_fields(cls: type, data: dict, source: str, prefix: str) -> dict:
    """`data` with the fields `cls.RENAMED_FIELDS` renamed (old -> new) under their new names, each
    with a FieldRenamed notice; a file that gives both names is refused."""
    renamed = getattr(cls, "RENAMED_FIELDS", {})
    if not any(old in data for old in renamed):
        return data
    data = dict(data)
    for old, new in renamed.items():
        if old not in data:
            continue
        if new in data:
            raise ConfigError(source, _join(prefix, old), data[old], f"nothing: '{old}' is the old "
                              f"name of '{new}', which the file also gives")
        data[new] = data.pop(old)
        where = f"{source}: " if source else ""
        warnings.warn(f"{where}field '{_join(prefix, old)}' is now '{_join(prefix, new)}'; read as "
                      f"'{_join(prefix, new)}' (rename it in the file)", FieldRenamed, stacklevel=3)
    return data


# A dataclass field's metadata: the field is left out of a file while it holds its default (an
# optional section added to a contract keeps the files of those who do not use it as they were).
OMIT_DEFAULT = {"omit_default": True}


def _omitted(obj: Any, f: dataclasses.Field) -> bool:
    if not f.metadata.get("omit_default"):
        return False
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return getattr(obj, f.name) == default


def to_mapping(obj: Any) -> Any:
    """Plain YAML/JSON-able form of a contract (tuples become lists)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_mapping(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not _omitted(obj, f)}
    if isinstance(obj, (list, tuple)):
        return [to_mapping(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj


def differences(a: Any, b: Any, rel_tol: float, path: str = "") -> list[str]:
    """Where two contracts (or their mappings) differ: numbers beyond `rel_tol` relative, anything
    else unequal. Fitted numbers differ in their last digits between CPUs (BLAS, instruction sets),
    so files written by a fit are compared this way, never for equality."""
    a, b = to_mapping(a), to_mapping(b)
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [path or "."]
        return [d for k in a for d in differences(a[k], b[k], rel_tol, _join(path, str(k)))]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [path or "."]
        return [d for i, (x, y) in enumerate(zip(a, b))
                for d in differences(x, y, rel_tol, f"{path}[{i}]")]
    numbers = (int, float)
    both_numbers = isinstance(a, numbers) and isinstance(b, numbers)
    if both_numbers and not isinstance(a, bool) and not isinstance(b, bool):
        same = math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0) or (a != a and b != b)
        return [] if same else [path or "."]
    return [] if a == b else [path or "."]


def save(obj: Any, path: str | Path) -> None:
    """A contract as YAML (or JSON for a .json path), atomically."""
    path = Path(path)
    data = to_mapping(obj)
    if path.suffix == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False)
    write_atomic(path, text)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _convert(tp: Any, value: Any, source: str, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, source, path)
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(source, path, value, "one of " + ", ".join(repr(a) for a in args))
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise ConfigError(source, path, value,
                              "one of " + ", ".join(repr(m.value) for m in tp)) from None
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(source, path, value, f"a list of {_type_name(args[0])}")
        return tuple(_convert(args[0], v, source, f"{path}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        if isinstance(value, (list, tuple)) and hasattr(tp, "from_row"):
            try:
                value = tp.from_row(value)
            except (TypeError, ValueError):
                raise ConfigError(source, path, value, tp.ROW_HELP) from None
        return from_mapping(tp, value, source, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(source, path, value, "true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(source, path, value, "a whole number")
        return value
    if tp is float:
        if isinstance(value, str):
            # PyYAML (YAML 1.1) reads "2.0e7" (no sign after e) as a string.
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(source, path, value, "a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(source, path, value, "a string")
        return value
    raise TypeError(f"unsupported field type {tp!r} at {path}")


def load(cls: type[T], name_or_path: str | Path, preset_dir: Path) -> T:
    """A named preset from `preset_dir`, or a file path."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml", ".json") or candidate.exists():
        return from_mapping(cls, read_mapping(candidate), str(candidate))
    preset = preset_dir / f"{name_or_path}.yaml"
    if not preset.is_file():
        names = ", ".join(preset_names(preset_dir))
        raise ConfigError(str(name_or_path), "<name>", "is neither a preset nor an existing file",
                          f"a preset name ({names}) or a path to a .yaml/.json file")
    return from_mapping(cls, read_mapping(preset), str(preset))


def preset_names(preset_dir: Path, pattern: str = "*.yaml") -> list[str]:
    return sorted(p.stem for p in preset_dir.glob(pattern))
