"""What a veRL log prints of its resolved configuration before the first step: the whole config,
and the rollout engine's own start line.

veRL's trainer pretty-prints its resolved Hydra config at start (`pprint` of a nested dict), one
line per key, each behind the Ray prefix of the process that printed it (`(TaskRunner pid=N)`,
`(main_task pid=N)`). Other processes' lines (and warnings of the same one) interleave with it:
the dict is the first line of that process starting `{'`, continued by that process's lines that
continue a pretty-printed literal (indented, then a quote, a bracket, a number or a constant; or
any text, where the line before ends at a key whose value the output split onto the next line). A
log cut inside the dict keeps what was printed: open brackets are closed, a dangling key dropped.

vLLM prints its engine's configuration when it starts: `Initializing a V1 LLM engine (v0.8.5) with
config: model=..., enforce_eager=False, ...` (older: `Initializing an LLM engine (v0.6.3) ...`):
read for the engine's version and the settings it names.

Keys are dotted paths (`actor_rollout_ref.rollout.enforce_eager`); values are Python literals as
printed (bool, int, float, str, None, list), each with the line it was read from.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_PREFIX = re.compile(r"^\s*(\([^()]*pid=\d+[^()]*\))\s?")
_CONTINUES = re.compile(r"^ +(['\"\[\{(\-\d]|True\b|False\b|None\b)")
_ENGINE = re.compile(r"Initializing (?:a|an) (?:V\d+ )?LLM engine \(v([0-9][\w.+\-]*)\) with "
                     r"config: (.*)$")
_ENGINE_SETTING = re.compile(r"(\w+)=('[^']*'|\"[^\"]*\"|[^,\s]+)")


@dataclass(frozen=True)
class ConfigValue:
    value: object
    line: int  # the log's line that printed it (its key's line, 1-based)
    name: str = ""  # the setting as the log names it, where another framework's (else the key)


@dataclass(frozen=True)
class PrintedConfig:
    """The resolved config veRL printed (dotted keys) and the engine's start line, if the log has
    them (empty otherwise)."""

    values: tuple[tuple[str, ConfigValue], ...] = ()
    engine_version: str = ""  # vLLM's version from its start line ('' if not printed)
    engine_line: int = 0
    engine_settings: tuple[tuple[str, str], ...] = ()  # as the start line names them
    first_line: int = 0  # where the printed config starts (0: none)

    def get(self, key: str) -> ConfigValue | None:
        return dict(self.values).get(key)

    def engine_setting(self, name: str) -> str | None:
        return dict(self.engine_settings).get(name)


def _strip(line: str) -> tuple[str, str]:
    """(the Ray prefix, the rest)."""
    m = _PREFIX.match(line)
    return (m.group(1), line[m.end():]) if m else ("", line)


def _closers(text: str) -> str | None:
    """The brackets that close `text` (None: it ends inside a quoted string)."""
    stack, quote = [], ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            stack.append({"[": "]", "{": "}", "(": ")"}[ch])
        elif ch in "]})" and stack:
            stack.pop()
    return None if quote else "".join(reversed(stack))


def _literal(parts: list[str]) -> object:
    """The printed literal; a log cut inside it keeps its complete entries (the last lines dropped
    until the rest, its brackets closed, reads)."""
    for end in range(len(parts), max(0, len(parts) - 40), -1):
        text = " ".join(parts[:end]).rstrip().rstrip(",")
        text = re.sub(r"(?:,\s*)?'[^']*':\s*$", "", text)  # a key whose value was cut off
        closers = _closers(text)
        if closers is None:
            continue
        try:
            return ast.literal_eval(text + closers)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
    return None


def _flatten(d: dict, prefix: str, lines: dict[str, int], out: list) -> None:
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            _flatten(v, key + ".", lines, out)
        else:
            out.append((key, ConfigValue(v, lines.get(key, 0))))


def _dict_lines(lines: list[str]) -> list[tuple[int, str]]:
    """The printing process's lines of the dict: (log line, text after the prefix)."""
    for n, raw in enumerate(lines, 1):
        prefix, rest = _strip(raw)
        if not (rest.startswith("{'") and ":" in rest):
            continue
        taken, depth = [(n, rest)], _depth(rest)
        for m, other in enumerate(lines[n:], n + 1):
            if depth <= 0:
                break
            p, body = _strip(other)
            # a key whose value went to the next line (the output split there: `'k': ` then `0},`)
            split = taken[-1][1].rstrip().endswith(":")
            if p == prefix and (_CONTINUES.match(body) or split):
                taken.append((m, body))
                depth += _depth(body)
        return taken
    return []


def _depth(text: str) -> int:
    """Brackets opened minus closed (quoted text ignored)."""
    quoted = re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "", text)
    return sum(quoted.count(c) for c in "[{(") - sum(quoted.count(c) for c in "]})")


def _key_lines(taken: list[tuple[int, str]]) -> dict[str, int]:
    """Each dotted key's line, from where pprint puts it: a nested dict's keys line up one column
    right of its brace, so a key's column says which of the keys above it are its parents."""
    out: dict[str, int] = {}
    stack: list[tuple[int, str]] = []
    for n, text in taken:
        for i, m in enumerate(re.finditer(r"'([^']+)':", text)):
            col = m.start()
            before = text[:col].rstrip()
            if i and before.endswith(","):  # a sibling printed on the same line: its key's column
                col = stack[-1][0] if stack else col
            while stack and stack[-1][0] >= col:
                stack.pop()
            stack.append((col, m.group(1)))
            out.setdefault(".".join(k for _, k in stack), n)
    return out


def parse_printed_config(lines: list[str]) -> PrintedConfig:
    """The printed config and the engine's start line in `lines` (the log before its first step
    line; ANSI colours already removed)."""
    taken = _dict_lines(lines)
    values: list = []
    if taken:
        parsed = _literal([t.strip() for _, t in taken])
        if isinstance(parsed, dict):
            _flatten(parsed, "", _key_lines(taken), values)
    version, line, settings = "", 0, ()
    for n, raw in enumerate(lines, 1):
        m = _ENGINE.search(raw)
        if m:
            version, line = m.group(1), n
            settings = tuple((k, v.strip("'\"")) for k, v in _ENGINE_SETTING.findall(m.group(2)))
            break
    return PrintedConfig(tuple(values), version, line, settings, taken[0][0] if taken else 0)
