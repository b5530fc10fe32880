"""From imported trajectories to what `tlt workload import` reports and the agentic Workload it
writes (the turns table beside it: OUT.turns.parquet)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from workbench.contracts.schema import ConfigError, save
from workbench.contracts.turn_data import UNKNOWN, ObservedTurns, write_turns
from workbench.contracts.workload import Workload
from workbench.workloads.agentic_fit import AgenticFit, fit_agentic
from workbench.workloads.agentic_reader import ImportedTurns, read_turn_files

KINDS = {"replay": "replay", "fit": "model"}


@dataclass(frozen=True)
class AgenticImport:
    workload: Workload
    lines: list[str]  # the report
    data: Path
    fit: AgenticFit


def turns_path(out: Path) -> Path:
    return out.with_name(out.stem + ".turns.parquet")


def _q(values: np.ndarray, unit: str = "", digits: int = 0) -> str:
    p = np.percentile(values, [50, 90, 100])
    return " / ".join(f"{v:,.{digits}f}{unit}" for v in p) + " (p50 / p90 / max)"


def report(im: ImportedTurns, f: AgenticFit, cap: int) -> list[str]:
    """What the files hold and what the fit makes of it."""
    t, m = im.turns, f.model
    c = t.cols
    count = np.diff(t.trajectory_starts)
    size = int(np.median(np.diff(t.group_starts)))
    lines = [f"{f.trajectories:,} trajectories ({t.groups:,} prompts x {size}) over "
             f"{len(im.steps)} step(s) {im.steps}; {f.turns:,} turns, {f.tool_calls:,} tool "
             f"boundaries; response cap {cap:,}",
             "turns per trajectory: " + ", ".join(
                 f"{n}: {s:.1%}" for n, s in enumerate(m.turn_shares, 1)),
             "completion tokens per turn: " + _q(c["completion_tokens"].astype(float)),
             "prompt tokens per turn: " + _q(c["prompt_tokens"].astype(float))]
    boundary = c["turn"] < np.repeat(count - 1, count)
    lat = c["tool_s"][boundary]
    lat = lat[np.isfinite(lat)]
    if len(lat):
        lines.append("tool latency per boundary: " + _q(lat, " s", 3))
    lines.append("tool tokens appended per boundary: " + _q(c["tool_tokens"][boundary]))
    cached = c["cached_tokens"] != UNKNOWN
    later = cached & (c["turn"] > 0)
    if later.any():
        share = c["cached_tokens"][later].sum() / c["prompt_tokens"][later].sum()
        lines.append(f"prefix cache: {share:.1%} of later turns' prompt tokens were cached")
    engine = c["engine_s"][np.isfinite(c["engine_s"])]
    if len(engine):
        lines.append("engine latency per turn (queueing included): " + _q(engine, " s", 1))
    lines += [f"fitted: turn medians {list(m.turn_median_tokens)} tokens, log-sd {m.turn_sigma}; "
              f"tools {m.tool_tokens_median:,.0f} tokens (log-sd {m.tool_tokens_sigma}), "
              f"{m.tool_latency_median_s} s (log-sd {m.tool_latency_sigma})",
              f"correlations (as measured, modelled): within a trajectory's turns "
              f"{m.trajectory_correlation}, turn counts within a group {m.group_correlation}, "
              f"turn count ~ turn length {m.count_length_correlation}, tool latency ~ tool "
              f"tokens {m.latency_tokens_correlation}",
              "measured, not modelled: " + ", ".join(f"{k} {v}" for k, v in f.unmodelled.items())]
    return lines + im.notes


def _cap(im: ImportedTurns, cap: int | None) -> int:
    if cap is not None:
        return cap
    if im.cap is not None:
        return im.cap
    c, starts = im.turns.cols, im.turns.trajectory_starts
    per = np.add.reduceat(c["completion_tokens"] + c["tool_tokens"], starts[:-1])
    return int(2 ** np.ceil(np.log2(max(16, int(per.max())))))


def import_agentic(paths: list[str | Path], out: Path, base: Workload, mode: str, cap: int | None,
                   name: str | None, source: str, description: str = "") -> AgenticImport:
    """Read the files, fit, write OUT.turns.parquet then OUT: all checked before anything is
    written."""
    if mode not in KINDS:
        raise ConfigError("--mode", "mode", mode, "replay or fit for multi-turn trajectories")
    im = read_turn_files(paths)
    turns: ObservedTurns = im.turns
    cap = _cap(im, cap)
    fit = fit_agentic(turns, replace(base.agentic, enabled=True))
    data = turns_path(out)
    agentic = replace(fit.model, kind=KINDS[mode], data=data.name)
    first = turns.cols["turn"] == 0
    size = int(np.median(np.diff(turns.group_starts)))
    per_batch = int(np.median([len(g) for g in turns.batch_groups]))
    where = sorted({Path(f).parent.name or "." for f in im.files})
    desc = description or (
        f"Measured multi-turn trajectories from {', '.join(where)} ({fit.trajectories:,} "
        f"trajectories, {len(im.steps)} steps; {agentic.kind}). Shape and cluster: {base.name} "
        f"({base.workers} engines x TP{base.gpus_per_worker}).")
    wl = replace(base, name=name or out.stem, description=desc, source=source,
                 prompts_per_step=per_batch, group_size=size, max_response_tokens=cap,
                 prompt_tokens=int(np.median(turns.cols["prompt_tokens"][first])),
                 steps=turns.batches, agentic=agentic)
    wl.check()
    write_turns(data, turns)
    save(wl, out)
    lines = report(im, fit, cap) + [
        f"wrote {out} (agentic {agentic.kind}; prompts_per_step {per_batch}, group_size {size}) "
        f"and {data}"]
    return AgenticImport(wl, lines, data, fit)
