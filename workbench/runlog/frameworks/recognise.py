"""Which framework wrote a log: each reader's marker (a line only that framework prints) counted
in the text; veRL's `step:N - key:value` lines are the reader's own and win where present."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from workbench.contracts.schema import ConfigError
from workbench.runlog.frameworks import areal, nemo_rl, openrlhf, roll, skyrl, slime
from workbench.runlog.frameworks.base import GEN, WAIT, Parsed

READERS: tuple[ModuleType, ...] = (slime, nemo_rl, skyrl, openrlhf, areal, roll)
_VERL_STEP = re.compile(r"(?:^|[\s)\]])step:\s*\d+\s+-\s+\S+:", re.MULTILINE)


def framework(text: str) -> ModuleType | None:
    """The reader of the framework whose markers the text has most of; None: veRL's (or none)."""
    verl = len(_VERL_STEP.findall(text))
    counts = [(len(r.MARKER.findall(text)) if any(h in text for h in r.HINTS) else 0, i)
              for i, r in enumerate(READERS)]
    best, i = max(counts, key=lambda c: (c[0], -c[1]))
    return READERS[i] if best > verl else None


def refuse_untimed(p: Path, parsed: Parsed) -> None:
    """A log read without a timed step: said in the framework's terms."""
    name = parsed.identity.name
    if not parsed.rows:
        raise ConfigError(str(p), "<file>", f"a {name} log without one step record",
                          f"a {name} console log with its per-step records "
                          "(docs/formats.md#run-logs)")
    if any(WAIT in r for r in parsed.rows.values()):
        raise ConfigError(str(p), GEN, f"<{name}: an asynchronous run>",
                          "a synchronous run's log: in this run the rollout timer is the "
                          "trainer's wait for trajectories generated during the previous update, "
                          "not their generation, and the step model prices synchronous steps "
                          "(`tlt workload import` still takes its lengths)")
    raise ConfigError(str(p), GEN, f"<missing in every {name} step>",
                      f"at least one step with its rollout time ({name}'s: "
                      f"docs/formats.md#run-logs)")
