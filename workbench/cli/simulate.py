"""`tlt sim`, `presets`, `check`, `compare`, `regret` and `bench sim`: the simulator's commands."""

from __future__ import annotations

import json
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np
import typer
import yaml

from sim.simulator import simulate
from workbench.runlog.report import measured_vs_modelled
from workbench.cli.agentic import TOOL_LATENCY_OPTION, print_agentic, run_tool_sweep, tool_scales
from workbench.cli.apps import app, bench_app
from workbench.cli.tail_range import TAIL_RANGE_OPTION, print_tail_sensitivity
from workbench.cli.common import (ADDRESS_OPTION, PROFILE_OPTION, WORKERS_OPTION, fail,
                                  load_inputs, runner_for)
from workbench.compare.agentic import agentic_why
from workbench.compare.intervals import (interval_json, interval_lines, policy_intervals,
                                        run_work)
from workbench.compare.policies import compare as run_compare
from workbench.compare.policies import summarize_runs, why_runs
from workbench.contracts.architecture import architecture_presets, load_architecture, read_config
from workbench.contracts.fileio import save_figure, write_atomic
from workbench.contracts.policy import load_policy, policy_presets
from workbench.contracts.profile import load_profile, profile_presets
from workbench.contracts.provenance import provenance
from workbench.contracts.schema import ConfigError, to_mapping
from workbench.contracts.speedup import WHY_HEADERS, why_json, why_table
from workbench.contracts.workload import load_workload, workload_presets
from workbench.report.plots import batch_figure
from workbench.compare.regret import bandit_regret, bandit_variants
from workbench.report.tables import format_table


@app.command()
def sim(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    policy: str = typer.Option("baseline,static-sd,tlt",
                               help="Comma-separated policy preset names or files; "
                                    "the first is the reference for speedups."),
    steps: Optional[int] = typer.Option(None, min=1,
                                        help="RL steps to simulate (default: the workload's)."),
    seed: int = typer.Option(0, help="Seed for every random choice; same seed, same result."),
    out: Path = typer.Option(...,
                             help="Output directory: summary.json and, per policy, "
                                  "NAME/metrics.json, NAME/timeline.parquet and NAME/batch.png "
                                  "(each worker's running batch in the last step)."),
    profile: Optional[str] = PROFILE_OPTION,
) -> None:
    """Simulate RL steps of a workload under one or more policies."""

    wl, pols, prof = load_inputs(workload, policy, profile, steps)
    n = steps or wl.steps
    runs = []
    for pol in pols:
        t0 = time.perf_counter()
        progress = lambda m, name=pol.name: typer.echo(  # noqa: E731
            f"  {name}: step {m.rl_step + 1}/{n}  step "
            f"{m.step_time_s:,.1f}s  accept {m.mean_accept_len:.2f}", err=True)
        run = simulate(wl, pol, prof, seed=seed, steps=n, on_step=progress)
        typer.echo(f"simulated {pol.name} in {time.perf_counter() - t0:.2f}s", err=True)
        runs.append(run)

    summary = {"workload": wl.name, "profile": prof.name, "seed": seed, "steps": n, "policies": {}}
    rows = []
    whys = why_runs(runs)
    for run, s, why in zip(runs, summarize_runs(runs), whys):
        summary["policies"][s.policy] = {"step_time_s": s.step_time_s,
                                         "rollout_time_s": s.rollout_time_s,
                                         "bubble_fraction": s.bubble_fraction,
                                         "tail_fraction": s.tail_fraction,
                                         "mean_accept_len": s.mean_accept_len,
                                         "speedup_vs_first": s.speedup, "why": why_json(why)}
        run.save(out / run.policy_name)
        last = run.steps[-1].rl_step
        save_figure(batch_figure(
            run.timeline, last,
            f"{run.policy_name} on {wl.name}: running batch per worker, " f"RL step {last}"),
                    out / run.policy_name / "batch.png")
        rows.append([s.policy, f"{s.step_time_s:,.1f}", f"{s.rollout_time_s:,.1f}",
                     f"{s.bubble_fraction:.1%}", f"{s.tail_fraction:.1%}",
                     f"{s.drafter_train_fraction:.1%}", f"{s.mean_accept_len:.2f}",
                     f"{s.speedup:.2f}x"])
    intervals = policy_intervals([(r.policy_name, [run_work(r, prof, wl.workers)]) for r in runs],
                                 prof, seed)
    for pi in intervals or []:
        summary["policies"][pi.policy]["interval"] = interval_json(pi)
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    typer.echo(f"{wl.name} on {prof.name}, {n} steps, seed {seed} (another seed "
               "draws other lengths: tlt compare --seeds K for the spread)")
    typer.echo(format_table(rows, ["policy", "step s", "rollout s", "bubble", "tail", "spot-train",
                                   "accept len", "speedup"]))
    for line in interval_lines(intervals, runs[0].policy_name):
        typer.echo(line)
    _print_why(whys)
    print_agentic([agentic_why(r) for r in runs if r.turns is not None and not r.turns.empty],
                  f"seed {seed}")
    typer.echo(f"wrote {out}/summary.json")


def _print_why(whys) -> None:
    """Each policy's decomposition against the first: a table, then one sentence each."""
    if len(whys) < 2:
        return
    typer.echo(f"why each speedup (against {whys[0].reference}; docs/formats.md, 'Why a speedup'):")
    typer.echo(format_table(why_table(whys[1:]), list(WHY_HEADERS.values())))
    for w in whys[1:]:
        typer.echo(f"  {w.sentence}")


@app.command()
def presets(long: bool = typer.Option(
        False, "--long",
        help="Each preset with where its numbers come from: a workload's "
             "description and source, a policy's description, a profile's "
             "provenance (measured, published, calibrated or hand-set).")) -> None:
    """List the named presets (--long: with their provenance)."""
    if not long:
        typer.echo("workloads: " + ", ".join(workload_presets()))
        typer.echo("policies:  " + ", ".join(policy_presets()))
        typer.echo("profiles:  " + ", ".join(profile_presets()))
        typer.echo("models:    " + ", ".join(architecture_presets()))
        typer.echo("(tlt presets --long: where each one's numbers come from)")
        return
    for kind, names, lines in (("workloads", workload_presets(), _workload_lines),
                               ("policies", policy_presets(), _policy_lines),
                               ("profiles", profile_presets(), _profile_lines),
                               ("models (--arch)", architecture_presets(), _model_lines)):
        typer.echo(f"{kind}:")
        for name in names:
            try:
                typer.echo("\n".join(lines(name)))
            except ConfigError as exc:
                typer.echo(f"  {name}: does not load ({exc})")


def _wrapped(head: str, text: str) -> list[str]:
    return textwrap.wrap(text, width=100, initial_indent=head, subsequent_indent=" " * 6,
                         break_on_hyphens=False) if text else []


def _workload_lines(name: str) -> list[str]:
    wl = load_workload(name)
    return [f"  {name}", *_wrapped("      ", wl.description),
            *_wrapped("      source: ", wl.source)]


def _policy_lines(name: str) -> list[str]:
    return [f"  {name}", *_wrapped("      ", load_policy(name).description)]


def _model_lines(name: str) -> list[str]:
    a = load_architecture(name)
    size = (f"{a.params / 1e9:.1f}B, {a.active_params / 1e9:.1f}B active, "
            f"{a.experts.count} experts top-{a.experts.per_token}" if a.is_moe
            else f"{a.params / 1e9:.1f}B dense")
    source = str(read_config(name)[0].get("_source", ""))
    return [f"  {name} ({a.family or 'no architectures field'}, {size})",
            *_wrapped("      source: ", source)]


def _profile_lines(name: str) -> list[str]:
    prof = load_profile(name)
    return [f"  {name}", *_wrapped("      ", prof.description),
            *_wrapped("      ", provenance(prof))]


@app.command()
def check(
    kind: str = typer.Argument(..., help="policy, workload or profile"),
    path: str = typer.Argument(..., help="Preset name or YAML/JSON file"),
) -> None:
    """Validate a policy, workload or profile file and print it back in full."""

    loaders = {"policy": load_policy, "workload": load_workload, "profile": load_profile}
    if kind not in loaders:
        fail(ValueError(f"kind {kind!r}: allowed: policy, workload, profile"))
    try:
        obj = loaders[kind](path)
    except ConfigError as exc:
        fail(exc)
    typer.echo(yaml.safe_dump(to_mapping(obj), sort_keys=False), nl=False)


@bench_app.command("sim")
def bench_sim(
    workload: str = typer.Option("fastrl-example-32b-128gpu", help="Workload to time."),
    policy: str = typer.Option("tlt-cold",
                               help="Policy to time (tlt-cold is the costliest: "
                                    "bandit decisions every interval, spot training)."),
    steps: int = typer.Option(3, min=1),
    seed: int = typer.Option(0),
) -> None:
    """Time the simulator, and how its cost grows with workers x sequences."""

    wl, pols, prof = load_inputs(workload, policy, None, steps)
    pol = pols[0]
    t0 = time.perf_counter()
    simulate(wl, pol, prof, seed=seed, steps=steps)
    per_step = (time.perf_counter() - t0) / steps

    # Scale workers (and prompts with them, so each engine keeps its load) from
    # a quarter to 8x: the cost per step should grow linearly in workers x sequences.
    rows, points = [], []
    for factor in (0.25, 0.5, 1, 2, 4, 8):
        workers = max(1, round(wl.workers * factor))
        prompts = max(1, round(wl.prompts_per_step * workers / wl.workers))
        scaled = replace(wl, workers=workers, prompts_per_step=prompts)
        t0 = time.perf_counter()
        simulate(scaled, pol, prof, seed=seed, steps=1)
        secs = time.perf_counter() - t0
        work = scaled.workers * scaled.sequences_per_step
        points.append((work, secs))
        rows.append([str(scaled.workers), str(scaled.sequences_per_step), f"{secs:.3f}",
                     f"{secs / work * 1e6:.3f}"])
    slope = float(np.polyfit(np.log([p[0] for p in points]), np.log([p[1] for p in points]), 1)[0])
    # Against sequences alone (each engine's load fixed) the cost should be ~linear.
    seqs = [int(r[1]) for r in rows]
    slope_seq = float(np.polyfit(np.log(seqs), np.log([p[1] for p in points]), 1)[0])
    typer.echo(f"{wl.name} / {pol.name}: {per_step:.3f} s per simulated step ({steps} steps)")
    typer.echo(format_table(rows, ["workers", "sequences", "seconds/step", "us per worker*seq"]))
    typer.echo("growth exponent of cost in workers x sequences: "
               f"{slope:.2f}; in sequences: {slope_seq:.2f}")
    typer.echo(json.dumps({"workload": wl.name, "policy": pol.name,
                           "seconds_per_step": round(per_step, 4),
                           "exponent_workers_x_sequences": round(slope, 3),
                           "exponent_sequences": round(slope_seq, 3)}))


@app.command()
def compare(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    policies: str = typer.Option("baseline,static-sd,tlt",
                                 help="Comma-separated policy preset names or files; "
                                      "the first is the reference for speedups."),
    seeds: int = typer.Option(3, min=1,
                              help="Simulate seeds 0..K-1; seed s draws the same response "
                                   "lengths for every policy (common random numbers)."),
    out: Path = typer.Option(..., help="Output directory: compare.json and compare.png."),
    steps: Optional[int] = typer.Option(None, min=1,
                                        help="RL steps per simulation (default: the workload's)."),
    profile: Optional[str] = PROFILE_OPTION,
    workers: int = WORKERS_OPTION,
    address: Optional[str] = ADDRESS_OPTION,
    tool_latency: str = TOOL_LATENCY_OPTION,
    tail_range: bool = TAIL_RANGE_OPTION,
) -> None:
    """Compare policies over several seeds: step time, bubbles, accepted length, their spread."""

    wl, pols, prof = load_inputs(workload, policies, profile, steps)
    scales = tool_scales(tool_latency, wl)
    t0 = time.perf_counter()
    progress = lambda done, total, name, seed: typer.echo(  # noqa: E731
        f"  [{done}/{total}] {name} seed {seed}  ({time.perf_counter() - t0:.1f}s)", err=True)
    result = run_compare(wl, pols, prof, seeds, steps=steps, on_progress=progress,
                         runner=runner_for(workers, address))
    result.save(out)
    s = result.summary()
    rows = []
    for name, r in s.iterrows():
        rows.append([name, f"{r['step_time_s_mean']:,.1f} ± {r['step_time_s_std']:,.1f}",
                     f"{r['rollout_time_s_mean']:,.1f} ± {r['rollout_time_s_std']:,.1f}",
                     f"{r['bubble_fraction_mean']:.1%} ± {r['bubble_fraction_std']:.1%}",
                     f"{r['tail_fraction_mean']:.1%} ± {r['tail_fraction_std']:.1%}",
                     f"{r['mean_accept_len_mean']:.2f} ± {r['mean_accept_len_std']:.2f}",
                     f"{r['speedup']:.2f}x",
                     f"{r['speedup_paired_min']:.2f}-{r['speedup_paired_max']:.2f}x", r["nature"]])
    typer.echo(f"{wl.name} on {prof.name}, {result.steps} steps x "
               f"seeds {result.seeds[0]}..{result.seeds[-1]} (same "
               "draws for every policy); mean ± std over seeds")
    typer.echo(format_table(rows, ["policy", "step s", "rollout s", "bubble", "tail", "accept len",
                                   "speedup", "paired range", "what it does to RL"]))
    typer.echo(f"speedup = {result.reference}'s mean step time / the policy's; "
               "paired range = min-max over seeds of the per-seed ratio")
    for line in interval_lines(result.intervals, result.reference):
        typer.echo(line)
    _print_why(result.why())
    print_agentic(result.agentic_why(), "means over seeds")
    for line in measured_vs_modelled(prof, wl, result.steps, len(result.seeds)):
        typer.echo(line)
    typer.echo(f"wrote {out}/compare.json and {out}/compare.png")
    if tail_range:
        print_tail_sensitivity(wl, pols, prof, result.seeds[0], out, runner_for(workers, address))
    if scales:
        run_tool_sweep(wl, pols, prof, scales, seeds, steps, out, runner_for(workers, address))


@app.command()
def regret(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    policy: str = typer.Option("tlt-cold",
                               help="Base policy (preset or file; chains); the four "
                                    "bandits differ from it only in bandit.algorithm."),
    seeds: int = typer.Option(3, min=1,
                              help="Simulate seeds 0..K-1 (the same draws for every bandit)."),
    out: Path = typer.Option(..., help="Output directory: regret.json and regret.png."),
    steps: Optional[int] = typer.Option(None, min=1,
                                        help="RL steps per simulation (default: the workload's)."),
    profile: Optional[str] = PROFILE_OPTION,
    workers: int = WORKERS_OPTION,
    address: Optional[str] = ADDRESS_OPTION,
) -> None:
    """Regret of BEG-MAB, UCB1, epsilon-greedy and the fixed table against the oracle schedule.

    The oracle: the best fixed draft length per bucket, in hindsight."""

    wl, pols, prof = load_inputs(workload, policy, profile, steps)
    if len(pols) != 1:
        fail(ValueError(f"--policy: give one base policy, not {len(pols)}"))
    base = pols[0]
    try:
        bandit_variants(base)
    except ValueError as exc:
        fail(exc)
    t0 = time.perf_counter()
    progress = lambda done, total, alg, seed: typer.echo(  # noqa: E731
        f"  [{done}/{total}] {alg} seed {seed}  ({time.perf_counter() - t0:.1f}s)", err=True)
    report = bandit_regret(wl, base, prof, seeds, steps=steps, on_progress=progress,
                           runner=runner_for(workers, address))
    report.save(out)
    s = report.summary()
    rows = [[r["label"], f"{r['regret_s_mean']:,.2f} ± {r['regret_s_std']:,.2f}",
             f"{r['regret_pct_mean']:.2f}%", f"{r['clairvoyant_regret_s_mean']:,.2f}",
             f"{r['decisions_mean']:,.0f}",
             f"{r['step_time_s_mean']:,.1f}"] for _, r in s.iterrows()]
    typer.echo(f"{wl.name} on {prof.name}, base policy {base.name} (arms "
               f"{list(base.bandit.arms)}), {report.steps} steps x seeds "
               f"{report.seeds[0]}..{report.seeds[-1]}; mean ± std over seeds")
    typer.echo(format_table(rows, ["bandit", "regret s", "% rollout", "clairvoyant s", "decisions",
                                   "step s"]))
    oracle = ", ".join(f"{lo}-{hi}: {k}" for lo, hi, k in report.oracle_consensus())
    sched = ", ".join(f"{row.min_batch}-{row.max_batch}: {row.draft_len}" for row in base.schedule)
    typer.echo("oracle draft length per bucket (most common over "
               f"runs): {oracle}; {base.name}'s schedule: {sched}")
    typer.echo("regret = worker-seconds lost vs the best fixed draft length per bucket "
               "in hindsight (model time, docs/formats.md); % of rollout worker-time")
    typer.echo(f"wrote {out}/regret.json and {out}/regret.png")
