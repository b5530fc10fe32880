"""The launch command at the top of a veRL log: its Hydra overrides, with the shell variables
assigned above it resolved.

veRL runs are started by a shell script (`python3 -m verl.trainer.main_ppo key=value ...`), and
logs usually begin with that script: variables first (`TP_VALUE=2 #default:2`), then the command,
one override per line continued by `\\` (or all on one line, or inside a quoted argument to a
wrapper script: `bash run.sh "key=value key=value"`). Overrides may use `$NAME` or `${NAME}`;
Hydra's `+key=` and `++key=` prefixes add or force a key and read the same here. Only lines
before the first step line are read (later output quotes configs too, but the command is what was
launched).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_OVERRIDE = re.compile(r"^\+{0,2}([A-Za-z_][\w.\-]*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Setting:
    """One Hydra override as launched: its value with variables resolved (`unresolved` names a
    variable the log never assigns), the text as written and its line."""

    key: str
    value: str
    written: str
    line: int
    unresolved: str = ""

    def where(self) -> str:
        """How the log gives it, for the printout: `key=written (NAME=value), line N`."""
        shown = f"{self.key}={self.written}"
        if self.written != self.value and not self.unresolved:
            shown += f" (= {self.value})"
        return f"{shown}, line {self.line}"


@dataclass(frozen=True)
class LaunchCommand:
    """What the log's launch command sets (empty: the log has none)."""

    settings: tuple[Setting, ...] = ()
    variables: tuple[tuple[str, str], ...] = ()  # (name, value) as assigned above the command

    def get(self, key: str) -> Setting | None:
        """The last override of `key` (Hydra keeps the last one)."""
        found = [s for s in self.settings if s.key == key]
        return found[-1] if found else None


def _strip_comment(text: str) -> str:
    """A shell comment starts at a `#` outside quotes after whitespace (or the line's start)."""
    quote = ""
    for i, ch in enumerate(text):
        if ch in "\"'" and not quote:
            quote = ch
        elif ch == quote:
            quote = ""
        elif ch == "#" and not quote and (i == 0 or text[i - 1].isspace()):
            return text[:i]
    return text


def _unquote(text: str) -> str:
    try:
        parts = shlex.split(text)
    except ValueError:  # an unbalanced quote: take the text as written
        return text.strip()
    return " ".join(parts)


def _resolve(text: str, variables: dict[str, str]) -> tuple[str, str]:
    """`text` with $NAME / ${NAME} replaced; the first name not assigned, if any."""
    missing = ""

    def sub(m: re.Match) -> str:
        nonlocal missing
        name = m.group(1) or m.group(2)
        if name in variables:
            return variables[name]
        missing = missing or name
        return m.group(0)

    return _VAR.sub(sub, text), missing


def _bare(word: str) -> str:
    """A word without the quote that opens or closes a quoted argument list around it."""
    if word and word[0] in "\"'":  # ('' is in every string: test the character itself)
        word = word[1:]
    if word and word[-1] in "\"'" and word.count(word[-1]) % 2:
        word = word[:-1]
    return word


def parse_command(lines: list[str]) -> LaunchCommand:
    """The shell variables and Hydra overrides in `lines` (the log before its first step line)."""
    variables: dict[str, str] = {}
    settings: list[Setting] = []
    for n, raw in enumerate(lines, 1):
        line = _strip_comment(raw.strip().rstrip("\\").strip())
        if not line or line.startswith("```"):
            continue
        words = line.split()
        m = _ASSIGN.match(line) if len(words) == 1 or words[0] == "export" else None
        if m and "." not in m.group(1):
            value, _ = _resolve(_unquote(m.group(2)), variables)
            variables[m.group(1)] = value
            continue
        for word in words:  # a script's quoted argument list (`run.sh "k=v k=v"`) reads the same
            o = _OVERRIDE.match(_bare(word))
            if o and "." in o.group(1):
                written = _unquote(o.group(2))
                value, missing = _resolve(written, variables)
                settings.append(Setting(o.group(1), value, written, n, missing))
    return LaunchCommand(tuple(settings), tuple(variables.items()))
