"""The exported files' text: the header of comments (usage and notes), YAML with the table's rows
on one line each, and bash arrays."""

from __future__ import annotations

from typing import Any

import yaml

from workbench.contracts.policy import Policy


def header(policy: Policy, target: str, usage: list[str], notes: list[str]) -> str:
    """The file's first lines, as comments: the policy and target, how to use it, the notes."""
    lines = [f"# tlt export: policy '{policy.name}' for {target}.", *[f"# {u}" for u in usage]]
    if notes:
        lines.append("# Notes (approximated: runs something close; dropped: not set; exact: said "
                     "another way):")
        lines += [f"#   - {n}" for n in notes]
    else:
        lines.append("# The target expresses the whole policy.")
    return "\n".join(lines) + "\n"


class _Dumper(yaml.SafeDumper):
    """Block style, with lists of scalars (the table's rows) on one line each."""


def _list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flat = all(not isinstance(x, (list, dict)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _list)


def dump_yaml(data: dict[str, Any]) -> str:
    """Block-style YAML in the dict's order, with lists of scalars on one line."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def shell_array(name: str, items: list[str]) -> str:
    """A bash array assignment, one item a line (each already shell-quoted)."""
    return f"{name}=(\n" + "".join(f"  {item}\n" for item in items) + ")\n"
