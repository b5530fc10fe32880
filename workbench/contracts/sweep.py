"""An engine sweep (`tlt engine-sweep --out DIR`): step times and acceptance of one real engine at
held batch sizes, contexts and draft lengths, SD off and on, as a set of ordinary traces.

    DIR/sweep.json           the engine's identity, the plan, the run's status (kept up to date)
    DIR/summary.csv, .md     batch x draft length: plain ms, SD ms, accepted, speedup (idem)
    DIR/cells/b<B>-c<C>/     one cell, rewritten whole (or not at all) after every round:
        cell.json            its batch, context, rounds and figures (its rows of the summary)
        plain/               the plain engine's trace (no speculative decoding)
        <method>/            the SD engine's trace (restart mode: <method>-k<K>, one per K)

Each trace is a trace of traces/README.md; its `meta["sweep"]` says which step ran which arm:
`labels`, rows `[engine_step, round, k, with_k, slot]` (k: the step's draft length, 0 drafts
off; with_k: the SD arm the other engine ran alongside, -1 any; slot: the turn, counted over the
cell, in which every engine stepped once). A round opens fresh requests at the
cell's context on every engine; the engines then step in turn, one step each. A step without a
label (a prefill, the step that changes K) counts for no arm. Every trace's clock is its own
engine's: each trace's steps run back to back.

`cell_figures` turns a cell into the summary's rows (one function, for the sweep's own table
and for the fit's measured side, workbench/calibrate/sweeps/). A step counts for its arm
("clean") when it decodes the whole held batch and prefills nothing, and, on a learned
drafter's engine, when it verified exactly the arm's draft length. Speedup: in every round, the
median of the plain engine's steps taken beside the SD arm's over the median of the SD arm's,
times the arm's tokens per pass; the median over rounds (the engines step in turn, so the
machine's drift cancels in each ratio).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from workbench.contracts.fileio import write_atomic, write_dir_atomic, write_json
from workbench.contracts.trace import Trace, TraceError, load_trace, write_trace

SCHEMA = "tlt-engine-sweep/1"
SWEEP_FILE = "sweep.json"
CELLS = "cells"
PLAIN = "plain"
NGRAM = "ngram"  # the one model-free method: it may propose fewer than k tokens
SUMMARY_HEADERS = ["context", "batch", "K", "plain ms", "SD ms", "SD-off ms", "accepted",
                   "tokens/pass", "speedup", "rounds"]


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep holds and for how long."""

    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    draft_lens: tuple[int, ...]
    rounds: int  # every arm of a cell runs once per round, in a rotated order
    block_steps: int  # decode steps per block
    method: str  # vLLM's speculative method
    switch: str  # "live": K set between steps on one SD engine; "restart": one engine per K


@dataclass
class SweepCell:
    batch: int
    context: int
    path: Path
    traces: dict[str, Trace]  # "plain", then the SD engine(s)
    doc: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return cell_name(self.batch, self.context)


@dataclass
class Sweep:
    path: Path
    doc: dict[str, Any]  # sweep.json
    plan: SweepPlan
    cells: list[SweepCell]

    @property
    def identity(self) -> dict[str, Any]:
        return dict(self.doc.get("identity") or {})


@dataclass(frozen=True)
class CellFigure:
    """One row of the summary: a cell at one draft length against the plain engine."""

    batch: int
    context: int
    k: int
    plain_ms: float  # the plain engine's median clean step
    sd_ms: float  # the SD engine's median clean step at draft length k
    off_ms: float  # the SD engine with drafts off (k = 0; NaN: not measured)
    context_mean: float  # mean context of the SD arm's clean steps
    tokens_per_pass: float  # 1 + accepted drafts per decoding request per step
    accepted_per_pos: tuple[float, ...]  # cumulative acceptance r_i, i = 1..k
    speedup: float  # median over rounds of tokens_per_pass * plain / SD
    speedup_rounds: tuple[float, ...]
    plain_steps: int
    sd_steps: int

    def row(self) -> list[str]:
        off = "-" if math.isnan(self.off_ms) else f"{self.off_ms:.2f}"
        return [str(self.context), str(self.batch), str(self.k), f"{self.plain_ms:.2f}",
                f"{self.sd_ms:.2f}", off, f"{self.tokens_per_pass - 1:.2f}",
                f"{self.tokens_per_pass:.2f}", f"{self.speedup:.3f}",
                str(len(self.speedup_rounds))]


def cell_name(batch: int, context: int) -> str:
    return f"b{batch}-c{context}"


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / SWEEP_FILE).is_file()


def _plan(doc: dict, where: Path) -> SweepPlan:
    try:
        p = doc["plan"]
        return SweepPlan(tuple(int(b) for b in p["batches"]), tuple(int(c) for c in p["contexts"]),
                         tuple(int(k) for k in p["draft_lens"]), int(p["rounds"]),
                         int(p["block_steps"]), str(p["method"]), str(p["switch"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(where, "field 'plan'", f"missing or malformed ({exc})",
                         "run `tlt engine-sweep` again") from None


def load_sweep(path: str | Path) -> Sweep:
    """The sweep's plan and every cell written (a run stopped mid-way keeps the rounds it
    finished)."""
    path = Path(path)
    doc_path = path / SWEEP_FILE
    if not doc_path.is_file():
        raise TraceError(path, SWEEP_FILE, "missing",
                         "give a directory written by `tlt engine-sweep --out DIR`")
    try:
        doc = json.loads(doc_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TraceError(doc_path, "<file>", f"not JSON ({exc})", "run the sweep again") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise TraceError(doc_path, "field 'schema'", f"is {doc.get('schema')!r}"
                         if isinstance(doc, dict) else "not a mapping", f"{SCHEMA}")
    plan = _plan(doc, doc_path)
    cells = []
    for d in sorted((path / CELLS).glob("b*-c*")):
        if not (d / "cell.json").is_file():
            continue
        cdoc = json.loads((d / "cell.json").read_text(encoding="utf-8"))
        traces = {name: load_trace(d / name) for name in cdoc["traces"]}
        cells.append(SweepCell(int(cdoc["batch"]), int(cdoc["context"]), d, traces, cdoc))
    cells.sort(key=lambda c: (c.context, c.batch))
    return Sweep(path, doc, plan, cells)


def labelled_steps(trace: Trace) -> pd.DataFrame:
    """The trace's steps with their arm: `round`, `k`, `with_k` (the SD arm the other engine ran
    alongside; -1: any) and `slot`, -1 for a step outside every arm (a prefill, a change of K),
    and `clean`."""
    info = trace.meta.get("sweep") or {}
    s = trace.steps.sort_values("engine_step").reset_index(drop=True)
    cols = ["engine_step", "round", "k", "with_k", "slot"]
    lab = pd.DataFrame([list(r) + [-1] * (5 - len(r)) for r in info.get("labels") or []],
                       columns=cols)
    s = s.merge(lab, on="engine_step", how="left")
    for col in cols[1:]:
        s[col] = s[col].fillna(-1).astype(int)
    arm = s["k"].to_numpy()
    batch = int(info.get("batch", 0))
    ok = ((s["prefill_requests"] == 0) & (s["decode_requests"] == batch)).to_numpy() & (arm >= 0)
    drafted = s["draft_len"].to_numpy()
    s["clean"] = ok & ((drafted <= arm) if info.get("method") == NGRAM else (drafted == arm))
    return s


def _ms(wall: pd.Series) -> float:
    return 1e3 * float(wall.median()) if len(wall) else math.nan


def _acceptance(steps: pd.DataFrame, k: int) -> tuple[float, tuple[float, ...]]:
    """Tokens per pass and cumulative acceptance per position, per decoding request."""
    offered = float(steps["decode_requests"].sum())
    if k == 0 or offered == 0:
        return 1.0, ()
    acc = np.zeros(k)
    for v in steps["accepted_per_pos"]:
        a = np.asarray(json.loads(v) if isinstance(v, str) else list(v), dtype=float)[:k]
        acc[:len(a)] += a
    return 1.0 + float(steps["num_accepted_tokens"].sum()) / offered, tuple(acc / offered)


def cell_figures(cell: SweepCell) -> list[CellFigure]:
    """The cell's summary rows, one per draft length the SD engine(s) ran."""
    plain = labelled_steps(cell.traces[PLAIN])
    plain = plain[plain["clean"]]
    sd = pd.concat([labelled_steps(t) for name, t in cell.traces.items() if name != PLAIN],
                   ignore_index=True)
    sd = sd[sd["clean"]]
    off = sd[sd["k"] == 0]
    out = []
    for k in sorted(int(x) for x in set(sd["k"]) if x > 0):
        arm = sd[sd["k"] == k]
        per_pass, r = _acceptance(arm, k)
        ratios = []
        for rnd, g in arm.groupby("round"):
            beside = plain[(plain["round"] == rnd) & plain["with_k"].isin((k, -1))]
            p = beside["wall_s"]
            if len(p) and len(g):
                ratios.append(per_pass * float(p.median()) / float(g["wall_s"].median()))
        out.append(CellFigure(cell.batch, cell.context, k, _ms(plain["wall_s"]),
                              _ms(arm["wall_s"]), _ms(off["wall_s"]),
                              float(arm["context_mean"].mean()), per_pass, r,
                              float(statistics.median(ratios)) if ratios else math.nan,
                              tuple(ratios), int(len(plain)), int(len(arm))))
    return out


def summary_markdown(figs: Sequence[CellFigure], title: str) -> str:
    lines = [f"# {title}", "", "| " + " | ".join(SUMMARY_HEADERS) + " |",
             "|" + "---|" * len(SUMMARY_HEADERS)]
    lines += ["| " + " | ".join(f.row()) + " |" for f in figs]
    return "\n".join(lines) + "\n"


def summary_frame(figs: Sequence[CellFigure]) -> pd.DataFrame:
    rows = [{**asdict(f), "accepted_per_pos": json.dumps([round(x, 4) for x in f.accepted_per_pos]),
             "speedup_rounds": json.dumps([round(x, 4) for x in f.speedup_rounds])} for f in figs]
    return pd.DataFrame(rows)


def write_cell(sweep_dir: Path, batch: int, context: int, traces: dict[str, Trace],
               doc: dict[str, Any]) -> Path:
    """A finished cell, whole: its traces and cell.json in a temporary directory, renamed."""

    def fill(tmp: Path) -> None:
        for name, t in traces.items():
            write_trace(t, tmp / name)
        (tmp / "cell.json").write_text(json.dumps({"batch": batch, "context": context,
                                                   "traces": list(traces), **doc}, indent=2,
                                                  default=str) + "\n")

    return write_dir_atomic(sweep_dir / CELLS / cell_name(batch, context), fill)


def write_summary(sweep_dir: Path, figs: Sequence[CellFigure], title: str,
                  progress: Callable[[str], None] | None = None) -> None:
    frame = summary_frame(figs)
    write_atomic(sweep_dir / "summary.csv", frame.to_csv(index=False))
    write_atomic(sweep_dir / "summary.md", summary_markdown(figs, title))
    if progress:
        progress(f"wrote {sweep_dir / 'summary.md'} ({len(figs)} rows)")


def write_sweep_doc(sweep_dir: Path, doc: dict[str, Any]) -> None:
    write_json(sweep_dir / SWEEP_FILE, {"schema": SCHEMA, **doc})
