"""`tlt gpu-check --measured FILE`: a GPU check's measurements (`make gpu-check`, real/gpu_check/)
beside the measured database, its draft-step overhead model and the TLT paper
(workbench/calibrate/gpu_check/comparison.py), and what they would change in the simulator's
inputs."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Optional

import typer

from workbench.cli.common import fail
from workbench.contracts.schema import ConfigError
from workbench.report.tables import format_table


def _ms(v: float) -> str:
    return f"{1e3 * v:.3f}" if math.isfinite(v) else "-"


def _num(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _x(v: float) -> str:
    return f"{v:.3g}x" if math.isfinite(v) else "-"


def _engine(c) -> None:
    for e in c.engine:
        p = e.profile
        typer.echo(
            f"\n{e.arch} TP{e.tp} against {p.name} "
            f"({p.cluster.label if p.cluster else '?'}): measured over "
            f"the database's step, and over the profile's prediction (what the simulator sees)"
        )
        typer.echo(
            format_table(
                [[op, mode, str(n), _x(db), _x(pr)] for op, mode, n, db, pr in e.medians()],
                ["op", "mode", "points", "median measured/database", "median measured/profile"],
            )
        )
        mode = "graph" if any(q.mode == "graph" for q in e.points) else "eager"
        rows = [
            [
                q.op,
                str(q.batch),
                str(q.context),
                str(q.tokens),
                str(q.topk),
                _ms(q.measured_s),
                _ms(q.database_s),
                _ms(q.profile_s),
                _x(q.vs_database),
                _x(q.vs_profile),
            ]
            for q in e.points
            if q.mode == mode
        ]
        typer.echo(f"per point ({mode}):")
        typer.echo(
            format_table(
                rows,
                [
                    "op",
                    "B",
                    "C",
                    "T",
                    "top-k",
                    "measured ms",
                    "database ms",
                    "profile ms",
                    "meas/db",
                    "meas/profile",
                ],
            )
        )


def _draft(c) -> None:
    rows = []
    for e in c.engine:
        by = {}
        for q in e.points:
            if q.op == "drafter":
                by.setdefault((q.batch, q.topk), {})[q.mode] = q
        for (b, k), m in sorted(by.items()):
            g, ea = m.get("graph"), m.get("eager")
            any_ = g or ea
            rows.append(
                [
                    f"{e.arch} TP{e.tp}",
                    f"{b} x {k}",
                    _ms(g.measured_s) if g else "-",
                    _ms(ea.measured_s) if ea else "-",
                    _ms(ea.measured_s - g.measured_s) if g and ea else "-",
                    _ms(any_.database_s),
                    _ms(e.overhead_s),
                    _ms(any_.profile_s),
                ]
            )
    if not rows:
        return
    typer.echo(
        "\nEAGLE draft step: measured (graph replay, eager; eager - graph is the launch cost a "
        "step without graphs pays) beside the database's drafter kernels, the overhead the "
        "profiles add per draft step (draft_overhead_s: engine work outside the kernels, not in "
        "the database) and the profile's step"
    )
    typer.echo(
        format_table(
            rows,
            [
                "engine",
                "B x top-k",
                "graph ms",
                "eager ms",
                "eager - graph",
                "database ms",
                "overhead model ms",
                "profile ms",
            ],
        )
    )


def _training(c) -> None:
    if not c.training:
        return
    typer.echo("\nTraining throughput")
    typer.echo(
        format_table(
            [
                [
                    t.what,
                    _num(t.measured) + ("x" if t.unit == "x" else f" {t.unit}"),
                    _num(t.reference),
                    _x(t.ratio),
                    t.reference_is,
                ]
                for t in c.training
            ],
            ["what", "measured", "reference", "measured/reference", "reference is"],
        )
    )


def _changes(c) -> None:
    if not c.changes:
        return
    arch, tp = c.fitted_on
    shipped = next(e.profile.name for e in c.engine if (e.arch, e.tp) == (arch, tp))
    typer.echo(
        f"\nWhat the measurement would change: a profile fitted to {arch} TP{tp}'s measured "
        f"engine points (workbench/calibrate/captures/operators.py; base {shipped} for acceptance "
        f"and "
        f"learning; the draft-step "
        f"overhead model kept on top) against {shipped}"
    )
    fmt = lambda v, u: f"{v:.4g}" if u != "s" else f"{1e3 * v:.4g} ms"
    typer.echo(
        format_table(
            [
                [
                    x.name,
                    fmt(x.shipped, x.unit),
                    fmt(x.measured, x.unit),
                    f"{x.change_pct:+.1f}%" if math.isfinite(x.change_pct) else "-",
                ]
                for x in c.changes
            ],
            ["input", "now", "measured", "change"],
        )
    )
    steps = [x.change_pct for x in c.changes if " step" in x.name or x.name.startswith("verify")]
    typer.echo(
        f"median change of the steps above: {statistics.median(steps):+.1f}%. The shipped "
        f"profiles are unchanged; --profile-out FILE writes the fitted profile (fitted_on "
        f"names this run) to use with "
        f"--profile FILE."
    )


def _moe(c) -> None:
    """One MoE layer by tokens routed against the simulator's expert-read form."""
    from workbench.calibrate.gpu_check.moe_layers import MEMORY_BOUND_TOKENS, moe_layer_checks

    checks = moe_layer_checks(c.check)
    if not checks:
        return
    typer.echo(
        "\nMoE layers (workbench/calibrate/gpu_check/moe_layers.py): the time against floor + "
        "experts touched (uniform-routing formula) x expert bytes / the run's bandwidth, the floor "
        f"fitted at 1 token, predicted at 2-{MEMORY_BOUND_TOKENS} tokens"
    )
    rows = [[m.label, f"{m.experts}/top-{m.top_k}", f"{m.floor_ms:.3f}",
             f"{m.touched_error_pct():.1f}%", f"{m.time_error_pct():.1f}%",
             f"{m.ratio_error_pct():.1f}%",
             ", ".join(f"B{r.batch}K{r.drafts} {r.measured:.2f}/{r.predicted:.2f}"
                       for r in m.ratios if r.drafts == 3)]
            for m in checks]
    typer.echo(format_table(rows, ["model", "experts", "floor ms", "max touched err",
                                   "median time err", "median ratio err",
                                   "verify/decode K3: measured/predicted"]))


def measured_report(
    measured: Path, gpu: Optional[str], framework: str, profile_out: Optional[Path]
) -> None:
    from workbench.calibrate.gpu_check.check_file import load_check
    from workbench.calibrate.gpu_check.comparison import compare
    from workbench.contracts.schema import save

    if profile_out is not None and profile_out.suffix not in (".yaml", ".yml", ".json"):
        fail(
            ConfigError(
                "--profile-out", "<file>", str(profile_out), "a .yaml, .yml or .json file name"
            )
        )
    try:
        c = compare(load_check(measured), gpu, framework)
    except (ConfigError, ValueError) as exc:
        fail(exc)
    if profile_out is not None and c.fitted is None:
        fail(
            ConfigError(
                str(measured),
                "sections.engine-*.runs",
                "no decode, verify and prefill points",
                "a check whose engine section finished (re-run `make gpu-check`), "
                "or leave out --profile-out",
            )
        )
    d, m = c.check.doc, c.check.machine
    typer.echo(
        f"{measured}: {'quick' if d.get('quick') else 'full'} GPU check on "
        f"{m.get('gpu') or 'a CPU'} ({d.get('started_at')}, torch {m.get('torch')}); "
        f"compared with the measured database's {c.gpu}, "
        f"{c.framework}; sections run: {', '.join(d.get('sections') or {}) or 'none'}"
    )
    for note in c.notes:
        typer.echo(f"note: {note}")
    _engine(c)
    _draft(c)
    _training(c)
    _moe(c)
    _changes(c)
    for s in c.skipped:
        typer.echo(f"not compared: {s}")
    if profile_out is not None:
        save(c.fitted, profile_out)
        typer.echo(
            f"wrote {profile_out}: profile {c.fitted.name!r}, fitted_on {list(c.fitted.fitted_on)}"
        )
