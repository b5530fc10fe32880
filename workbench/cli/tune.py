"""`tlt tune`: a policy tuned with Optuna over the simulator, written as a policy file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from workbench import tune as tuning
from workbench.cli.apps import app
from workbench.cli.common import PROFILE_OPTION, fail, load_inputs
from workbench.contracts.schema import ConfigError


# The options whose help runs over several lines, out of the signature to keep the command short.
_TARGET_OPTION = typer.Option(
    "auto",
    help="The stack the tuned policy will run on; the search holds only what it runs, so `tlt "
         "export --to TARGET` takes the result unchanged: vllm, sglang (FastRL), verl, tlt-train "
         "(this project's backend) or sim (simulator only, anything goes); 'auto': tlt-train on "
         "a profile calibrated from real traces, else the workload's engine (sglang or vllm).")


@app.command()
def tune(
    workload: str = typer.Option(..., help="Workload preset name or YAML/JSON file."),
    profile: Optional[str] = PROFILE_OPTION,
    trials: int = typer.Option(100, min=1,
                               help="Complete trials the study should hold; "
                                    "a resumed study runs only the rest."),
    seeds: int = typer.Option(3, min=1,
                              help="Score each policy on seeds 0..K-1, the same "
                                   "for every trial (common random numbers)."),
    steps: Optional[int] = typer.Option(None, min=1,
                                        help="RL steps per simulation (default: the workload's)."),
    storage: str = typer.Option(tuning.DEFAULT_STORAGE,
                                help="Optuna storage: an RDB URL (default: runs/tlt-studies.db "
                                     "under the current directory), 'journal:PATH' (a journal "
                                     "file; best for --workers) or 'memory' (keeps nothing)."),
    study: Optional[str] = typer.Option(None,
                                        help="Study name; run again with the same name "
                                             "to resume it (default: tune-WORKLOAD, plus "
                                             "-TARGET when not the workload's engine and -mo "
                                             "in multi-objective mode; -2, -3, ... where the "
                                             "storage holds that name for other inputs)."),
    out: Path = typer.Option(...,
                             help="Where to write the best policy (.yaml, "
                                  ".yml or .json); it loads in `tlt sim`."),
    multi_objective: bool = typer.Option(False, "--multi-objective",
                                         help="Minimise step time and drafter-training "
                                              "GPU-seconds per step; print the Pareto "
                                              "front and write its fastest point."),
    allow_warm_start: bool = typer.Option(False, "--allow-warm-start",
                                          help="Let the search use an offline-trained "
                                               "(warm-start) drafter; the objective "
                                               "does not charge that training."),
    sampler_seed: int = typer.Option(0, help="Seed of the TPE sampler."),
    workers: int = typer.Option(1, min=1,
                                help="Processes running trials at once against "
                                     "the one --storage (journal:PATH or an RDB "
                                     "URL), each sampling with its own seed."),
    target: str = _TARGET_OPTION,
    backend: Optional[str] = typer.Option(None, hidden=True,
                                          help="Former name of --target: real = tlt-train."),
    prune: bool = typer.Option(True, "--prune/--no-prune",
                               help="Stop a trial after a seed when it is more than 10% behind the "
                                    "best trial on the same seeds (single objective)."),
) -> None:
    """Tune a policy with Optuna over the simulator; resumable, and open in optuna-dashboard."""

    wl, presets, prof = load_inputs(workload, ",".join(tuning.PRESETS), profile, steps)
    if out.suffix not in (".yaml", ".yml", ".json"):
        fail(ConfigError("--out", "<file>", str(out), "a .yaml, .yml or .json file name"))
    target = _target(target, backend, prof, wl)
    spec = tuning.TuneSpec(wl, prof, seeds=seeds, steps=steps, multi_objective=multi_objective,
                           allow_warm_start=allow_warm_start, target=target, prune=prune)
    opt, name = _open(spec, study, storage, sampler_seed)
    have = len(tuning.finished_trials(opt))
    where = "memory" if storage in ("", "memory", ":memory:") else storage
    typer.echo(f"study {name!r} in {where}: {have} trials done, running "
               f"{max(0, trials - have)} more ({wl.name} on {prof.name}, seeds 0..{seeds - 1} "
               f"x {spec.n_steps} steps; target {target}: {tuning.SPACES[target].label})", err=True)
    t0 = time.perf_counter()
    try:
        if workers > 1:
            # `opt` reads what they wrote
            tuning.run_parallel(spec, name, storage, trials, workers, sampler_seed)
        else:
            tuning.run_study(opt, spec, trials, [tuning.TrialPrinter(trials, multi_objective)])
    except ConfigError as exc:
        fail(exc)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: finished trials are kept; resume with --study {name}", err=True)
        raise typer.Exit(130)
    if not tuning.complete_trials(opt):
        fail(ValueError(f"study {name!r} has no complete trial"))
    typer.echo(f"tuned in {time.perf_counter() - t0:.1f}s", err=True)
    _report_tuned(opt, spec, presets, name, out)


def _open(spec, study: Optional[str], storage: str, sampler_seed: int):
    """The study to run and its name (without --study: a name of these inputs, never one a study
    of other inputs holds)."""
    try:
        store = tuning.make_storage(storage)
        name = study or tuning.free_study_name(spec, store)
    except Exception as exc:  # a storage URL SQLAlchemy or Optuna cannot open
        fail(ValueError(f"--storage {storage!r}: {exc}"))
    try:
        return tuning.open_study(spec, name, store, sampler_seed=sampler_seed), name
    except ConfigError as exc:
        fail(exc)


def _target(target: str, backend: Optional[str], prof, wl) -> str:
    """--target (or the former --backend), checked;
    'auto' resolved from the profile and workload."""
    if backend is not None:
        if backend not in tuning.LEGACY:
            fail(ConfigError("--backend", "backend", backend,
                             f"--target ({', '.join(tuning.TARGETS)})"))
        target = tuning.LEGACY[backend]
    if target not in ("auto", *tuning.TARGETS):
        fail(ConfigError("--target", "target", target, f"auto, {', '.join(tuning.TARGETS)}"))
    return tuning.default_target(prof, wl) if target == "auto" else target


def _report_tuned(opt, spec, presets: list, name: str, out: Path) -> None:
    """The best policy beside the presets on the same
    draws (and the Pareto front), then the policy file."""
    best = tuning.best_policy(opt)
    table = tuning.comparison_frame(spec, best, presets, opt)
    done = len(tuning.complete_trials(opt))
    typer.echo(f"{spec.workload.name} on {spec.profile.name}, seeds 0..{spec.seeds - 1} "
               f"x {spec.n_steps} steps (same draws for every policy); study {name!r}, "
               f"{done} complete trials and {len(tuning.finished_trials(opt)) - done} "
               f"pruned, best trial {tuning.best_trial(opt).number}")
    typer.echo(tuning.comparison_text(table))
    guard = tuning.best_trial(opt).user_attrs.get("sd_guard")
    typer.echo("SD guard (workbench/tune/guard.py): " + ("; ".join(guard) if guard else
               "the tuned policy runs SD only where the profile predicts it pays"))
    if spec.multi_objective:
        typer.echo("Pareto front (step time vs drafter-training GPU-seconds per step):")
        typer.echo(tuning.pareto_text(tuning.pareto_frame(opt)))
    tuning.write_policy(best, out)
    t = spec.target
    suffix = "sh" if t == "sglang" else "yaml"
    runs = {"tlt-train": "`tlt sim`, `tlt train` and `tlt bench real` run it unchanged",
            "sim": "`tlt sim` runs it; a real stack may not (tune with --target vllm, sglang or "
                   "verl)"}.get(
        t, f"deploy it: tlt export {out} --to {t} --drafter DIR --out {out.stem}.{t}.{suffix}")
    typer.echo(f"wrote {out} (policy {best.name!r}; {runs})")
