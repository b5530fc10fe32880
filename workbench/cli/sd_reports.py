"""`tlt gpu-check`'s parts on SD by batch and on the engine releases' mechanisms: the engine
constants' joint fit on their declared figures, every public SD-by-batch figure beside its
prediction (traces/published/sd-by-batch.yaml), and the three goals of pricing the engine's release
(workbench/calibrate/published/sd_mechanisms.py): each public sweep's crossover, the held-out
speedups at batch 32-256, and every RL rollout's longer drafts against its shortest."""

from __future__ import annotations

from typing import Optional

import typer

from workbench.report.tables import format_table


def _shown(path: str) -> str:
    """A shipped file repo-relative (an output must not name this machine's paths)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    p = Path(path).resolve()
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(path)


def shipped_constants():
    """The engine constants the profiles use."""
    from workbench.calibrate.database.engine_versions import HostCosts
    from workbench.calibrate.database.profile import (
        DRAFT_OVERHEAD_EXPONENT,
        PROFILE_OVERHEADS,
        SD_HOST_S_PER_SEQ,
    )
    from workbench.calibrate.published.sd_batch import EngineConstants

    return EngineConstants(PROFILE_OVERHEADS, DRAFT_OVERHEAD_EXPONENT, SD_HOST_S_PER_SEQ,
                           HostCosts())


def constants_line(fit, used) -> str:
    """The engine constants' joint fit beside what the profiles use."""
    o, p, h, u = fit.overheads, used.overheads, fit.host, used.host
    return (
        "Engine constants outside the kernels, jointly fitted, each on its declared figures: at "
        f"Table D's engine {1e3 * o.step_s:.3f} ms a draft step and {1e3 * o.tree_pass_s:.2f} ms "
        f"a tree's pass (Table D, the depth x TV grid), exponent {fit.overhead_exponent:.3f} "
        f"(Table E's SD speedups), a learned drafter's pass {1e3 * o.eagle_pass_s:.2f} ms and SD "
        f"host work {1e3 * fit.sd_host_s_per_seq:.4f} ms per sequence per pass (sd-by-batch.yaml's "
        f"`fit` series), an eager launch {1e3 * h.launch_s_per_layer:.3f} ms per layer "
        "(engine-versions.yaml's eager pair), vLLM's host work "
        f"{1e3 * h.host_step_vllm_s:.4f} ms per sequence per draft step (the RL series that "
        f"`fits` it; SGLang: {1e3 * h.host_step_sglang_s:.4f}, no figure decides it); profiles "
        f"use {1e3 * p.step_s:.3f}, {1e3 * p.tree_pass_s:.2f}, {used.overhead_exponent}, "
        f"{1e3 * p.eagle_pass_s:.2f}, {1e3 * used.sd_host_s_per_seq:.4f}, "
        f"{1e3 * u.launch_s_per_layer:.3f}, {1e3 * u.host_step_vllm_s:.4f}")


def sd_by_batch_report(context: Optional[float] = None) -> None:
    """Every public SD-by-batch figure beside its prediction, per series its median error and
    crossover (`context` overrides the series' stated one: a sensitivity)."""
    from workbench.calibrate.published import sd_batch as sb
    from workbench.calibrate.published.sd_mechanisms import fit_engine_constants
    from workbench.calibrate.published.sd_series import load_sd_published

    pub = load_sd_published()
    used = shipped_constants()
    typer.echo(f"SD's speedup by batch ({_shown(pub.path)}):")
    typer.echo(constants_line(fit_engine_constants(pub), used))
    checks = sb.series_checks(pub, used, context=context)
    typer.echo(format_table(
        [[c.series, c.role, str(c.batch), c.strategy, c.measure, f"{c.published:.3f}",
          f"{c.predicted:.3f}", f"{c.error_pct:+.1f}%"] for c in checks],
        ["series", "role", "batch", "strategy", "measure", "published", "predicted", "error"]))
    for s in (s for s in pub.series if s.role != "context"):
        mine = [c for c in checks if c.series == s.name]
        typer.echo(f"{s.name} ({s.role}): median |error| {sb.median_abs_error(mine):.1f}%")
    ctx = sb.series_checks(pub, used, roles=("context",), context=context)
    ctx += [sb.tp_ratio_check(s, used) for s in pub.by_role("context")
            if len({p.tp for p in s.points}) > 1]
    ctx += sb.specdecode_checks(pub, used)
    typer.echo("context (not scored: what each lacks is in the file):")
    typer.echo(format_table(
        [[c.series, str(c.batch), c.strategy, f"TP{c.tp}", c.measure, f"{c.published:.3f}",
          f"{c.predicted:.3f}", f"{c.error_pct:+.1f}%"] for c in ctx],
        ["series", "batch", "strategy", "tp", "measure", "published", "predicted", "error"]))


def sd_mechanisms_report() -> None:
    """The engine releases' mechanisms against the public figures: the eager pair, each sweep's
    crossover (goal 30%), the held-out speedups at batch 32-256 (goal 15%, median) and each RL
    rollout's longer drafts against its shortest (goal 20%)."""
    from workbench.calibrate.database.engine_versions import load_catalog
    from workbench.calibrate.published import sd_batch as sb
    from workbench.calibrate.published import sd_length as sl
    from workbench.calibrate.published import sd_mechanisms as sm
    from workbench.calibrate.published.sd_series import load_sd_published

    used, cat = shipped_constants(), load_catalog()
    typer.echo(f"Engine releases' mechanisms ({_shown(cat.path)}):")
    for p in cat.eager_pairs:
        pub, pred = sm.eager_ratio(p, used)
        typer.echo(f"{p.name} ({p.role}): an SD pass without CUDA graphs over one with them, "
                   f"published {pub:.3f}, predicted {pred:.3f}")
    pub = load_sd_published()
    series = list(pub.series) + sl.length_series()
    xs = sm.crossover_checks(series, used)
    typer.echo("Where SD stops paying, each public sweep (goal: within 30% of the published):")
    typer.echo(format_table(
        [[x.series, x.role, str(x.published or f"none to {x.largest}"), str(x.predicted or "-"),
          "-" if x.error_pct is None else f"{x.error_pct:+.0f}%", "met" if x.met else "missed"]
         for x in xs],
        ["series", "role", "published", "predicted", "error", "goal"]))
    window = sm.batch_window_checks(sb.series_checks(pub, used) + sl.length_checks(
        [s for s in sl.length_series() if not s.rl_rollout], used))
    typer.echo(f"held-out speedups at batch 32-256: {len(window)} figures, median |error| "
               f"{sb.median_abs_error(window):.1f}% (goal 15%): " + ", ".join(
                   f"{c.series} b{c.batch} {c.strategy} {c.error_pct:+.1f}%" for c in window))
    rs = sm.ratio_checks(series, used)
    typer.echo("RL rollouts by draft length: a longer draft's speedup over the shortest's "
               "(goal: within 20%):")
    typer.echo(format_table(
        [[r.series, r.role, str(r.batch), f"{r.strategy} / {r.short}", f"{r.accepted:.2f}",
          f"{r.published:.3f}", f"{r.predicted:.3f}", f"{r.error_pct:+.1f}%",
          "met" if r.met else "missed"] for r in rs],
        ["series", "role", "batch", "drafts", "tokens/pass", "published", "predicted", "error",
         "goal"]))
