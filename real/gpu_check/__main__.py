"""`python -m real.gpu_check [--out DIR] [--quick] [--device auto|cpu|cuda] [--budget-s S]
[--only NAMES]`

(`make gpu-check` runs it.) Environment: GPU_CHECK_QUICK=1 (tiny shapes), GPU_CHECK_OUT (the
output folder, default traces/measured), GPU_CHECK_BUDGET_S (the whole run's budget). Writes
gpu-check-<gpu>-<date>.json and .md in the output folder after every section and prints one
progress line per step, flushed. Exit 0 once the files are written (a section's failure is in
them), 2 on a bad option.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

from real.gpu_check.plan import Plan, Section, full_plan, quick_plan

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_MODEL = ROOT / "traces" / "reference" / "model"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m real.gpu_check", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: $GPU_CHECK_OUT, else traces/measured)",
    )
    ap.add_argument(
        "--quick", action="store_true", help="tiny shapes (also GPU_CHECK_QUICK=1; always on a CPU)"
    )
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="the whole run's time budget in seconds (default: $GPU_CHECK_BUDGET_S, else 300 on a "
        "GPU, 120 quick)",
    )
    ap.add_argument(
        "--only", default=None, help="comma-separated section names to run (default: all)"
    )
    ap.add_argument(
        "--eager-only",
        action="store_true",
        help="time engine points without CUDA graphs (a failed capture can break the rest of the "
             "process)",
    )
    ap.add_argument(
        "--model",
        type=Path,
        default=REFERENCE_MODEL,
        help="the tiny model the correctness check uses",
    )
    return ap


def make_plan(quick: bool, budget_s: float | None, only: str | None) -> Plan:
    plan = quick_plan() if quick else full_plan()
    if budget_s is not None:
        plan = Plan(
            plan.quick, budget_s, plan.repeats, plan.warmup, plan.check_rounds, plan.sections
        )
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        known = [s.name for s in plan.sections]
        bad = [n for n in names if n not in known]
        if bad:
            raise ValueError(
                f"--only: no section {bad[0]!r} in the {'quick' if quick else 'full'} plan; "
                f"give some of {', '.join(known)}"
            )
        plan = Plan(
            plan.quick,
            plan.budget_s,
            plan.repeats,
            plan.warmup,
            plan.check_rounds,
            tuple(s for s in plan.sections if s.name in names),
        )
    return plan


def work(sec: Section, plan: Plan, device: str, model: Path, say, sweep_dir: Path):
    """The callable `Record.run` gives a section's budget, entry and saver."""
    from real.gpu_check import attention, correctness, engine, moe, sweep, training

    if sec.kind == "correctness":
        return lambda budget, entry, save: entry.update(correctness.run(model, device))
    if sec.kind == "attention":
        return lambda budget, entry, save: attention.run(
            sec.attention, device, budget, entry, save
        )
    if sec.kind == "grpo":
        return lambda budget, entry, save: training.grpo(sec.grpo, device, budget, entry, save)
    if sec.kind == "sweep":
        return lambda budget, entry, save: sweep.run(
            sec.sweep, device, budget, entry, save, say, model, sweep_dir
        )
    if sec.kind == "drafter":
        return lambda budget, entry, save: training.drafter(
            sec.drafter, device, budget, entry, save
        )
    if sec.kind == "moe":
        return lambda budget, entry, save: moe.run(sec.moe, device, budget, entry, save)
    return lambda budget, entry, save: engine.run_section(
        sec, plan, device, budget, entry, save, say
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    t0 = time.monotonic()

    def say(line: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {line}", flush=True)

    env_budget = os.environ.get("GPU_CHECK_BUDGET_S")
    try:
        budget = (
            args.budget_s
            if args.budget_s is not None
            else (float(env_budget) if env_budget else None)
        )
    except ValueError:
        print(
            f"error: GPU_CHECK_BUDGET_S={env_budget!r}: give a number of seconds", file=sys.stderr
        )
        return 2
    import torch
    from transformers.utils import logging as hf_logging

    from real.gpu_check.machine import facts
    from real.gpu_check.record import Record
    from real.gpu_check.summary import headline

    hf_logging.disable_progress_bar()  # a bar per model load would bury the progress lines
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        print(
            f"error: --device cuda: torch {torch.__version__} sees no CUDA device here",
            file=sys.stderr,
        )
        return 2
    device = "cuda" if args.device == "cuda" or (args.device == "auto" and cuda) else "cpu"
    if (
        device == "cpu"
    ):  # tiny shapes on a shared CPU: one thread is fastest and steadiest (real/profiler too)
        torch.set_num_threads(1)
    quick = args.quick or os.environ.get("GPU_CHECK_QUICK", "") not in ("", "0") or device == "cpu"
    try:
        plan = dataclasses.replace(make_plan(quick, budget, args.only), eager_only=args.eager_only)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out or Path(os.environ.get("GPU_CHECK_OUT") or ROOT / "traces" / "measured")
    machine = facts(device)
    say(
        f"device {device} ({machine.get('gpu') or machine['cpu']}), torch {machine['torch']}, "
        f"{'quick' if plan.quick else 'full'} plan, budget {plan.budget_s:.0f} s"
    )
    rec = Record(out, plan, machine, say)
    rec.save()
    for sec in plan.sections:
        sweep_dir = rec.json_path.with_name(rec.json_path.stem + "-sweep")
        rec.run(sec, work(sec, plan, device, args.model, say, sweep_dir))
    rec.finish()
    for line in headline(rec.doc):
        say(line)
    status = [f"{n} {s['status']}" for n, s in rec.doc["sections"].items()]
    say(f"done in {rec.elapsed():.0f} s: {', '.join(status)}")
    print(rec.json_path)
    print(rec.md_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
