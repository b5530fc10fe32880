"""The `tlt` command line."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from workbench.config import ConfigError, write_atomic
from workbench.policy import Policy, load_policy, policy_presets
from workbench.profile import Profile, load_profile, profile_presets
from workbench.workload import Workload, load_workload, workload_presets

app = typer.Typer(help="TLT Workbench: simulate, calibrate, tune and run TLT for long-tail RL rollouts.",
                  no_args_is_help=True, add_completion=False)
bench_app = typer.Typer(help="Benchmarks (they print a table and, last, one line of JSON).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def _fail(exc: Exception) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


def _load_inputs(workload: str, policies: str, profile: Optional[str]) -> tuple[Workload, list[Policy], Profile]:
    """Everything is loaded and validated before any simulation starts or any file is written."""
    try:
        wl = load_workload(workload)
        prof = load_profile(profile or wl.profile)
        pols = [load_policy(p.strip()) for p in policies.split(",") if p.strip()]
    except ConfigError as exc:
        _fail(exc)
    if not pols:
        _fail(ValueError("--policy: give at least one policy name or file"))
    names = [p.name for p in pols]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        _fail(ValueError(f"--policy: two policies are named {dupes[0]!r}; give each file a distinct 'name' field"))
    return wl, pols, prof


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


@app.command()
def sim(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    policy: str = typer.Option("baseline,static-sd,tlt", help="Comma-separated policy preset names or files; the first is the reference for speedups."),
    steps: Optional[int] = typer.Option(None, min=1, help="RL steps to simulate (default: the workload's)."),
    seed: int = typer.Option(0, help="Seed for every random choice; same seed, same result."),
    out: Path = typer.Option(..., help="Output directory: summary.json and, per policy, NAME/metrics.json and NAME/timeline.parquet."),
    profile: Optional[str] = typer.Option(None, help="Profile preset or file (default: the workload's profile)."),
) -> None:
    """Simulate RL steps of a workload under one or more policies."""
    from sim.simulator import simulate

    wl, pols, prof = _load_inputs(workload, policy, profile)
    n = steps or wl.steps
    runs = []
    for pol in pols:
        t0 = time.perf_counter()
        progress = lambda m, name=pol.name: typer.echo(  # noqa: E731
            f"  {name}: step {m.step + 1}/{n}  step {m.step_time_s:,.1f}s  accept {m.mean_accept_len:.2f}", err=True)
        run = simulate(wl, pol, prof, seed=seed, steps=n, on_step=progress)
        typer.echo(f"simulated {pol.name} in {time.perf_counter() - t0:.2f}s", err=True)
        runs.append(run)

    ref = runs[0].mean("step_time_s")
    summary = {"workload": wl.name, "profile": prof.name, "seed": seed, "steps": n, "policies": {}}
    rows = []
    for run in runs:
        s = run.summary()
        entry = {k: s[k] for k in ("step_time_s", "rollout_time_s", "bubble_fraction", "mean_accept_len")}
        entry["speedup_vs_first"] = ref / s["step_time_s"]
        summary["policies"][run.policy_name] = entry
        run.save(out / run.policy_name)
        rows.append([run.policy_name, f"{s['step_time_s']:,.1f}", f"{s['rollout_time_s']:,.1f}",
                     f"{s['bubble_fraction']:.3f}", f"{s['drafter_train_fraction']:.3f}",
                     f"{s['mean_accept_len']:.2f}", f"{entry['speedup_vs_first']:.2f}x"])
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    typer.echo(f"{wl.name} on {prof.name}, {n} steps, seed {seed}")
    typer.echo(_table(rows, ["policy", "step s", "rollout s", "bubble", "spot-train", "accept len", "speedup"]))
    typer.echo(f"wrote {out}/summary.json")


@app.command()
def presets() -> None:
    """List the named presets."""
    typer.echo("workloads: " + ", ".join(workload_presets()))
    typer.echo("policies:  " + ", ".join(policy_presets()))
    typer.echo("profiles:  " + ", ".join(profile_presets()))


@app.command()
def check(
    kind: str = typer.Argument(..., help="policy, workload or profile"),
    path: str = typer.Argument(..., help="Preset name or YAML/JSON file"),
) -> None:
    """Validate a policy, workload or profile file and print it back in full."""
    import yaml

    from workbench.config import to_mapping

    loaders = {"policy": load_policy, "workload": load_workload, "profile": load_profile}
    if kind not in loaders:
        _fail(ValueError(f"kind {kind!r}: allowed: policy, workload, profile"))
    try:
        obj = loaders[kind](path)
    except ConfigError as exc:
        _fail(exc)
    typer.echo(yaml.safe_dump(to_mapping(obj), sort_keys=False), nl=False)


@bench_app.command("sim")
def bench_sim(
    workload: str = typer.Option("paper-32b-128gpu", help="Workload to time."),
    policy: str = typer.Option("tlt", help="Policy to time (tlt is the costliest: bandit decisions, spot training)."),
    steps: int = typer.Option(3, min=1),
    seed: int = typer.Option(0),
) -> None:
    """Time the simulator, and how its cost grows with workers x sequences."""
    from sim.simulator import simulate

    wl, pols, prof = _load_inputs(workload, policy, None)
    pol = pols[0]
    t0 = time.perf_counter()
    simulate(wl, pol, prof, seed=seed, steps=steps)
    per_step = (time.perf_counter() - t0) / steps

    # Scale workers (and prompts with them, so each engine keeps its load) from
    # a quarter to 8x: the cost per step should grow linearly in workers x sequences.
    rows, points = [], []
    for factor in (0.25, 0.5, 1, 2, 4, 8):
        workers = max(1, round(wl.workers * factor))
        scaled = replace(wl, workers=workers, prompts_per_step=max(1, round(wl.prompts_per_step * workers / wl.workers)))
        t0 = time.perf_counter()
        simulate(scaled, pol, prof, seed=seed, steps=1)
        secs = time.perf_counter() - t0
        work = scaled.workers * scaled.sequences_per_step
        points.append((work, secs))
        rows.append([str(scaled.workers), str(scaled.sequences_per_step), f"{secs:.3f}", f"{secs / work * 1e6:.3f}"])
    import numpy as np

    slope = float(np.polyfit(np.log([p[0] for p in points]), np.log([p[1] for p in points]), 1)[0])
    # Against sequences alone (each engine's load fixed) the cost should be ~linear.
    seqs = [int(r[1]) for r in rows]
    slope_seq = float(np.polyfit(np.log(seqs), np.log([p[1] for p in points]), 1)[0])
    typer.echo(f"{wl.name} / {pol.name}: {per_step:.3f} s per simulated step ({steps} steps)")
    typer.echo(_table(rows, ["workers", "sequences", "seconds/step", "us per worker*seq"]))
    typer.echo(f"growth exponent of cost in workers x sequences: {slope:.2f}; in sequences: {slope_seq:.2f}")
    typer.echo(json.dumps({"workload": wl.name, "policy": pol.name, "seconds_per_step": round(per_step, 4),
                           "exponent_workers_x_sequences": round(slope, 3), "exponent_sequences": round(slope_seq, 3)}))


@app.command()
def compare(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    policies: str = typer.Option("baseline,static-sd,tlt", help="Comma-separated policy preset names or files; the first is the reference for speedups."),
    seeds: int = typer.Option(3, min=1, help="Simulate seeds 0..K-1; seed s draws the same response lengths for every policy (common random numbers)."),
    out: Path = typer.Option(..., help="Output directory: compare.json and compare.png."),
    steps: Optional[int] = typer.Option(None, min=1, help="RL steps per simulation (default: the workload's)."),
    profile: Optional[str] = typer.Option(None, help="Profile preset or file (default: the workload's profile)."),
) -> None:
    """Compare policies over several seeds: step time, rollout time, bubbles, accepted length, with their spread."""
    from workbench.compare import compare as run_compare

    wl, pols, prof = _load_inputs(workload, policies, profile)
    t0 = time.perf_counter()
    progress = lambda done, total, name, seed: typer.echo(  # noqa: E731
        f"  [{done}/{total}] {name} seed {seed}  ({time.perf_counter() - t0:.1f}s)", err=True)
    result = run_compare(wl, pols, prof, seeds, steps=steps, on_progress=progress)
    result.save(out)
    s = result.summary()
    rows = []
    for name, r in s.iterrows():
        rows.append([name, f"{r['step_time_s_mean']:,.1f} ± {r['step_time_s_std']:,.1f}",
                     f"{r['rollout_time_s_mean']:,.1f} ± {r['rollout_time_s_std']:,.1f}",
                     f"{r['bubble_fraction_mean']:.3f} ± {r['bubble_fraction_std']:.3f}",
                     f"{r['mean_accept_len_mean']:.2f} ± {r['mean_accept_len_std']:.2f}",
                     f"{r['speedup']:.3f}x",
                     f"{r['speedup_paired_min']:.3f}-{r['speedup_paired_max']:.3f}x"])
    typer.echo(f"{wl.name} on {prof.name}, {result.steps} steps x seeds {result.seeds[0]}..{result.seeds[-1]} "
               f"(same draws for every policy); mean ± std over seeds")
    typer.echo(_table(rows, ["policy", "step s", "rollout s", "bubble", "accept len", "speedup", "paired range"]))
    typer.echo(f"speedup = {result.reference}'s mean step time / the policy's; paired range = min-max over seeds "
               f"of the per-seed ratio")
    typer.echo(f"wrote {out}/compare.json and {out}/compare.png")


@app.command()
def regret(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    policy: str = typer.Option("tlt", help="Base policy (preset or file); the four bandits differ from it only in bandit.algorithm."),
    seeds: int = typer.Option(3, min=1, help="Simulate seeds 0..K-1 (the same draws for every bandit)."),
    out: Path = typer.Option(..., help="Output directory: regret.json and regret.png."),
    steps: Optional[int] = typer.Option(None, min=1, help="RL steps per simulation (default: the workload's)."),
    profile: Optional[str] = typer.Option(None, help="Profile preset or file (default: the workload's profile)."),
) -> None:
    """Regret of BEG-MAB, UCB1, epsilon-greedy and the fixed table against the oracle schedule (best fixed in hindsight)."""
    from collections import Counter

    from workbench.regret import bandit_regret, bandit_variants

    wl, pols, prof = _load_inputs(workload, policy, profile)
    if len(pols) != 1:
        _fail(ValueError(f"--policy: give one base policy, not {len(pols)}"))
    base = pols[0]
    try:
        bandit_variants(base)
    except ValueError as exc:
        _fail(exc)
    t0 = time.perf_counter()
    progress = lambda done, total, alg, seed: typer.echo(  # noqa: E731
        f"  [{done}/{total}] {alg} seed {seed}  ({time.perf_counter() - t0:.1f}s)", err=True)
    report = bandit_regret(wl, base, prof, seeds, steps=steps, on_progress=progress)
    report.save(out)
    s = report.summary()
    rows = [[r["label"], f"{r['regret_s_mean']:,.2f} ± {r['regret_s_std']:,.2f}",
             f"{r['regret_pct_mean']:.2f}%", f"{r['clairvoyant_regret_s_mean']:,.2f}",
             f"{r['decisions_mean']:,.0f}", f"{r['step_time_s_mean']:,.1f}"] for _, r in s.iterrows()]
    typer.echo(f"{wl.name} on {prof.name}, base policy {base.name} (arms {list(base.bandit.arms)}), "
               f"{report.steps} steps x seeds {report.seeds[0]}..{report.seeds[-1]}; mean ± std over seeds")
    typer.echo(_table(rows, ["bandit", "regret s", "% rollout", "clairvoyant s", "decisions", "step s"]))
    votes: dict[tuple[int, int], Counter] = {}
    for r in report.runs:
        for o in r.oracle:
            if o["oracle_draft_len"] is not None:
                votes.setdefault((o["min_batch"], o["max_batch"]), Counter())[o["oracle_draft_len"]] += 1
    oracle = ", ".join(f"{lo}-{hi}: {c.most_common(1)[0][0]}" for (lo, hi), c in sorted(votes.items()))
    sched = ", ".join(f"{row.min_batch}-{row.max_batch}: {row.draft_len}" for row in base.schedule)
    typer.echo(f"oracle draft length per bucket (most common over runs): {oracle}; {base.name}'s schedule: {sched}")
    typer.echo("regret = worker-seconds lost vs the best fixed draft length per bucket in hindsight "
               "(model time, docs/formats.md); % of rollout worker-time")
    typer.echo(f"wrote {out}/regret.json and {out}/regret.png")


@app.command()
def tune(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    profile: Optional[str] = typer.Option(None, help="Profile preset or file (default: the workload's profile)."),
    trials: int = typer.Option(100, min=1, help="Complete trials the study should hold; a resumed study runs only the rest."),
    seeds: int = typer.Option(3, min=1, help="Score each policy on seeds 0..K-1, the same for every trial (common random numbers)."),
    steps: Optional[int] = typer.Option(None, min=1, help="RL steps per simulation (default: the workload's)."),
    storage: str = typer.Option("sqlite:///tlt-studies.db", help="Optuna storage URL (default: tlt-studies.db in the current directory); 'memory' keeps nothing."),
    study: Optional[str] = typer.Option(None, help="Study name; run again with the same name to resume it (default: tune-WORKLOAD, plus -mo in multi-objective mode)."),
    out: Path = typer.Option(..., help="Where to write the best policy (.yaml, .yml or .json); it loads in `tlt sim`."),
    multi_objective: bool = typer.Option(False, "--multi-objective", help="Minimise step time and drafter-training GPU-seconds per step; print the Pareto front and write its fastest point."),
    allow_warm_start: bool = typer.Option(False, "--allow-warm-start", help="Let the search use an offline-trained (warm-start) drafter; the objective does not charge that training."),
    sampler_seed: int = typer.Option(0, help="Seed of the TPE sampler."),
) -> None:
    """Tune a policy with Optuna over the simulator; resumable, and open in optuna-dashboard."""
    from workbench import tune as tuning

    wl, presets, prof = _load_inputs(workload, ",".join(tuning.PRESETS), profile)
    if out.suffix not in (".yaml", ".yml", ".json"):
        _fail(ConfigError("--out", "<file>", str(out), "a .yaml, .yml or .json file name"))
    name = study or f"tune-{wl.name}" + ("-mo" if multi_objective else "")
    spec = tuning.TuneSpec(wl, prof, seeds=seeds, steps=steps, multi_objective=multi_objective,
                           allow_warm_start=allow_warm_start)
    try:
        store = tuning.make_storage(storage)
    except Exception as exc:  # a storage URL SQLAlchemy or Optuna cannot open
        _fail(ValueError(f"--storage {storage!r}: {exc}"))
    try:
        opt = tuning.open_study(spec, name, store, sampler_seed=sampler_seed)
    except ConfigError as exc:
        _fail(exc)
    have = len(tuning.complete_trials(opt))
    where = "memory" if storage in ("", "memory", ":memory:") else storage
    typer.echo(f"study {name!r} in {where}: {have} complete trials, running {max(0, trials - have)} more "
               f"({wl.name} on {prof.name}, seeds 0..{seeds - 1} x {spec.n_steps} steps)", err=True)
    t0 = time.perf_counter()
    try:
        tuning.run_study(opt, spec, trials, [tuning.Progress(trials, multi_objective)])
    except KeyboardInterrupt:
        typer.echo(f"interrupted: finished trials are kept; resume with --study {name}", err=True)
        raise typer.Exit(130)
    if not tuning.complete_trials(opt):
        _fail(ValueError(f"study {name!r} has no complete trial"))
    typer.echo(f"tuned in {time.perf_counter() - t0:.1f}s", err=True)

    best = tuning.best_policy(opt)
    table = tuning.comparison_frame(spec, best, presets)
    typer.echo(f"{wl.name} on {prof.name}, seeds 0..{seeds - 1} x {spec.n_steps} steps (same draws for every policy); "
               f"study {name!r}, {len(tuning.complete_trials(opt))} trials, best trial {tuning.best_trial(opt).number}")
    typer.echo(tuning.comparison_text(table))
    if multi_objective:
        typer.echo("Pareto front (step time vs drafter-training GPU-seconds per step):")
        typer.echo(tuning.pareto_text(tuning.pareto_frame(opt)))
    tuning.write_policy(best, out)
    typer.echo(f"wrote {out} (policy {best.name!r})")


@app.command()
def calibrate(
    traces: list[Path] = typer.Argument(..., help="Trace directories (written by `tlt capture` or `tlt train`) to fit on."),
    out: Path = typer.Option(..., help="The fitted profile (.yaml, .yml or .json); it loads wherever a profile does (`tlt sim --profile`)."),
    base: str = typer.Option("cpu-tiny", help="Profile preset or file: its values are kept for what the traces cannot identify."),
    name: Optional[str] = typer.Option(None, help="The fitted profile's name (default: the --out file's stem)."),
    lengths_out: Optional[Path] = typer.Option(None, "--lengths-out", help="Also write a workload file (.yaml/.json): the traces' shape, the fitted length model and this profile."),
    warmup_steps: int = typer.Option(5, min=0, help="First engine steps of each engine that may be warm-up (dropped when they do not fit)."),
) -> None:
    """Fit a profile (step latency vs batch, context and draft length; drafter cost; per-position acceptance) and a length model to traces."""
    import math

    import numpy as np

    from workbench import calibrate as cal
    from workbench.config import save
    from workbench.trace import TraceError, load_trace

    for path, what in ((out, "--out"), (lengths_out, "--lengths-out")):
        if path is not None and path.suffix not in (".yaml", ".yml", ".json"):
            _fail(ConfigError(what, "<file>", str(path), "a .yaml, .yml or .json file name"))
    try:
        base_prof = load_profile(base)
    except ConfigError as exc:
        _fail(exc)
    try:
        loaded = [load_trace(t) for t in traces]
        result = cal.calibrate(loaded, base_prof, name=name or out.stem, warmup_steps=warmup_steps)
    except (TraceError, ValueError) as exc:
        _fail(exc)
    save(result.profile, out)
    report = out.with_name(out.stem + ".calibration.json")
    write_atomic(report, json.dumps(result.report(base_prof), indent=2) + "\n")
    c = result.costs
    typer.echo(f"calibrated {result.profile.name!r} on {len(loaded)} trace(s), {c.steps_used} engine steps "
               f"(dropped: {', '.join(f'{v} {k}' for k, v in c.steps_dropped.items()) or 'none'}); base {base_prof.name}")
    typer.echo(_table(result.param_rows(base_prof), ["parameter", "value", "base", "how"]))
    typer.echo("")
    typer.echo(f"step latency, median |error|: {c.mdape_pct:.2f}% in sample, {c.cv_mdape_pct:.2f}% held out "
               f"({cal.CV_FOLDS}-fold); {int(c.residuals['outlier'].sum())} outlier steps (> 5 robust sd); "
               f"robust fit scaled x{c.mean_scale:.3f} to match total time; knee {c.knee_tokens:.0f} tokens")
    if not cal.HAS_FINISH:
        typer.echo(f"a step after requests finish costs {1e3 * c.finish_s:.2f} ms more per finished request "
                   f"(fitted, then spread over the profile's parameters: a Profile has no per-finish cost)")
    rows = [[t, str(int((c.residuals["trace"] == t).sum())), f"{b:+.2f}%",
             f"{float(np.median(np.abs(c.residuals.loc[c.residuals['trace'] == t, 'error_pct']))):.2f}%"]
            for t, b in c.bias_pct.items()]
    typer.echo(_table(rows, ["trace", "steps", "total-time bias", "median |error|"]))
    if c.warmup_excess_s > 0:
        typer.echo(f"warm-up steps left out took {c.warmup_excess_s:.3f}s more than the fit predicts (all engines)")
    for kind, a in result.acceptance.items():
        typer.echo(f"acceptance {kind}: alpha {a.alpha:.3f}, shape {a.shape:.3f}"
                   f"{'' if a.shape_fitted else ' (base)'} over {a.sd_steps} SD steps; rmse {a.rmse:.4f}")
        curve = a.curve()
        typer.echo(_table([[str(i + 1), str(a.offered[i]), f"{a.r[i]:.3f}", f"{curve[i]:.3f}", f"{a.r_per_draft[i]:.3f}"]
                           for i in range(len(a.r))], ["position", "offered", "r traced", "r fitted", "per draft"]))
    lf = result.length_fit
    if lf is not None:
        m = lf.model
        typer.echo(f"length model ({lf.responses} responses, {lf.groups} groups, cap {lf.cap}): clip_ratio {m.clip_ratio:.4f} "
                   f"(observed {lf.clip_ratio_observed:.4f}, censored fit {lf.clip_ratio_implied:.4f}), sigma {m.sigma:.3f}, "
                   f"group_correlation {m.group_correlation:.3f}, mean_accuracy {m.mean_accuracy:.3f}, "
                   f"accuracy_concentration {m.accuracy_concentration:.3g}, wrong_factor {m.wrong_factor:.3f}, "
                   f"drift {m.drift_per_step:+.3f}; median length {math.exp(lf.log_median_fit):.0f} fitted, "
                   f"{math.exp(lf.log_median_model):.0f} as the model's clip_ratio implies")
    for note in result.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"wrote {out} and {report} (the fit in full)")
    if lengths_out is not None:
        if result.lengths is None:
            _fail(ValueError("--lengths-out: the traces did not support a length model (see the notes above)"))
        wl = cal.trace_workload_spec(loaded[0], result.lengths, out, lengths_out, result.profile.name)
        save(wl, lengths_out)
        typer.echo(f"wrote {lengths_out}")


@app.command()
def validate(
    traces: list[Path] = typer.Argument(..., help="Trace directory to re-simulate (several: each, then the total)."),
    profile: str = typer.Option(..., help="Profile preset name or file to test (e.g. one `tlt calibrate` wrote)."),
    seed: int = typer.Option(0, help="Seed of the simulator's acceptance noise."),
    out: Optional[Path] = typer.Option(None, help="Also write OUT/validate.json (every run in detail) and OUT/validate.png."),
) -> None:
    """Re-simulate traced runs with a profile; the last line is JSON {predicted_rollout_s, measured_rollout_s, error_pct}."""
    import numpy as np

    from workbench.trace import TraceError, load_trace
    from workbench.validate import validate as run_validate

    try:
        prof = load_profile(profile)
    except ConfigError as exc:
        _fail(exc)
    results = []
    try:
        for t in traces:
            results.append(run_validate(prof, load_trace(t), seed=seed))
    except (TraceError, ValueError) as exc:
        _fail(exc)
    rows = []
    for v in results:
        d = v.details
        rows.append([v.trace, str(d["workers"]), f"{d['prompts']}x{d['samples']}", str(d["max_batch"]), d["drafter"],
                     f"{d['accept_len_traced']:.2f}/{d['accept_len_simulated']:.2f}",
                     f"{v.predicted_rollout_s:,.3f}", f"{v.measured_rollout_s:,.3f}", f"{v.error_pct:+.2f}%"])
    typer.echo(f"profile {prof.name}: traced runs re-simulated with their own lengths, schedule and drafter")
    typer.echo(_table(rows, ["trace", "engines", "prompts", "batch", "drafter", "accept len trace/sim",
                             "predicted s", "measured s", "error"]))
    for v in results:
        d = v.details
        extra = f"; schedule buckets set from the trace: {d['schedule_overridden']}" if d.get("schedule_overridden") else ""
        span = d.get("span_vs_rollout_pct")
        typer.echo(f"{v.trace}: measured from {d['measured_basis']}"
                   + (f" (request span differs by {span:+.2f}%)" if span is not None else "")
                   + f"; groups on their traced engine: {100 * d['shards_match']:.0f}%{extra}")
        typer.echo(f"  engine steps traced {d['engine_steps_traced']}, simulated {d['engine_steps_simulated']:,.0f}; "
                   f"the profile on the traced steps gives {d['step_cost_rollout_s']:,.3f}s "
                   f"(cost model {d['cost_error_pct']:+.2f}%, simulator pacing {d['pace_error_pct']:+.2f}%)")
    if out is not None:
        from workbench.validate import save_validations

        save_validations(results, out, prof)
        typer.echo(f"wrote {out}/validate.json and {out}/validate.png")
    if len(results) == 1:
        summary = results[0].summary()
    else:
        pred = sum(v.predicted_rollout_s for v in results)
        meas = sum(v.measured_rollout_s for v in results)
        summary = {"predicted_rollout_s": round(pred, 4), "measured_rollout_s": round(meas, 4),
                   "error_pct": round(100 * (pred - meas) / meas, 3),
                   "median_abs_error_pct": round(float(np.median([abs(v.error_pct) for v in results])), 3),
                   "traces": {v.trace: v.summary() for v in results}}
    typer.echo(json.dumps(summary))


model_app = typer.Typer(help="Our own tiny reasoning model (real/model.py): build, train, save.", no_args_is_help=True)
app.add_typer(model_app, name="model")


@model_app.command("init")
def model_init(
    out: Path = typer.Option(..., help="Directory to write the model to (Hugging Face format: config.json, "
                                       "model.safetensors, tokenizer files, training.json)."),
    seed: int = typer.Option(0, help="Seed of the initial weights and of the training problems; same seed, same weights."),
    steps: Optional[int] = typer.Option(None, min=1, help="SFT optimiser steps (default: real.model.DEFAULT_STEPS)."),
    mix: str = typer.Option("default", help="Difficulty mix of the training problems (real/task.py: default, easy, hard, flat)."),
    evaluate: bool = typer.Option(True, "--eval/--no-eval", help="Evaluate greedy answers on held-out problems after training."),
    threads: int = typer.Option(2, min=1, help="CPU threads for training (the weights depend on it: same seed and threads, same bytes)."),
) -> None:
    """Build a small Qwen2 and a character tokenizer, train it (SFT) on the GCD task, save it."""
    from real import task

    if mix not in task.MIXES:
        _fail(ValueError(f"--mix {mix!r}: allowed: {', '.join(task.MIXES)}"))
    from real.model import DEFAULT_STEPS, init_model

    info = init_model(out, seed=seed, steps=steps or DEFAULT_STEPS, mix=mix, evaluate_after=evaluate, threads=threads,
                      log=lambda m: typer.echo(m, err=True))
    typer.echo(f"wrote {out} (SFT {info['train_seconds']:.0f}s, final loss {info['final_loss']:.4f})")
    if "eval" in info:
        e = info["eval"]
        typer.echo(f"greedy on {e['problems']} held-out problems: accuracy {e['accuracy']:.2f}; response tokens "
                   f"p50 {e['response_tokens']['p50']:.0f} p90 {e['response_tokens']['p90']:.0f} "
                   f"max {e['response_tokens']['max']}")


# ---------------------------------------------------------------- real backend: capture, drafter, bench rollout


@app.command()
def capture(
    model: Path = typer.Option(..., help="Target model directory (Hugging Face format, e.g. from `tlt model init`)."),
    policy: str = typer.Option(..., help="Policy preset name or YAML/JSON file: its drafter kind and schedule set speculative decoding."),
    drafter: Optional[Path] = typer.Option(None, help="EAGLE drafter checkpoint directory (`tlt drafter train`); required by an eagle policy."),
    prompts: int = typer.Option(8, min=1, help="Problems drawn from real.task."),
    samples: int = typer.Option(4, min=1, help="Responses per problem (the group size)."),
    max_tokens: int = typer.Option(512, min=1, help="Response cap in tokens."),
    seed: int = typer.Option(0, help="Seed of the problems and of sampling."),
    mix: str = typer.Option("default", help="Difficulty mix of the problems (real/task.py)."),
    temperature: float = typer.Option(1.0, min=0.0, help="Sampling temperature (0: greedy)."),
    max_num_seqs: int = typer.Option(64, min=1, help="vLLM's max_num_seqs: the most requests decoded at once."),
    out: Path = typer.Option(..., help="Trace directory to write (schema: traces/README.md)."),
) -> None:
    """Run one rollout on vLLM step by step and record it as a trace."""
    from real.capture import CaptureError, capture as run_capture, check_inputs
    from real.engine import EngineConfigError

    try:
        pol = load_policy(policy)
    except ConfigError as exc:
        _fail(exc)
    try:
        check_inputs(model, pol, drafter, prompts, samples, max_tokens, mix, 2048)
    except (CaptureError, EngineConfigError) as exc:
        _fail(exc)
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        _fail(RuntimeError(f"capture needs vLLM ({exc}); install the project with its 'cpu' or 'gpu' extra"))
    trace = run_capture(model, pol, drafter, prompts=prompts, samples=samples, max_tokens=max_tokens, seed=seed,
                        mix=mix, temperature=temperature, max_num_seqs=max_num_seqs, out=out,
                        log=lambda m: typer.echo(m, err=True))
    s = trace.meta["summary"]
    rows = [[pol.name, str(s["engine_steps"]), str(s["requests"]), str(s["response_tokens"]), f"{s['rollout_s']:.2f}",
             f"{s['tokens_per_s']:,.0f}", "-" if s["mean_accepted_length"] is None else f"{s['mean_accepted_length']:.2f}",
             f"{s['clip_ratio']:.2f}", "-" if s["mean_reward"] is None else f"{s['mean_reward']:.2f}"]]
    typer.echo(_table(rows, ["policy", "steps", "requests", "tokens", "rollout s", "tok/s", "accept len", "clipped", "reward"]))
    typer.echo(f"wrote {out}")


drafter_app = typer.Typer(help="The EAGLE drafter (real/eagle.py): train it on the target's own rollouts.", no_args_is_help=True)
app.add_typer(drafter_app, name="drafter")


@drafter_app.command("train")
def drafter_train(
    model: Path = typer.Option(..., help="Target model directory."),
    out: Path = typer.Option(..., help="Drafter checkpoint directory to write (vLLM loads it as EagleLlamaForCausalLM)."),
    steps: int = typer.Option(300, min=1, help="Optimiser steps."),
    seed: int = typer.Option(0, help="Seed of the prompts, the sampling, the initial weights and the batches."),
    prompts: int = typer.Option(32, min=1, help="Prompts to sample the target on (real.task problems, else random-token prompts)."),
    samples: int = typer.Option(4, min=1, help="Responses per prompt: one greedy, the rest sampled."),
    max_tokens: int = typer.Option(256, min=1, help="Response cap of the training rollouts."),
    lr: float = typer.Option(1e-3, min=0.0, help="AdamW learning rate (cosine decay to a tenth, 20 warm-up steps)."),
    mix: str = typer.Option("default", help="Difficulty mix of the task prompts (real/task.py)."),
    temperature: float = typer.Option(1.0, min=0.0, help="Temperature of the sampled responses."),
) -> None:
    """Sample the target, then train an EAGLE drafter on its hidden states (EAGLE loss)."""
    from real.eagle import train_from_target

    if not (model / "config.json").is_file():
        _fail(ValueError(f"--model {model}: no config.json (give a Hugging Face model directory)"))
    try:
        from real import task

        if mix not in getattr(task, "MIXES", {mix: None}):
            _fail(ValueError(f"--mix {mix!r}: allowed: {', '.join(task.MIXES)}"))
    except ImportError:
        pass
    t0 = time.perf_counter()
    path = train_from_target(model, out, steps=steps, seed=seed, prompts=prompts, samples=samples,
                             max_tokens=max_tokens, lr=lr, mix=mix, temperature=temperature,
                             log=lambda m: typer.echo(m, err=True))
    info = json.loads((path / "tlt_drafter.json").read_text())
    final = info.get("final", {})
    typer.echo(f"wrote {path} in {time.perf_counter() - t0:.0f}s: loss {final.get('loss', float('nan')):.4f}, "
               f"top-1 agreement with the target {final.get('top1', float('nan')):.3f} (last 50 steps)")


@bench_app.command("rollout")
def bench_rollout(
    model: Path = typer.Option(..., help="Target model directory."),
    drafter: Optional[Path] = typer.Option(None, help="EAGLE drafter directory; without it the eagle rows are left out."),
    batches: str = typer.Option("1,8,64", help="Comma-separated batch sizes."),
    max_tokens: int = typer.Option(256, min=1, help="Tokens decoded per sequence (greedy, ignore_eos)."),
    draft_len: int = typer.Option(4, min=1, max=16, help="Draft length K of n-gram and EAGLE at every batch size."),
    repeats: int = typer.Option(2, min=1, help="Timed runs per batch size; the best is kept."),
    seed: int = typer.Option(0, help="Seed of the prompts."),
) -> None:
    """Decode throughput with no SD, n-gram and EAGLE at several batch sizes (greedy, same prompts)."""
    from real.bench import bench_rollout as run_bench

    try:
        sizes = [int(b) for b in batches.split(",") if b.strip()]
    except ValueError:
        _fail(ValueError(f"--batches {batches!r}: give comma-separated integers"))
    if not sizes or min(sizes) < 1 or max(sizes) > 256:
        _fail(ValueError(f"--batches {batches!r}: sizes from 1 to 256"))
    report = run_bench(model, drafter, sizes, max_tokens=max_tokens, draft_len=draft_len, repeats=repeats, seed=seed,
                       log=lambda m: typer.echo(m, err=True))
    rows = []
    for method, per_b in report["results"].items():
        for b, r in per_b.items():
            rows.append([method, b, f"{r['tokens_per_s']:,.0f}", f"{r['speedup_vs_none']:.2f}x",
                         "-" if r["mean_accepted_length"] is None else f"{r['mean_accepted_length']:.2f}",
                         "yes" if r["same_as_none"] else "NO"])
    typer.echo(f"{model}: greedy, {max_tokens} tokens per sequence, K={draft_len}, best of {repeats}")
    typer.echo(_table(rows, ["method", "batch", "tok/s", "vs none", "accept len", "same tokens"]))
    typer.echo(json.dumps(report))


def _run_config(model: Path, policy: str, out: Path, steps: int, workers: int, seed: int, prompts: int, samples: int,
                max_tokens: int, drafter: Optional[Path], lr: float, address: Optional[str], mix: str):
    from real.train import RunConfig, TrainError, default_drafter

    try:
        pol = load_policy(policy)
    except Exception as exc:
        _fail(exc)
    drafter = default_drafter(model, pol, drafter)
    cfg = RunConfig(model=model, policy=pol, out=out, steps=steps, workers=workers, seed=seed, prompts=prompts,
                    samples=samples, max_tokens=max_tokens, drafter=drafter, lr=lr, address=address, mix=mix)
    try:
        cfg.check()
    except TrainError as exc:
        _fail(exc)
    return cfg


_STEP_HEADER = ["step", "step s", "rollout s", "train s", "sync s", "bubble", "spot", "accept", "reward", "pass@G",
                "drafter", "d-steps", "d-loss"]


def _step_row(m) -> list[str]:
    return [str(m.step), f"{m.step_s:.2f}", f"{m.rollout_s:.2f}", f"{m.train_s:.2f}", f"{m.sync_s:.2f}",
            f"{m.bubble_frac:.0%}", f"{m.spot_frac:.0%}", f"{m.mean_accept_len:.2f}", f"{m.reward:.3f}",
            f"{m.pass_at_g:.2f}", m.drafter_kind, str(m.drafter_steps),
            "-" if m.drafter_loss != m.drafter_loss else f"{m.drafter_loss:.3f}"]


@app.command()
def train(
    model: Path = typer.Option(..., help="Target model directory (Hugging Face format; e.g. traces/reference/model)."),
    policy: str = typer.Option(..., help="Policy preset name or YAML/JSON file (e.g. one `tlt tune` wrote)."),
    steps: int = typer.Option(20, min=1, help="RL steps to run (in all, counting steps done before a --resume)."),
    workers: int = typer.Option(2, min=1, help="Rollout workers (Ray actors, one vLLM engine each)."),
    seed: int = typer.Option(0, help="Seed of prompts, sampling, GRPO, drafter and bandits."),
    out: Path = typer.Option(..., help="Run directory: checkpoints/, metrics.csv, trace/, drafter/."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last finished step."),
    prompts: int = typer.Option(16, min=1, help="Prompts per RL step."),
    samples: int = typer.Option(4, min=2, help="Samples per prompt (the GRPO group)."),
    max_tokens: int = typer.Option(1024, min=1, help="Response cap in tokens."),
    drafter: Optional[Path] = typer.Option(None, help="Warm-start EAGLE drafter (policies with drafter.warm_start)."),
    lr: float = typer.Option(2e-5, min=0.0, help="GRPO learning rate (AdamW)."),
    mix: str = typer.Option("default", help="Difficulty mix of the task prompts (real/task.py)."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address to join (default: a local Ray)."),
) -> None:
    """GRPO on vLLM rollouts with spot drafter training and adaptive SD (real/train.py)."""
    from real.train import train as run_train

    cfg = _run_config(model, policy, out, steps, workers, seed, prompts, samples, max_tokens, drafter, lr, address, mix)
    typer.echo("  ".join(_STEP_HEADER))

    def on_step(m) -> None:
        typer.echo("  ".join(_step_row(m)))

    try:
        run = run_train(cfg, resume=resume, log=lambda m: typer.echo(m, err=True), on_step=on_step)
    except ValueError as exc:
        _fail(exc)
    typer.echo(_table([_step_row(m) for m in run.metrics], _STEP_HEADER))
    typer.echo(f"wrote {out}/metrics.csv, {out}/trace (tlt calibrate reads it), {out}/checkpoints"
               + (f", {out}/drafter (vLLM loads it)" if run.drafter_dir else ""))


@bench_app.command("real")
def bench_real(
    model: Path = typer.Option(..., help="Target model directory."),
    steps: int = typer.Option(10, min=1, help="RL steps per policy."),
    workers: int = typer.Option(2, min=1, help="Rollout workers per policy."),
    seed: int = typer.Option(0, help="Seed shared by both runs."),
    out: Path = typer.Option(Path("bench-real"), help="Directory for both runs (baseline/, tlt/)."),
    prompts: int = typer.Option(16, min=1, help="Prompts per RL step."),
    samples: int = typer.Option(4, min=2, help="Samples per prompt."),
    max_tokens: int = typer.Option(1024, min=1, help="Response cap in tokens."),
    lr: float = typer.Option(2e-5, min=0.0, help="GRPO learning rate."),
) -> None:
    """baseline vs tlt from the same model and seed, steps interleaved; last line JSON."""
    from real.bench_real import bench_real as run_bench

    cfg = _run_config(model, "baseline", out, steps, workers, seed, prompts, samples, max_tokens, None, lr, None, "default")
    for name in ("baseline", "tlt"):
        if (out / name / "checkpoints").exists():
            _fail(ValueError(f"--out {out}: {out / name} holds a run already; choose another --out"))

    def on_step(name, m) -> None:
        typer.echo(f"{name:9s} " + "  ".join(_step_row(m)), err=True)

    report = run_bench(cfg, log=lambda m: typer.echo(m, err=True), on_step=on_step)
    rows = [[name] + _step_row(m) for name, ms in report["steps"].items() for m in ms]
    typer.echo(_table(rows, ["policy"] + _STEP_HEADER))
    from real.bench_real import spot_interference

    typer.echo("tlt: median engine-step ms by batch, while another worker spot-trained (True) or not (False):")
    typer.echo(spot_interference(out / "tlt" / "trace").round(2).to_string())
    typer.echo(json.dumps({k: round(v, 4) for k, v in report["summary"].items()}))


def main() -> None:  # pragma: no cover - console entry when run as a module
    app()


if __name__ == "__main__":
    sys.exit(main())
