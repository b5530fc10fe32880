"""The sweep: engines started once, then round by round over every cell (a batch size at a context),
every arm of a cell (the plain engine; the SD engine with drafts off and at each draft length)
run with the engines stepping in turn, each round in another order, so the machine's drift falls
on every arm and every cell alike (real/sweep/cells.py).

Engines: a plain one and one SD engine whose draft length is set between steps (`live`: vLLM's
Dynamic SD table, real/rollout/engine.py's adaptive engines), or, on a vLLM without that table,
one SD engine per draft length (`restart`); all run at once, their engine cores in this process
(the scheduler must be reachable between steps), sharing `--gpu-memory-utilization`. After
each round every cell is written whole (workbench/contracts/sweep.py `write_cell`), then the
summary and sweep.json: a run stopped at any point keeps every round it finished.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from real.rollout.probing import ProbedClock, ReferenceForward
from real.rollout.requests import Sampling
from real.run.capture import machine_info
from real.sweep import methods as m
from real.sweep.blocks import EngineRecord
from real.sweep.cells import CellState, cell_traces, new_cell, run_round
from real.sweep.graphs import captured, edge_batches, graph_rows
from real.sweep.prompts import POOL, cell_prompts
from workbench.contracts.sweep import (
    PLAIN,
    CellFigure,
    SweepCell,
    SweepPlan,
    cell_figures,
    cell_name,
    write_cell,
    write_summary,
    write_sweep_doc,
)
from workbench.contracts.task import Task

Say = Callable[[str], None]


@dataclass(frozen=True)
class SweepSettings:
    """What the user asked for (`tlt engine-sweep`'s options)."""

    model: str  # directory or hub id
    method: str  # vLLM's speculative method
    drafter: str | None = None  # directory or hub id (model-based methods)
    batches: tuple[int, ...] = (1, 4, 16, 64)
    contexts: tuple[int, ...] = (128, 768)
    draft_lens: tuple[int, ...] = (1, 2, 3)
    rounds: int = 4
    block_steps: int = 8
    tp: int = 1
    max_num_seqs: int | None = None  # None: the largest batch
    max_model_len: int = 2048
    gpu_memory_utilization: float = 0.9  # shared by the sweep's engines
    enforce_eager: bool | None = None  # None: vLLM's default (graphs on a GPU; eager on a CPU)
    dtype: str = "auto"  # "auto": the model's on a GPU, float32 on a CPU (as this project runs)
    temperature: float = 1.0
    seed: int = 0
    switch: str = "auto"  # live, restart, or auto (live where the installed vLLM can)
    threads: int = 1  # torch threads on a CPU
    task: Task | None = None  # None: the GCD task
    # The engine's largest CUDA-graph capture size in tokens: the batches just inside and outside
    # each draft length's limit are added to the sweep (real/sweep/graphs.py; None: not asked)
    graph_edges: int | None = None


@dataclass(frozen=True)
class Prepared:
    settings: SweepSettings
    model: m.ModelRef
    drafter: m.ModelRef | None
    plan: SweepPlan
    max_num_seqs: int
    reserve: int  # tokens each request may decode in a block
    drafter_notes: tuple[str, ...] = ()  # what was (not) checked of the drafter


def reserve_tokens(steps: int, draft_lens: Sequence[int]) -> int:
    """Tokens a request may decode in a round: every SD arm's steps (and the step that changes
    K) at its most tokens per step, and room for the prefill's step."""
    return sum((steps + 1) * (k + 1) for k in (0, *draft_lens)) + 8


def prepare(s: SweepSettings) -> Prepared:
    """Everything checked before an engine starts (a start costs 10-60 s); SweepError names the
    option."""
    model = m.resolve_model(s.model, "--model")
    drafter = m.resolve_model(s.drafter, "--drafter") if s.drafter else None
    m.check_method(s.method, drafter, model, m.installed_methods())
    notes = tuple(m.check_drafter(s.method, drafter, model))
    if not s.batches or min(s.batches) < 1 or not s.draft_lens or min(s.draft_lens) < 1:
        raise m.SweepError("--batches and --draft-lens: integers >= 1, e.g. 1,4,16,64 and 1,2,3")
    s = with_graph_edges(s)
    if not s.contexts or min(s.contexts) < 1 or s.rounds < 1 or s.block_steps < 2 or s.tp < 1:
        raise m.SweepError("--contexts >= 1 tokens, --rounds >= 1, --block-steps >= 2, --tp >= 1")
    mns = s.max_num_seqs or max(s.batches)
    if max(s.batches) > mns:
        raise m.SweepError(f"--batches up to {max(s.batches)}: above --max-num-seqs {mns}")
    reserve = reserve_tokens(s.block_steps, s.draft_lens)
    if max(s.contexts) + reserve > s.max_model_len:
        raise m.SweepError(f"--contexts up to {max(s.contexts)} plus {reserve} tokens to decode in "
                           f"a block: above --max-model-len {s.max_model_len}")
    if s.switch not in ("auto", "live", "restart"):
        raise m.SweepError(f"--switch {s.switch}: auto, live or restart")
    live = m.live_switching()
    if s.switch == "live" and not live:
        raise m.SweepError("--switch live: this vLLM cannot change draft lengths between steps "
                           "(no Dynamic SD table); use --switch restart")
    switch = "live" if s.switch == "auto" and live else ("restart" if s.switch == "auto"
                                                         else s.switch)
    plan = SweepPlan(tuple(sorted(set(s.batches))), tuple(sorted(set(s.contexts))),
                     tuple(sorted(set(s.draft_lens))), s.rounds, s.block_steps, s.method, switch)
    return Prepared(s, model, drafter, plan, mns, reserve, notes)


def with_graph_edges(s: SweepSettings) -> SweepSettings:
    """The settings with the batches that straddle each draft length's graph limit added
    (`graph_edges`); refused on a CPU, whose engines capture no graphs."""
    if s.graph_edges is None:
        return s
    from real.rollout.vllm_env import running_on_cpu

    if s.graph_edges < 1:
        raise m.SweepError(f"--graph-edges {s.graph_edges}: the engine's largest CUDA-graph "
                           "capture size in tokens (vLLM's default: min(2 x max_num_seqs, 512))")
    if running_on_cpu():
        raise m.SweepError("--graph-edges: a CPU engine captures no CUDA graphs (it runs every "
                           "step eager); there is no limit to straddle")
    cap = s.max_num_seqs or max(s.batches + (s.graph_edges,))
    edges = edge_batches(s.graph_edges, s.draft_lens, cap)
    return replace(s, batches=tuple(sorted(set(s.batches) | set(edges))))


def _pin(threads: int) -> None:
    import torch

    if not torch.cuda.is_available():
        torch.set_num_threads(threads)


def start_engines(p: Prepared, say: Say) -> tuple[list[EngineRecord], dict[str, float]]:
    """The plain engine, then the SD engine(s), each warmed up; seconds each start took."""
    from real.rollout.engine import RolloutEngine
    from real.rollout.vllm_env import running_on_cpu
    from workbench.contracts.policy import load_policy

    s, plan = p.settings, p.plan
    ks = plan.draft_lens
    cpu = running_on_cpu()
    n = 2 if plan.switch == "live" else 1 + len(ks)
    common: dict[str, Any] = dict(
        max_num_seqs=p.max_num_seqs, max_model_len=s.max_model_len, seed=s.seed,
        dtype="float32" if s.dtype == "auto" and cpu else s.dtype,
        memory_utilization=s.gpu_memory_utilization / n, enforce_eager=s.enforce_eager,
        in_process=True, tensor_parallel_size=s.tp)
    if cpu:
        # The KV cache every engine needs: the largest cell, with room for its blocks.
        need = max(plan.batches) * (max(plan.contexts) + p.reserve) * 2
        common["kv_cache_gib"] = max(1.0, need * kv_bytes_per_token(p.model.path) / 2**30)
    wanted = [(PLAIN, None, dict(policy=load_policy("baseline")))]
    if plan.switch == "live":
        wanted.append((s.method, None, dict(speculative=m.speculative(
            s.method, max(ks), p.drafter, p.max_num_seqs, True), adaptive=True)))
    else:
        wanted += [(f"{s.method}-k{k}", k, dict(speculative=m.speculative(
            s.method, k, p.drafter, p.max_num_seqs, False))) for k in ks]
    records, took = [], {}
    for name, k, kw in wanted:
        say(f"starting engine {len(records) + 1}/{len(wanted)}: {name}")
        t = time.perf_counter()
        _pin(s.threads)
        engine = RolloutEngine(p.model.path, **kw, **common)
        _pin(s.threads)  # an in-process engine start may have set its own
        engine.generate([[1, 2, 3, 4]], 1, Sampling(temperature=0.0, max_tokens=8))
        engine.llm.reset_prefix_cache()
        took[name] = round(time.perf_counter() - t, 2)
        records.append(EngineRecord(name, engine, k))
        say(f"  {name} ready in {took[name]:.1f}s")
    return records, took


def kv_bytes_per_token(model_dir: Path) -> float:
    """The target's KV cache per token at fp32 (a CPU engine's), from its config.json."""
    import json

    c = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    c = {**c, **(c.get("text_config") or {})}
    heads = int(c.get("num_attention_heads") or 1)
    head_dim = int(c.get("head_dim") or int(c.get("hidden_size", 128)) // heads)
    return 2.0 * int(c.get("num_hidden_layers", 1)) * int(c.get("num_key_value_heads") or heads) \
        * head_dim * 4


def identity(p: Prepared, plain: EngineRecord) -> dict[str, Any]:
    """The engine as it ran: workbench/contracts/engine_identity.py's fields."""
    import torch
    import vllm

    eng = plain.engine
    cfg = getattr(eng.llm.llm_engine, "model_config", None)
    dtype = str(getattr(cfg, "dtype", eng.dtype)).removeprefix("torch.")
    cuda = torch.cuda.is_available()
    return {"framework": "vllm", "version": vllm.__version__,
            "device": torch.cuda.get_device_name(0) if cuda else machine_info().get("cpu", "CPU"),
            "tp": p.settings.tp, "dtype": dtype,
            "graphs": not bool(eng.engine_kwargs.get("enforce_eager")),
            "model": p.model.name, "method": p.settings.method,
            "drafter": p.drafter.name if p.drafter else "", "max_num_seqs": p.max_num_seqs,
            "max_model_len": p.settings.max_model_len}


def _problems(p: Prepared, model_dir: Path) -> list[Any]:
    from real.run.task_source import gcd_source

    s = p.settings
    if s.task is not None:
        return s.task.draw(POOL, s.seed)
    return gcd_source(model_dir, "flat").draw(POOL, s.seed)


def _cell_meta(p: Prepared, rec: EngineRecord, ident: dict, batch: int, context: int) -> dict:
    s = p.settings
    sd = rec.name != PLAIN
    return {"model": p.model.name, "policy": m.trace_policy(s.method if sd else None,
                                                            max(p.plan.draft_lens),
                                                            p.max_num_seqs),
            "drafter": p.drafter.name if sd and p.drafter else None, "prompts": batch,
            "samples": 1, "max_tokens": p.reserve, "seed": s.seed, "temperature": s.temperature,
            "task": s.task.name if s.task else "gcd (flat mix)", "machine": machine_info(),
            "engine": {**rec.engine.settings(), "tensor_parallel_size": s.tp, "identity": ident},
            "sweep": {"cell": cell_name(batch, context), "batch": batch, "context": context,
                      "method": s.method if sd else "none", "role": "sd" if sd else PLAIN,
                      "labels": rec.labels},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def run_sweep(s: SweepSettings, out: Path, say: Say = print) -> Path:
    """Prepare, start the engines, run every cell (each written when it finishes), write the
    summary; returns `out`. Raises SweepError before anything starts when the settings cannot
    run."""
    p = prepare(s)
    for note in p.drafter_notes:
        say(note)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    doc: dict[str, Any] = {"status": "starting", "plan": asdict(p.plan),
                           "settings": _settings_doc(s), "machine": machine_info(),
                           "model_dir": str(p.model.path.resolve()),
                           "drafter_dir": str(p.drafter.path.resolve()) if p.drafter else None,
                           "command": " ".join(sys.argv), "cells_done": [],
                           "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_sweep_doc(out, doc)
    records, took = start_engines(p, say)
    try:
        ident = identity(p, records[0])
        graphs = {rec.name: captured(rec.engine) for rec in records}
        sd = graphs[records[1].name]
        doc.update(identity=ident, engine_start_s=took, status="running",
                   graphs={"captured": graphs,
                           "cells": graph_rows(sd, p.plan.batches, p.plan.draft_lens)})
        write_sweep_doc(out, doc)
        say("CUDA graphs: " + "; ".join(
            f"{name} {g['mode']}, " + (f"sizes up to {g['max_tokens']} tokens" if g["sizes"]
                                       else "none captured (every step eager)")
            for name, g in graphs.items()))
        say(f"engine: {ident['framework']} {ident['version']} on {ident['device']}, TP{ident['tp']}"
            f", {ident['dtype']}, {'CUDA graphs' if ident['graphs'] else 'eager'}, "
            f"{s.method} ({p.plan.switch})")
        _sweep_cells(p, records, ident, doc, out, t0, say)
        doc["status"] = "finished"
    except BaseException as exc:
        doc["status"] = f"stopped: {type(exc).__name__}: {exc}"
        raise
    finally:
        doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
        write_sweep_doc(out, doc)
        for rec in records:
            rec.engine.close()
    return out


def _sweep_cells(p: Prepared, engines: list[EngineRecord], ident: dict, doc: dict, out: Path,
                 t0: float, say: Say) -> None:
    """Round by round over every cell (real/sweep/cells.py says why), each cell written whole
    after every round."""
    from real.rollout.vllm_env import running_on_cpu

    probe = ReferenceForward.light(p.model.path, seed=p.settings.seed) if running_on_cpu() \
        else None
    clock = ProbedClock(time.perf_counter(), probe)
    problems = _problems(p, p.model.path)
    tokenizer = engines[0].engine.tokenizer()
    cells = [new_cell(b, c, cell_prompts(tokenizer, problems, b, c, p.reserve), engines)
             for c in p.plan.contexts for b in p.plan.batches]
    sampling = Sampling(temperature=p.settings.temperature, max_tokens=p.reserve)
    rounds, done = p.plan.rounds, 0
    for r in range(rounds):
        for cell in (cells if r % 2 == 0 else cells[::-1]):
            spent = time.perf_counter() - t0
            eta = "" if not done else f", ETA {spent / done * (rounds * len(cells) - done):.0f}s"
            say(f"  round {r + 1}/{rounds}, batch {cell.batch}, context {cell.context} "
                f"({spent:.0f}s elapsed{eta})")
            ms = run_round(cell, r, p.plan.draft_lens, p.plan.block_steps, clock, sampling)
            say("    ms per step: " + ", ".join(f"{arm} {v:.1f}" for arm, v in ms.items()))
            done += 1
        figures = _write_cells(p, cells, clock, ident, out)
        doc.update(rounds_done=r + 1, cells_done=[cell_name(c.batch, c.context) for c in cells],
                   elapsed_s=round(time.perf_counter() - t0, 1))
        write_sweep_doc(out, doc)
        say(f"  round {r + 1}/{rounds} written: "
            + "; ".join(f"b{f.batch} c{f.context} K={f.k} x{f.speedup:.2f}" for f in figures))


def _write_cells(p: Prepared, cells: list[CellState], clock: ProbedClock, ident: dict,
                 out: Path) -> list[CellFigure]:
    """Every cell as it stands (each written whole), then the summary; its figures."""
    figures = []
    for cell in cells:
        traces = cell_traces(cell, clock.samples,
                             lambda rec: _cell_meta(p, rec, ident, cell.batch, cell.context))
        figs = cell_figures(SweepCell(cell.batch, cell.context, out, traces))
        write_cell(out, cell.batch, cell.context, traces,
                   {"figures": [asdict(f) for f in figs], "rounds": len(cell.windows),
                    "prompt_tokens": [len(x) for x in cell.prompts]})
        figures += figs
    write_summary(out, figures, f"Engine sweep: {ident['model']}, {p.settings.method}")
    return figures


def _settings_doc(s: SweepSettings) -> dict[str, Any]:
    d = asdict(replace(s, task=None))
    d["task"] = s.task.name if s.task else None
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
