"""Metric dicts as Python prints them inside a log line (`perf 3: {'perf/rollout_time': 1.2, ...}`),
and Megatron-style argument dumps (`  rollout_batch_size ........ 32`).

A printed dict may hold values Python's literal reader refuses (`np.float64(1.5)`,
`tensor(0.5, device='cuda:0')`, `nan`, `inf`), so each `'key': value` pair is read on its own:
a number (inside such a wrapper or bare) is kept, a text or a list is dropped. A dict cut short at
the end of the log keeps its complete pairs and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PAIR = re.compile(r"""['"]([^'"]+)['"]\s*:\s*(?:['"]([^'"]*)['"]|(?:np\.\w+|tensor|torch\.\w+)?"""
                   r"""\(?\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf"""
                   r"""|NaN|Infinity|-inf)))""")
_ARG = re.compile(r"^\s+([A-Za-z_][\w]*) \.{3,} (.*?)\s*$")
_YAML = re.compile(r"^(\s*)([A-Za-z_][\w]*):\s*(.*?)\s*$")


@dataclass(frozen=True)
class PrintedDict:
    values: dict[str, object]  # key -> float, or str for a quoted text
    whole: bool  # the closing brace was printed


def printed_dict(text: str) -> PrintedDict:
    """The pairs of the dict that starts at the first `{` of `text`."""
    start = text.find("{")
    body = text[start:] if start >= 0 else ""
    values: dict[str, object] = {}
    for m in _PAIR.finditer(body):
        key, quoted, num = m.group(1), m.group(2), m.group(3)
        if quoted is not None:
            values[key] = quoted
            continue
        try:
            values[key] = float(num)
        except (TypeError, ValueError):
            continue
    return PrintedDict(values, body.rstrip().endswith("}"))


def setting(text: str) -> object:
    """A printed setting's value: None, a bool, an int, a float, else the text as printed."""
    t = text.strip().strip("'\"")
    if t in ("None", "null", ""):
        return None
    if t in ("True", "true", "False", "false"):
        return t.lower() == "true"
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            continue
    return t


def megatron_args(lines: list[str]) -> dict[str, tuple[object, int]]:
    """Megatron's `arguments` dump (`  name ........ value`, one per line): name -> (value, line);
    the first print of a name kept (every rank may print the dump)."""
    out: dict[str, tuple[object, int]] = {}
    for n, line in enumerate(lines, 1):
        m = _ARG.match(line)
        if m and m.group(1) not in out:
            out[m.group(1)] = (setting(m.group(2)), n)
    return out


def dashed_flags(lines: list[str], script: re.Pattern) -> dict[str, tuple[object, int]]:
    """`--rollout-batch-size 32` flags on lines that run `script` (a shell trace of the launch):
    name (underscores) -> (value, line); a flag without a value reads True."""
    out: dict[str, tuple[object, int]] = {}
    for n, line in enumerate(lines, 1):
        if not script.search(line):
            continue
        words = line.replace("\\", " ").split()
        for i, w in enumerate(words):
            if not w.startswith("--") or len(w) < 3:
                continue
            name, eq, value = w[2:].partition("=")
            if not eq:
                nxt = words[i + 1] if i + 1 < len(words) else ""
                value = nxt if nxt and not nxt.startswith("--") else "True"
            out.setdefault(name.replace("-", "_"), (setting(value), n))
    return out


def yaml_settings(lines: list[str]) -> dict[str, tuple[object, int]]:
    """A printed YAML config (`OmegaConf.to_yaml`), its keys dotted by their indentation:
    name -> (value, line); lists and blocks are not read (their parent key has no value)."""
    out: dict[str, tuple[object, int]] = {}
    stack: list[tuple[int, str]] = []
    for n, text in enumerate(lines, 1):
        y = _YAML.match(text)
        if not y or "│" in text:
            continue
        indent = len(y.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = ".".join([k for _, k in stack] + [y.group(2)])
        if y.group(3):
            out.setdefault(key, (setting(y.group(3)), n))
        else:
            stack.append((indent, y.group(2)))
    return out
