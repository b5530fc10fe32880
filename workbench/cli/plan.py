"""`tlt plan`: the cluster shape (TP x engines x max
batch x policy) for a GPU budget or a deadline."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from workbench import plan as planning
from workbench.cli.apps import app
from workbench.cli.common import fail
from workbench.compare.intervals import interval_lines
from workbench.compare.run_interval import carried, chosen_interval, covers_line
from workbench.contracts.policy import load_policy, policy_presets
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import load_workload
from workbench.project import DEFAULT_SAMPLE_STEPS
from workbench.report.tables import format_table
from workbench.tune import EXPORTS, SPACES, TARGETS, refusal


DEFAULT_POLICIES = ("baseline", "tlt-base", "static-sd", "tlt")


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        fail(ValueError(f"{option}: {text!r}; allowed: comma-separated integers, e.g. 1,2,4,8"))


def _spec(workload: str, policies: str, gpu: str, gpus: Optional[int],
          deadline_days: Optional[float], max_gpus: int, price: float, tp: str, max_batch: str,
          framework: Optional[str], model: Optional[str], trials: int, steps: Optional[int],
          sample_steps: int, seeds: int, seed: int, target: str,
          ep: Optional[int] = None) -> planning.PlanSpec:
    try:
        wl = load_workload(workload)
        names = [p.strip() for p in policies.split(",") if p.strip()] or [
            n for n in DEFAULT_POLICIES if refusal(load_policy(n), target) is None]
        pols = tuple(load_policy(n) for n in names)
        spec = planning.PlanSpec(wl, pols, gpu, price, framework or wl.framework or "sglang",
                                 model or "", _ints(tp, "--tp"), _ints(max_batch, "--max-batch"),
                                 gpus, deadline_days, max_gpus, trials, steps, sample_steps, seeds,
                                 seed, ep)
        spec.check()
    except ConfigError as exc:
        fail(exc)
    names = [p.name for p in spec.policies]
    if len(set(names)) != len(names):
        fail(ValueError("--policies: two policies share a name; "
                        "give each file a distinct 'name' field"))
    for pol in spec.policies:
        why = refusal(pol, target)
        if why:
            runs = [n for n in policy_presets() if refusal(load_policy(n), target) is None]
            fail(ConfigError("--policies", pol.name, why,
                             f"policies {SPACES[target].label} runs (presets: "
                             f"{', '.join(runs)}), or --target sim to plan with any"))
    return spec


# The options whose help runs over several lines, out of the signature to keep the command short.
_WORKLOAD_OPTION = typer.Option(...,
                                help="Workload preset or file: the job (prompts, group size, "
                                     "lengths); its engine shape is what the plan searches.")
_GPU_OPTION = typer.Option(...,
                           help="GPU type (h100, h200, b200, a100, l40s, "
                                "...; `tlt gpu-presets` lists them).")
_GPUS_OPTION = typer.Option(None,
                            help="GPU budget: at most this many GPUs (the count and its halves "
                                 "down to 1/16 are searched); the fastest shape is chosen.")
_DEADLINE_DAYS_OPTION = typer.Option(None,
                                     help="Deadline in days instead of a budget: "
                                          "the cheapest shape meeting it is chosen.")
_CURRENCY_OPTION = typer.Option("USD",
                                help="The currency of --price-per-gpu-hour "
                                     "(printed with every cost).")
_TARGET_OPTION = typer.Option(
    "auto",
    help="The stack the chosen policy will run on: vllm, sglang, verl, "
         "tlt-train or sim; every policy searched must run there, so the chosen "
         "one exports ('auto': the engine of --framework, else of the workload).")
_EP_OPTION = typer.Option(None, min=1,
                          help="A mixture-of-experts model's expert parallelism in every engine "
                               "(default: the framework's, EP1); a TP it does not divide is "
                               "infeasible.")
_POLICIES_OPTION = typer.Option(
    "", help="Comma-separated policy presets or files searched (default: "
             "those of baseline, tlt-base, static-sd and tlt the target runs).")


@app.command()
def plan(
    workload: str = _WORKLOAD_OPTION,
    gpu: str = _GPU_OPTION,
    gpus: Optional[int] = _GPUS_OPTION,
    deadline_days: Optional[float] = _DEADLINE_DAYS_OPTION,
    max_gpus: int = typer.Option(512, help="With --deadline-days: the largest GPU count searched."),
    price_per_gpu_hour: float = typer.Option(..., help="Price of one GPU-hour, in --currency."),
    currency: str = _CURRENCY_OPTION,
    target: str = _TARGET_OPTION,
    policies: str = _POLICIES_OPTION,
    tp: str = typer.Option("1,2,4,8", help="Tensor-parallel degrees searched."),
    max_batch: str = typer.Option("64,128,256",
                                  help="Max sequences per engine (max_num_seqs) searched."),
    framework: Optional[str] = typer.Option(None,
                                            help="Engine framework of the measured data (vllm or "
                                                 "sglang; default: the workload's, else sglang)."),
    model: Optional[str] = typer.Option(None,
                                        help="Model (architecture preset or "
                                             "config; default: the workload's)."),
    ep: Optional[int] = _EP_OPTION,
    trials: int = typer.Option(40,
                               help="Distinct shapes to evaluate (NSGA-II over days and cost)."),
    steps: Optional[int] = typer.Option(
        None, help="RL steps of the whole run (default: the workload's)."),
    sample_steps: int = typer.Option(DEFAULT_SAMPLE_STEPS,
                                     help="Steps simulated per run; a longer run is sampled "
                                         "in blocks (as tlt project)."),
    seeds: int = typer.Option(1, help="Seeds per shape (the same draws for every shape)."),
    seed: int = typer.Option(0, help="Seed of the NSGA-II sampler."),
    out: Path = typer.Option(...,
                             help="Output directory: plan.json, plan.png, and the chosen "
                                  "shape's workload.yaml, policy.yaml and profile.yaml."),
) -> None:
    """Search cluster shapes for a GPU budget or a deadline: run time vs cost (and energy)."""

    if target not in ("auto", *TARGETS):
        fail(ConfigError("--target", "target", target, f"auto, {', '.join(TARGETS)}"))
    if target == "auto":
        # the engine the plan's costs are of: --framework, else the workload's, else SGLang
        try:
            fw = framework or load_workload(workload).framework
        except ConfigError:
            fw = framework  # _spec reports the workload's error
        target = {"sglang": "sglang", "vllm": "vllm"}.get(fw or "sglang", "sim")
    spec = _spec(workload, policies, gpu, gpus, deadline_days, max_gpus, price_per_gpu_hour, tp,
                 max_batch, framework, model, trials, steps, sample_steps, seeds, seed, target, ep)
    goal = (f"budget {spec.gpus} GPUs" if spec.goal == "budget" else
            f"deadline {spec.deadline_days:g} days, up to {spec.max_gpus} GPUs")
    typer.echo(f"{spec.workload.name} on {spec.gpu} ({spec.framework}), {goal}, "
               f"{spec.price_per_gpu_hour:g} {currency} per GPU-hour, target "
               f"{SPACES[target].label}; up to "
               f"{min(spec.trials, spec.space_size)} of {spec.space_size} shapes", err=True)
    progress = lambda t: typer.echo(  # noqa: E731
        f"  [{t.number}] {t.shape.label}: "
        + (f"{t.days:.2f} days, {t.cost:,.0f} {currency}" if t.days is not None else "")
        + (f" {t.status}" if not t.feasible else "") + (f" ({t.reason})" if t.reason else "")
        + (f"  {t.seconds:.1f}s" if t.seconds else "  (again)"), err=True)
    try:
        result = planning.run_plan(spec, on_trial=progress)
    except ConfigError as exc:
        fail(exc)
    paths = result.save(out)
    typer.echo(f"Pareto front ({len(result.front)} of "
               f"{len(result.trials)} trials; {result.method}):")
    typer.echo(format_table(planning.shape_rows(result.front, spec.sequence_tokens),
                            planning.ROW_HEADERS))
    if result.screened:
        typer.echo(f"engine shapes that cannot run on {spec.gpu} (screened, never proposed):")
        typer.echo(format_table([[f"TP{t.shape.tp}", str(t.shape.max_batch),
                                  t.reason] for t in result.screened],
                                ["TP", "max batch", "why"]))
    bad = [t for t in result.trials if t.status == "infeasible"]
    if bad:
        typer.echo(f"not feasible ({len({t.shape for t in bad})} shapes):")
        typer.echo(format_table(planning.shape_rows(bad, spec.sequence_tokens),
                                planning.ROW_HEADERS))
    _print_chosen(result, currency, target, out)
    typer.echo(f"searched in {result.seconds:.1f}s; energy: GPU board power only; wrote " +
               ", ".join(str(p) for p in paths))


def _print_chosen(result: planning.Plan, currency: str, target: str, out: Path) -> None:
    """The chosen shape in the currency given, and how to deploy its policy on the target."""
    spec, c = result.spec, result.chosen
    rule = "fastest within the budget" if spec.goal == "budget" else "cheapest meeting the deadline"
    if c is None:
        why = "no feasible shape" if spec.goal == "budget" else "no shape meets the deadline"
        typer.echo(f"chosen: none ({why})")
        return
    energy = ("energy unknown (no power model)" if c.energy_kwh is None
              else f"{c.energy_kwh:,.0f} kWh")
    typer.echo(f"chosen ({rule}): {c.shape.label}: {c.days:.2f} days, {c.cost:,.0f} "
               f"{currency}, {energy}, {c.gpu_hours:,.0f} GPU-hours (profile {c.profile})")
    iv = chosen_interval(result.chosen_run())
    if iv is not None:
        days, money = carried(iv.step_s, c.days), carried(iv.step_s, c.cost)
        typer.echo(f"  {days.level:.0%}: {days.low:.2f}-{days.high:.2f} days, "
                   f"{money.low:,.0f}-{money.high:,.0f} {currency} ({covers_line(iv.covers)})")
    else:
        typer.echo(f"  {interval_lines(None, '')[0]}")
    if target in EXPORTS:
        typer.echo(f"deploy it: tlt export {out}/policy.yaml --to {target} --drafter DIR --out "
                   f"{out}/policy.{target}.{'sh' if target == 'sglang' else 'yaml'}")
