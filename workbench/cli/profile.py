"""`tlt profile`: measure a model's operators on this machine's CPU or GPU and fit a Profile, or
(`--backend aiconfigurator`) derive one for any GPU from NVIDIA's measured database
(workbench/calibrate/database/profile.py).

The measuring is `python -m real.profiler` (real/profiler/, which also runs alone on a bare GPU
machine); the fit is workbench/calibrate/captures/operators.py. `--measurements` fits a file
measured
elsewhere instead of measuring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from workbench.calibrate.captures.operators import OperatorFit, fit_operators, fit_report
from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.contracts.fileio import write_json
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError, save
from workbench.report.tables import format_table


def default_base(device: str, arch: str, tp: int) -> str:
    """What operators cannot measure comes from a profile of the same kind: the CPU engine's, or
    the H100 profile of this model and TP (the paper-fitted one) when there is one."""
    from workbench.calibrate.database.catalog import default_base_profile

    return "cpu-tiny" if device == "cpu" else default_base_profile(arch, tp)


def outputs(out: Path) -> tuple[Path, Path]:
    """The raw measurements and the fit error, beside the profile."""
    return out.with_name(out.stem + ".measurements.parquet"), out.with_name(out.stem + ".fit.json")


def _measure(arch: str, device: str, tp: int, dtype: Optional[str], grid: Optional[str],
             repeats: Optional[int], passes: Optional[int], threads: Optional[int], seed: int,
             check_rounds: int):
    from real.profiler.settings import make_settings

    try:
        st = make_settings(arch, device, tp, dtype, grid, repeats, seed=seed, threads=threads,
                           check_rounds=check_rounds, passes=passes)
    except ConfigError as exc:
        fail(exc)
    try:
        from real.profiler.measure import measure
    except ImportError as exc:
        fail(ValueError(f"--device {device}: measuring needs torch ({exc}); "
                        "or fit a file measured elsewhere with --measurements"))

    def progress(i: int, n: int, line: str) -> None:
        typer.echo(f"[{i}/{n}] {line}", err=True)

    try:
        return measure(st, progress=progress)
    except RuntimeError as exc:
        fail(exc)


def _print(fit: OperatorFit) -> None:
    p = fit.profile
    d, dr = p.decode, p.drafter
    typer.echo(f"profile {p.name!r}: overhead {1e3 * d.overhead_s:.3f} ms, per seq "
               f"{1e6 * d.per_seq_s:.2f} us, weights {1e3 * d.weights_s:.3f} ms, compute "
               f"{1e6 * d.compute_s_per_token:.2f} us/token, kv {1e9 * d.kv_s_per_token:.2f} "
               f"ns/seq/token, prefill {1e6 * d.prefill_s_per_token:.2f} us/token; drafter "
               f"{1e3 * dr.eagle_step_s:.3f} ms + {1e6 * dr.eagle_s_per_seq:.2f} "
               f"us/candidate; train {1e6 * p.phases.train_gpu_s_per_token:.2f} us/token")
    rows = [[q.op, str(q.batch), str(q.context), str(q.tokens), str(q.topk),
             f"{1e3 * q.measured_s:.3f}", f"{1e3 * q.predicted_s:.3f}",
             f"{q.error_pct:+.1f}%"] for q in fit.points]
    typer.echo(format_table(rows, ["op", "B", "C", "T", "top-k", "measured ms", "fitted ms",
                                   "error"]))
    typer.echo(f"fit error: median |error| {fit.median_abs_error_pct:.2f}%, "
               f"max {fit.max_abs_error_pct:.2f}% over {len(fit.points)} points")
    if fit.eager:
        ratio = sorted(
            e.measured_s / g.measured_s for e, g in zip(fit.eager, fit.points) if g.op != "prefill")
        typer.echo(f"eager / CUDA graph step time: median {ratio[len(ratio) // 2]:.2f}x "
                   f"(from {ratio[0]:.2f}x to {ratio[-1]:.2f}x)")
    for r in fit.whole.itertuples():
        typer.echo(f"whole-model check, decode B={r.batch} C={r.context} "
                   f"{r.mode}: sum over layers {1e3 * r.sum_s:.3f} ms, whole "
                   f"model {1e3 * r.whole_s:.3f} ms ({r.error_pct:+.1f}%)")


def _from_database(out: Path, arch: Optional[str], gpu: Optional[str], tp: int, framework: str,
                   version: Optional[str], base: Optional[str], name: Optional[str],
                   ep: Optional[int] = None) -> None:
    """`--backend aiconfigurator`: every cost from
    NVIDIA's measured operator database, no GPU needed."""
    from workbench.calibrate.database.aiconfigurator import gpu_names
    from workbench.calibrate.database.profile import derive_profile

    if arch is None or gpu is None:
        fail(ConfigError("--backend aiconfigurator", "--arch" if arch is None else "--gpu",
                         "<missing>",
                         f"--arch NAME|config.json and --gpu ({', '.join(gpu_names())})"))
    try:
        base_prof = load_profile(base or default_base("cuda", arch, tp))
        fit = derive_profile(arch, gpu, tp, framework, base_prof, name or out.stem, version or "",
                             ep=ep)
    except (ConfigError, ValueError) as exc:
        fail(exc)
    p = fit.profile
    save(p, out)
    d, dr = p.decode, p.drafter
    typer.echo(f"profile {p.name!r} ({p.cluster.label}): overhead "
               f"{1e3 * d.overhead_s:.3f} ms, per seq {1e6 * d.per_seq_s:.2f} us, weights "
               f"{1e3 * d.weights_s:.3f} ms, compute {1e6 * d.compute_s_per_token:.2f} "
               f"us/token, overlap {d.overlap:.2f}, kv {1e9 * d.kv_s_per_token:.2f} "
               f"ns/seq/token, prefill {1e6 * d.prefill_s_per_token:.2f} us/token; "
               f"drafter {1e3 * dr.eagle_step_s:.3f} ms + {1e6 * dr.eagle_s_per_seq:.2f} "
               f"us/candidate; train {1e6 * p.phases.train_gpu_s_per_token:.1f} "
               f"GPU-us/token; power {p.power.decode_w:.0f} W decoding, "
               f"{p.power.train_w:.0f} W training, {p.power.idle_w:.0f} W idle")
    if d.experts is not None:
        e = d.experts
        typer.echo(f"routed experts: {e.count}, top-{e.per_token}, all read once "
                   f"{1e3 * e.weights_s:.3f} ms (a pass reads the share its tokens touch)")
    typer.echo(f"form vs database: median |error| {fit.median_abs_error_pct:.1f}%, "
               f"max {fit.max_abs_error_pct:.1f}% over {len(fit.errors_pct)} steps")
    typer.echo(f"source: {p.source}")
    typer.echo(f"wrote {out}")


def _backend(backend: str, gpu: Optional[str], framework: Optional[str], arch: Optional[str],
             device: str, grid: Optional[str], measurements: Optional[Path]) -> str:
    """The backend the options ask for: --gpu or --framework name the measured database (a GPU's
    costs are never timed on this machine's CPU); torch with them is refused with the fix."""
    if backend not in ("auto", "torch", "aiconfigurator"):
        fail(ConfigError("--backend", "<option>", backend, "auto, torch or aiconfigurator"))
    database = gpu is not None or framework is not None
    if backend == "torch" and database:
        given = "--gpu" if gpu is not None else "--framework"
        fail(ConfigError("--backend torch", given, gpu or framework,
                         f"either drop {given} (torch times this machine's --device), "
                         f"or drop --backend torch: {given} selects NVIDIA's measured "
                         "database (--backend aiconfigurator, seconds, no GPU)"))
    if backend == "auto":
        backend = "aiconfigurator" if database else "torch"
    if backend == "torch" and device == "cpu" and measurements is None and grid is None and arch:
        typer.echo(f"timing {arch}'s operators with torch on this machine's CPU, layer by layer "
                   "(minutes for a 7B model; progress below). For a GPU's costs without one: "
                   "--gpu h100 (NVIDIA's measured database, seconds).", err=True)
    return backend


# The options whose help runs over several lines, out of the signature to keep the command short.
_OUT_OPTION = typer.Option(...,
                           help="The fitted profile (.yaml, .yml or .json); with --backend "
                                "torch the raw measurements (OUT.measurements.parquet) and "
                                "the fit error (OUT.fit.json) beside it.")
_ARCH_OPTION = typer.Option(None,
                            help="Architecture preset (qwen2.5-7b, "
                                 "r1-distill-qwen-7b, qwen2.5-32b, llama3.3-70b, "
                                 "qwen3-30b-a3b, gemma-2-9b, tiny-gcd, ...: `tlt presets`) or "
                                 "a Hugging Face config.json.")
_EP_OPTION = typer.Option(None, min=1,
                          help="--backend aiconfigurator: a mixture-of-experts model's expert "
                               "parallelism inside the TP GPUs (default: the framework's, EP1: "
                               "experts tensor-parallel).")
_BACKEND_OPTION = typer.Option(
    "auto", help="torch: time the operators on this machine (--device); aiconfigurator: derive "
                 "every cost from NVIDIA's measured database (--gpu, --framework), no GPU "
                 "needed; auto: aiconfigurator when --gpu or --framework is given, else torch.")
_BASE_OPTION = typer.Option(None,
                            help="Profile for what operators cannot measure (acceptance, "
                                 "learning curve, weight sync); default: cpu-tiny on "
                                 "cpu, else the H100 profile of this model and TP.")


@app.command()
def profile(
    out: Path = _OUT_OPTION,
    arch: Optional[str] = _ARCH_OPTION,
    backend: str = _BACKEND_OPTION,
    gpu: Optional[str] = typer.Option(
        None,
        help="The GPU whose measured costs to use (NVIDIA's database): h100, h200, b200, b300, "
        "gb200, gb300, a100, l40s, rtx-pro-6000, h100-pcie, a100-pcie, l4, a30."),
    framework: Optional[str] = typer.Option(
        None, help="The engine whose measured costs to use: vllm or sglang (default vllm)."),
    version: Optional[str] = typer.Option(None,
                                          help="--backend aiconfigurator: the framework "
                                               "version measured (default: the newest "
                                               "the database holds for the GPU)."),
    device: str = typer.Option("cpu", help="cpu or cuda."),
    tp: int = typer.Option(1,
                           help="Tensor-parallel degree: one rank's "
                                "shapes are measured, collectives assumed."),
    ep: Optional[int] = _EP_OPTION,
    dtype: Optional[str] = typer.Option(
        None, help="float32, bfloat16 or float16 (default: bfloat16 on cuda, float32 on cpu)."),
    grid: Optional[str] = typer.Option(None,
                                       help="Points to measure: cuda, cpu, gpu-check "
                                            "or test (default: the device's)."),
    repeats: Optional[int] = typer.Option(None,
                                          help="Timed runs per point (default: 30 cuda, 20 cpu)."),
    passes: Optional[int] = typer.Option(None,
                                         help="Interleaved passes over the points, each "
                                              "keeping its fastest (default: 1 cuda, 3 cpu)."),
    threads: Optional[int] = typer.Option(None,
                                          help="torch CPU threads (default: 1 on cpu, timed "
                                               "on its own CPU clock; torch's on cuda)."),
    seed: int = typer.Option(0, help="Seeds the random weights and inputs."),
    check_rounds: int = typer.Option(5,
                                     help="Interleaved rounds of the "
                                          "whole-model check (0: skip it)."),
    measurements: Optional[Path] = typer.Option(None,
                                                help="Fit this measurements file (from `python "
                                                     "-m real.profiler`) instead of measuring."),
    base: Optional[str] = _BASE_OPTION,
    name: Optional[str] = typer.Option(None,
                                       help="The profile's name (default: the --out file's stem)."),
) -> None:
    """Measure decode, verify, EAGLE drafter, prefill and training costs and fit a profile.

    torch: per decoder layer, random weights; aiconfigurator: from NVIDIA's measured database."""
    if out.suffix not in (".yaml", ".yml", ".json"):
        fail(ConfigError("--out", "<file>", str(out), "a .yaml, .yml or .json file name"))
    backend = _backend(backend, gpu, framework, arch, device, grid, measurements)
    if backend == "aiconfigurator":
        _from_database(out, arch, gpu, tp, framework or "vllm", version, base, name, ep)
        return
    if (arch is None) == (measurements is None):
        fail(ConfigError("--arch", "<option>", "both or neither of --arch and --measurements",
                         "--arch to measure here, or --measurements "
                         "FILE to fit a file measured elsewhere"))
    from real.profiler.table import read_measurements, write_measurements

    if measurements is not None:
        try:
            m = read_measurements(measurements)
        except ConfigError as exc:
            fail(exc)
    else:
        m = _measure(arch, device, tp, dtype, grid, repeats, passes, threads, seed, check_rounds)
    meta = m.meta
    try:
        base_prof = load_profile(base or default_base(meta["device"], str(meta["architecture"]),
                                                      int(meta["tp"])))
        fit = fit_operators(m, base_prof, name or out.stem)
    except (ConfigError, ValueError) as exc:
        fail(exc)
    raw, report = outputs(out)
    # Everything is measured and fitted before the
    # first file is written; each is written atomically.
    write_measurements(raw, m)
    write_json(report, fit_report(fit, m, raw.name))
    save(fit.profile, out)
    _print(fit)
    typer.echo(f"wrote {out}, {raw} (raw measurements) and {report} (fit error)")
