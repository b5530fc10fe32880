"""`tlt gpu-check`: the measured-database profiles against published figures they never saw
(workbench/calibrate/published/database_check.py): Table E on H100, A100 and B200, Table C on H100;
with
`--measured FILE`, a GPU check's own measurements
(`make gpu-check`) beside them (workbench/cli/gpu_measured.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from workbench.cli.apps import app
from workbench.report.tables import format_table


def _rows(checks) -> list[list[str]]:
    return [[c.table, c.case, f"{c.published:.2f}", f"{c.predicted:.2f}", f"{c.error_pct:+.1f}%",
             c.note]
            for c in checks]


# The options whose help runs over several lines, out of the signature to keep the command short.
_FRAMEWORK_OPTION = typer.Option("sglang",
                                 help="The engine whose measured rows "
                                      "are used (the paper ran SGLang).")
_RAW_OPTION = typer.Option(False,
                           help="Also show the predictions without the "
                                "draft-step overhead (database only).")
_CONTEXT_OPTION = typer.Option(2048, min=1,
                               help="The benchmarks' context in tokens "
                                    "(not published; a sensitivity).")
_MEASURED_OPTION = typer.Option(None,
                                help="A GPU check's JSON (make gpu-check): set its "
                                     "measured engine costs, draft steps and training "
                                     "throughput beside the database, the overhead "
                                     "model and the paper, instead of the tables.")
_GPU_OPTION = typer.Option(None,
                           help="--measured: the database GPU to compare with "
                                "(default: the measured GPU's; h100 for a CPU run).")
_PROFILE_OUT_OPTION = typer.Option(None,
                                   help="--measured: also write the profile fitted "
                                        "to the measured engine points (a new, "
                                        "declared profile; the shipped ones stay).")
_SD_CONTEXT_OPTION = typer.Option(
    None, min=1, help="Context of the public SD-by-batch series "
                      "(default: each series' stated one; a sensitivity).")


@app.command("gpu-check")
def gpu_check(
    framework: str = _FRAMEWORK_OPTION,
    raw: bool = _RAW_OPTION,
    context: int = _CONTEXT_OPTION,
    measured: Optional[Path] = _MEASURED_OPTION,
    gpu: Optional[str] = _GPU_OPTION,
    profile_out: Optional[Path] = _PROFILE_OUT_OPTION,
    sd_context: Optional[int] = _SD_CONTEXT_OPTION,
) -> None:
    """Predict the TLT paper's Table E (Qwen2.5-7B, batch 1, with and without SD, every GPU the
    database covers), Table C (Qwen2.5-32B TP4 SD speedup vs batch) and the public SD speedups by
    batch (SGLang, vLLM) from measured-database profiles; print each error. With --measured,
    compare a GPU check's measurements instead."""
    if measured is not None:
        from workbench.cli.gpu_measured import measured_report

        measured_report(measured, gpu, framework, profile_out)
        return
    if gpu is not None or profile_out is not None:
        from workbench.cli.common import fail
        from workbench.contracts.schema import ConfigError

        fail(ConfigError("--gpu/--profile-out", "<option>", "without --measured",
                         "--measured FILE with them"))
    from workbench.calibrate.published.database_check import (
        TABLE_E_ACCEPTED,
        fit_overhead_exponent,
        median_abs_error,
        overhead_scaling,
        table_c,
        table_e,
        table_e_engines,
    )
    from workbench.calibrate.database.aiconfigurator import package_version
    from workbench.calibrate.database.profile import DRAFT_OVERHEAD_EXPONENT, NO_OVERHEADS

    header = ["table", "case", "published", "predicted", "error", "note"]
    typer.echo(f"aiconfigurator-core {package_version()}, {framework}; context {context} tokens "
               "(assumed: not published). " + _overheads_line(framework, context))
    e = table_e(framework, context=context)
    c, acc = table_c(framework, context=context)
    typer.echo(format_table(_rows(e) + _rows(c), header))
    no_sd = [x for x in e if "no SD" in x.case]
    sd = [x for x in e if "no SD" not in x.case]
    typer.echo(f"Table E without SD: max |error| {max(abs(x.error_pct) for x in no_sd):.1f}% "
               f"(goal 15%); with SD (E[L] {TABLE_E_ACCEPTED}: Table G/H's RL-adapted EAGLE "
               f"drafter at 8_4_48): max |error| {max(abs(x.error_pct) for x in sd):.1f}% "
               "(goal 20%; its speedups fit the overhead's exponent below)")
    typer.echo(f"Table C: median |error| {median_abs_error(c):.1f}% (goal 15%), max "
               f"{max(abs(x.error_pct) for x in c):.1f}%; acceptance fitted to Tables D "
               f"and depth x TV accepted lengths only: alpha {acc.eagle_alpha_fresh:.3f}, "
               f"shape {acc.eagle_shape:.3f}, tree width gain {acc.tree_width_gain:.3f}")
    engines = table_e_engines(framework)
    fitted, _ = fit_overhead_exponent(engines, context)
    scaled = overhead_scaling(engines, (0.0, DRAFT_OVERHEAD_EXPONENT, 1.0), context)
    typer.echo("Draft overheads vs the target's step (Table E's SD speedups, "
               f"E[L] {TABLE_E_ACCEPTED}; Table D's engine's x (step / Table D's) ** exponent): "
               f"best exponent {fitted:.3f} (profiles use {DRAFT_OVERHEAD_EXPONENT})")
    typer.echo(format_table([[f"{x.exponent:g}", x.gpu, f"{1e3 * x.target_step_s:.2f}",
                              f"{1e3 * x.overhead_s:.3f}", f"{1e3 * x.pass_s:.3f}",
                              f"{x.published:.2f}", f"{x.predicted:.2f}", f"{x.error_pct:+.1f}%"]
                             for x in scaled],
                            ["exponent", "GPU", "target step ms", "step overhead ms",
                             "pass overhead ms", "published", "predicted", "error"]))
    if framework == "sglang":
        from workbench.cli.sd_lengths import sd_by_length_report
        from workbench.cli.sd_reports import sd_by_batch_report, sd_mechanisms_report

        sd_by_batch_report(sd_context)
        sd_by_length_report()
        sd_mechanisms_report()
    if raw:
        e0 = table_e(framework, overheads=NO_OVERHEADS, context=context)
        c0, _ = table_c(framework, overheads=NO_OVERHEADS, context=context)
        typer.echo("database only (no draft overheads):")
        typer.echo(format_table(_rows([x for x in e0 if "no SD" not in x.case]) + _rows(c0),
                                header))
        typer.echo(f"Table C database only: median |error| {median_abs_error(c0):.1f}%")


def _overheads_line(framework: str, context: float) -> str:
    from workbench.calibrate.database.profile import PROFILE_OVERHEADS
    from workbench.calibrate.published.database_check import (
        draft_overhead_from_table_d,
        fit_draft_overheads,
    )

    d = draft_overhead_from_table_d(framework, context)
    o = fit_draft_overheads(framework, context=context)
    return ("Draft overheads on Table D's engine from Table D and the depth x TV grid's depth-8 "
            f"rows: {1e3 * o.step_s:.3f} ms a draft step, {1e3 * o.tree_pass_s:.2f} ms a tree's "
            f"pass beside the learned drafter's {1e3 * o.eagle_pass_s:.2f} (profiles use "
            f"{1e3 * PROFILE_OVERHEADS.step_s:.3f}, {1e3 * PROFILE_OVERHEADS.tree_pass_s:.2f}); "
            "per Table D row, what is left per step: "
            + ", ".join(f"{1e3 * v:.3f}" for v in d) + " ms")


@app.command("gpu-presets")
def gpu_presets() -> None:
    """Regenerate the shipped measured-database profiles.

    workbench/contracts/presets/profiles/*-sglang.yaml."""
    from workbench.calibrate.database.catalog import PRESET_CASES, preset_profile
    from workbench.contracts.profile import PRESET_DIR
    from workbench.contracts.schema import save

    # all derived before the first file is written
    profiles = [preset_profile(c) for c in PRESET_CASES]
    for p in profiles:
        save(p, PRESET_DIR / f"{p.name}.yaml")
        typer.echo(f"wrote {PRESET_DIR / f'{p.name}.yaml'} (form vs "
                   f"database: median |error| {p.fit_error_pct}%)")
