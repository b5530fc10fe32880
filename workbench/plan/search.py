"""The search: its spec (`PlanSpec`), the shapes and their evaluation (`Planner`), the NSGA-II study
(`run_plan`) and its result (`Plan`: front, chosen shape, files)."""

from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import optuna
import yaml
from matplotlib.figure import Figure

from workbench.calibrate.gpu_catalog import disk_cached_profile, model_choices
from workbench.calibrate.measured_gpu import gpu_names, latest_version, model_name, system_spec
from workbench.contracts.architecture import load_architecture
from workbench.contracts.cluster import check_workload_profile
from workbench.contracts.fileio import save_figure, sig, write_atomic
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError, to_mapping
from workbench.contracts.seeds import Stream, derive_seed
from workbench.contracts.workload import Workload
from workbench.plan.fit import mean_response_tokens, memory_fit
from workbench.project import DEFAULT_SAMPLE_STEPS, project

SCHEMA = "tlt-plan/1"
GPU_FRACTIONS = (1, 2, 4, 8, 16)  # the cap divided by these: the GPU counts searched
ANY = "any"  # the policy of a screened engine shape (no policy makes it fit)
PROPOSALS_PER_SHAPE = 3  # sampler proposals allowed per distinct shape asked for (NSGA-II repeats shapes)
# Optuna 5 records constraints on the trial; 4 takes them from the sampler's constraints_func.
_SET_CONSTRAINT = hasattr(optuna.trial.Trial, "set_constraint")


@dataclass(frozen=True)
class PlanSpec:
    """What a plan searches and for what."""

    workload: Workload  # the job: prompts, group size, lengths (its shape fields are what is searched)
    policies: tuple[Policy, ...]
    gpu: str
    price_per_gpu_hour: float
    framework: str = "sglang"
    model: str = ""  # architecture name or config path ("": the workload's model)
    tps: tuple[int, ...] = (1, 2, 4, 8)
    max_batches: tuple[int, ...] = (64, 128, 256)
    gpus: int | None = None  # budget: at most this many GPUs
    deadline_days: float | None = None
    max_gpus: int = 512  # under a deadline: the largest count searched
    trials: int = 40
    steps: int | None = None  # RL steps of the whole run (None: the workload's)
    sample_steps: int = DEFAULT_SAMPLE_STEPS
    seeds: int = 1
    seed: int = 0

    def check(self) -> None:
        """Refuse bad inputs before any work, naming the option."""
        if (self.gpus is None) == (self.deadline_days is None):
            raise ConfigError("plan", "--gpus/--deadline-days", "both" if self.gpus else "neither",
                              "exactly one: a GPU budget (--gpus N) or a deadline (--deadline-days D)")
        if self.gpus is not None and self.gpus < 1:
            raise ConfigError("plan", "--gpus", self.gpus, "an integer >= 1 (the most GPUs the job may use)")
        if self.deadline_days is not None and not self.deadline_days > 0:
            raise ConfigError("plan", "--deadline-days", self.deadline_days, "a number of days > 0")
        if not self.price_per_gpu_hour > 0:
            raise ConfigError("plan", "--price-per-gpu-hour", self.price_per_gpu_hour, "a price > 0 per GPU-hour")
        for opt, values in (("--tp", self.tps), ("--max-batch", self.max_batches)):
            if not values or any(v < 1 for v in values):
                raise ConfigError("plan", opt, list(values), "a comma-separated list of integers >= 1")
        if not self.policies:
            raise ConfigError("plan", "--policies", [], "at least one policy")
        for opt, v in (("--trials", self.trials), ("--seeds", self.seeds), ("--sample-steps", self.sample_steps),
                       ("--steps", self.n_steps), ("--max-gpus", self.max_gpus)):
            if v < 1:
                raise ConfigError("plan", opt, v, "an integer >= 1")
        if self.seed < 0:
            raise ConfigError("plan", "--seed", self.seed, "an integer >= 0")
        if self.gpu not in gpu_names():
            raise ConfigError("plan", "--gpu", self.gpu, "one of " + ", ".join(gpu_names()))
        latest_version(self.gpu, self.framework)  # refuses a framework not measured on this GPU, naming it
        if not self.model_name:
            raise ConfigError("plan", "--model", "", "the model to plan for (the workload names none)")
        load_architecture(self.architecture)

    @property
    def model_name(self) -> str:
        return self.model or self.workload.model

    @property
    def architecture(self) -> str:
        return model_choices().get(self.model_name, self.model_name)

    @property
    def cap(self) -> int:
        return self.gpus if self.gpus is not None else self.max_gpus

    @property
    def n_steps(self) -> int:
        return self.workload.steps if self.steps is None else self.steps

    @property
    def sequence_tokens(self) -> int:
        return self.workload.prompt_tokens + self.workload.max_response_tokens

    @property
    def space_size(self) -> int:
        return len(set(self.tps)) * len(gpu_choices(self.cap)) * len(set(self.max_batches)) * len(self.policies)

    @property
    def goal(self) -> str:
        return "budget" if self.gpus is not None else "deadline"


def gpu_choices(cap: int) -> list[int]:
    """The GPU counts searched: the cap and its halves down to 1/16 (whole counts only), largest first."""
    return sorted({cap // f for f in GPU_FRACTIONS if cap % f == 0 and cap // f >= 1}, reverse=True)


@dataclass(frozen=True)
class Shape:
    tp: int
    gpus: int
    max_batch: int
    policy: str

    @property
    def engines(self) -> int:
        return self.gpus // self.tp

    @property
    def label(self) -> str:
        if self.gpus == 0:
            return f"TP{self.tp}, max batch {self.max_batch} (any GPU count, any policy)"
        return f"{self.engines}x TP{self.tp} ({self.gpus} GPUs), max batch {self.max_batch}, {self.policy}"


@dataclass
class PlanTrial:
    """One trial: its shape and either its projection or why it was not run."""

    number: int
    shape: Shape
    status: str  # ok, deadline missed, infeasible
    reason: str = ""
    profile: str = ""
    days: float | None = None
    gpu_hours: float | None = None
    cost: float | None = None
    energy_kwh: float | None = None
    mean_step_min: float | None = None
    kv_tokens: int = 0
    kv_demand_tokens: int = 0  # max_batch x (prompt + mean response): a full batch's KV cache
    method: str = ""
    seconds: float = 0.0

    @property
    def feasible(self) -> bool:
        return self.status == "ok"


def pareto_front(trials: Sequence[PlanTrial]) -> list[PlanTrial]:
    """Feasible trials no other feasible trial beats on both days and cost (one per shape), fastest first."""
    ok = {t.shape: t for t in trials if t.feasible}.values()
    front = [t for t in ok if not any((o.days <= t.days and o.cost <= t.cost) and (o.days < t.days or o.cost < t.cost)
                                      for o in ok)]
    return sorted(front, key=lambda t: (t.days, t.cost))


def choose(trials: Sequence[PlanTrial], goal: str) -> PlanTrial | None:
    ok = [t for t in trials if t.feasible]
    if not ok:
        return None
    key = (lambda t: (t.days, t.cost)) if goal == "budget" else (lambda t: (t.cost, t.days))
    return min(ok, key=key)


class Planner:
    """Evaluates shapes for one spec, each profile and each shape once."""

    def __init__(self, spec: PlanSpec):
        spec.check()
        self.spec = spec
        self.arch = load_architecture(spec.architecture)
        self.system = system_spec(spec.gpu)
        self.policies = {p.name: p for p in spec.policies}
        self.profiles: dict[int, Profile | ConfigError] = {}
        self.done: dict[Shape, PlanTrial] = {}
        self.sequence_tokens = spec.sequence_tokens
        self.mean_sequence_tokens = spec.workload.prompt_tokens + round(mean_response_tokens(spec.workload,
                                                                                              spec.n_steps))

    def profile(self, tp: int) -> Profile:
        if tp not in self.profiles:
            s = self.spec
            try:
                self.profiles[tp] = disk_cached_profile(s.architecture, s.gpu, tp, s.framework, s.workload.profile)
            except ConfigError as exc:
                self.profiles[tp] = exc
            except RuntimeError as exc:  # the package's PerfDataNotAvailableError: shapes it never measured
                why = f"a model and TP whose operators it measured ({exc})".replace("\n", " ")
                self.profiles[tp] = ConfigError(f"measured database ({s.gpu}, {s.framework})", "tp", tp, why)
        got = self.profiles[tp]
        if isinstance(got, ConfigError):
            raise got
        return got

    def workload_for(self, shape: Shape, prof: Profile) -> Workload:
        c = prof.cluster
        return replace(self.spec.workload, workers=shape.engines, gpus_per_worker=shape.tp, max_batch=shape.max_batch,
                       profile=prof.name, model=c.model, gpu=c.gpu, framework=c.framework)

    def evaluate(self, number: int, shape: Shape) -> PlanTrial:
        if shape in self.done:
            return replace(self.done[shape], number=number, seconds=0.0)
        t0 = time.perf_counter()
        trial = self._evaluate(number, shape)
        trial.seconds = time.perf_counter() - t0
        self.done[shape] = trial
        return trial

    def engine_fit(self, tp: int, max_batch: int) -> tuple[str, int, int]:
        """(why an engine of this TP and max batch cannot run, "" when it can; KV tokens it holds; KV
        tokens a full batch at the mean length needs): the same for every GPU count and policy."""
        fit = memory_fit(self.arch, self.system, tp, self.sequence_tokens)
        demand = max_batch * self.mean_sequence_tokens
        if fit.reason or demand <= fit.kv_tokens:
            return fit.reason, fit.kv_tokens, demand
        return (f"a full batch of {max_batch} at the mean length needs {demand:,} KV tokens, the engine holds "
                f"{fit.kv_tokens:,} (it would preempt, which the simulator does not model)", fit.kv_tokens, demand)

    def screen(self) -> tuple[list[tuple[int, int]], list[PlanTrial]]:
        """The (TP, max batch) pairs that can run, and a marked entry for each that cannot."""
        ok, bad = [], []
        for tp in sorted(set(self.spec.tps)):
            for b in sorted(set(self.spec.max_batches)):
                why, kv, demand = self.engine_fit(tp, b)
                if why:
                    bad.append(PlanTrial(-1, Shape(tp, 0, b, ANY), "infeasible", why, kv_tokens=kv,
                                         kv_demand_tokens=demand))
                else:
                    ok.append((tp, b))
        return ok, bad

    def _evaluate(self, number: int, shape: Shape) -> PlanTrial:
        s = self.spec
        if shape.gpus % shape.tp:
            return PlanTrial(number, shape, "infeasible", f"TP{shape.tp} does not divide {shape.gpus} GPUs")
        why, kv, demand = self.engine_fit(shape.tp, shape.max_batch)
        if why:
            return PlanTrial(number, shape, "infeasible", why, kv_tokens=kv, kv_demand_tokens=demand)
        try:
            prof = self.profile(shape.tp)
            wl = self.workload_for(shape, prof)
            check_workload_profile(wl, prof, f"plan shape {shape.label}")
            result = project(wl, [self.policies[shape.policy]], prof, s.seeds, s.n_steps, s.sample_steps,
                             price_per_gpu_hour=s.price_per_gpu_hour, power=prof.power)
        except (ConfigError, ValueError) as exc:
            return PlanTrial(number, shape, "infeasible", str(exc), kv_tokens=kv, kv_demand_tokens=demand)
        mean = lambda key: None if (v := result.figure_values(shape.policy, key)) is None else float(v.mean())  # noqa: E731
        days = mean("days")
        late = s.deadline_days is not None and days > s.deadline_days
        return PlanTrial(number, shape, "deadline missed" if late else "ok",
                         f"{days:.2f} days > deadline {s.deadline_days:g}" if late else "", prof.name, days,
                         mean("gpu_hours"), mean("cost"), mean("energy_kwh"), mean("mean_step_min"), kv, demand,
                         result.method)


@dataclass
class Plan:
    spec: PlanSpec
    trials: list[PlanTrial]
    seconds: float
    profiles: dict[int, Profile] = field(default_factory=dict)  # TP -> derived profile (for the chosen files)
    screened: list[PlanTrial] = field(default_factory=list)  # engine shapes that cannot run, found before the search

    @property
    def front(self) -> list[PlanTrial]:
        return pareto_front(self.trials)

    @property
    def chosen(self) -> PlanTrial | None:
        return choose(self.trials, self.spec.goal)

    @property
    def method(self) -> str:
        s = self.spec
        how = {t.method for t in self.trials if t.method} or {"none"}
        return (f"each shape projected over {s.n_steps} RL steps ({'/'.join(sorted(how))}: {s.sample_steps} steps "
                f"simulated at most per run, workbench/project.py), seeds 0..{s.seeds - 1}; profiles from "
                f"aiconfigurator-core's measured database ({s.gpu}, {s.framework}), acceptance and learning curve of "
                f"{s.workload.profile}")

    def chosen_workload(self) -> Workload | None:
        c = self.chosen
        s = self.spec
        return None if c is None else replace(
            s.workload, name=f"{s.workload.name}-plan", workers=c.shape.engines, gpus_per_worker=c.shape.tp,
            max_batch=c.shape.max_batch, profile="profile.yaml", model=model_name(s.architecture), gpu=s.gpu,
            framework=s.framework, steps=s.n_steps,
            description=f"{s.workload.name} in the shape tlt plan chose: {c.shape.label} on {s.gpu}, {s.framework}.")

    def chosen_policy(self) -> Policy | None:
        c = self.chosen
        return None if c is None else next(p for p in self.spec.policies if p.name == c.shape.policy)

    def to_dict(self) -> dict:
        s = self.spec
        row = lambda t: {**_rounded(asdict(t)), "shape": {**asdict(t.shape), "engines": t.shape.engines}}  # noqa: E731
        chosen = self.chosen
        return {
            "schema": SCHEMA, "workload": s.workload.name, "model": model_name(s.architecture), "gpu": s.gpu,
            "framework": s.framework, "goal": s.goal, "gpus": s.gpus, "deadline_days": s.deadline_days,
            "max_gpus": s.max_gpus if s.goal == "deadline" else None, "price_per_gpu_hour": s.price_per_gpu_hour,
            "steps": s.n_steps, "seeds": s.seeds, "seed": s.seed, "trials_requested": s.trials,
            "proposals": len(self.trials),
            "search_space": {"tp": list(s.tps), "gpus": gpu_choices(s.cap), "max_batch": list(s.max_batches),
                             "policy": [p.name for p in s.policies]},
            "sampler": "optuna NSGA-II (objectives: days, cost; both minimised)", "method": self.method,
            "objectives": ["days", "cost"], "energy_scope": "GPU board power only (no host, network or cooling)",
            "search_seconds": round(self.seconds, 2),
            "shapes_evaluated": len({t.shape for t in self.trials}),
            "chosen": None if chosen is None else row(chosen),
            "chosen_rule": ("fastest feasible shape within the GPU budget" if s.goal == "budget"
                            else "cheapest shape meeting the deadline"),
            "front": [row(t) for t in self.front], "trials": [row(t) for t in self.trials],
            "screened": [row(t) for t in self.screened],
        }

    def figure(self) -> Figure:
        fig = Figure(figsize=(8.0, 5.0), layout="constrained")
        ax = fig.subplots()
        ran = [t for t in self.trials if t.days is not None]
        late = [t for t in ran if not t.feasible]
        ok = [t for t in ran if t.feasible]
        ax.scatter([t.days for t in ok], [t.cost for t in ok], s=18, color="#9aa5b1", label="feasible shape")
        if late:
            ax.scatter([t.days for t in late], [t.cost for t in late], s=18, marker="x", color="#bbbbbb",
                       label="deadline missed")
        front = self.front
        ax.plot([t.days for t in front], [t.cost for t in front], "o-", color="#d62728", drawstyle="steps-post",
                label="Pareto front")
        for t in front:
            ax.annotate(f"TP{t.shape.tp}x{t.shape.engines} b{t.shape.max_batch} {t.shape.policy}", (t.days, t.cost),
                        fontsize=7, xytext=(4, 4), textcoords="offset points")
        if self.chosen is not None:
            ax.scatter([self.chosen.days], [self.chosen.cost], s=160, marker="*", color="#e4a11b", zorder=5,
                       label="chosen")
        if self.spec.deadline_days is not None:
            ax.axvline(self.spec.deadline_days, color="k", ls="--", lw=1, label="deadline")
        ax.set_xlabel("whole run (days)")
        ax.set_ylabel(f"cost (at {self.spec.price_per_gpu_hour:g} per GPU-hour)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        n_bad = len({t.shape for t in self.trials if t.status == "infeasible"}) + len(self.screened)
        ax.set_title(f"{self.spec.workload.name} on {self.spec.gpu}: {len({t.shape for t in self.trials})} shapes "
                     f"({len(self.trials)} proposals); {n_bad} cannot run (not plotted)", fontsize=10)
        return fig

    def chosen_files(self) -> dict[str, str]:
        """File name -> YAML text of the chosen shape: workload.yaml (naming profile.yaml beside it),
        policy.yaml and profile.yaml; empty when nothing was chosen."""
        wl, pol = self.chosen_workload(), self.chosen_policy()
        if wl is None or pol is None:
            return {}
        prof = self.profiles[wl.gpus_per_worker]
        dump = lambda obj: yaml.safe_dump(to_mapping(obj), sort_keys=False)  # noqa: E731
        return {"workload.yaml": dump(wl), "policy.yaml": dump(pol), "profile.yaml": dump(prof)}

    def save(self, out_dir: str | Path) -> list[Path]:
        """plan.json, plan.png and the chosen shape's files (`chosen_files`), each written atomically;
        `tlt sim --workload DIR/workload.yaml --policy DIR/policy.yaml` runs the chosen shape."""
        out = Path(out_dir)
        paths = [out / "plan.json", out / "plan.png"]
        write_atomic(paths[0], json.dumps(self.to_dict(), indent=2) + "\n")
        save_figure(self.figure(), paths[1])
        for name, text in self.chosen_files().items():
            write_atomic(out / name, text)
            paths.append(out / name)
        return paths


def _rounded(d: dict) -> dict:
    """Floats to 4 significant digits, so a rerun on another CPU writes the same file."""
    return {k: sig(v, 4) if isinstance(v, float) and math.isfinite(v) else v for k, v in d.items()}


def _engine_key(tp: int, max_batch: int) -> str:
    return f"tp{tp}-b{max_batch}"


def _objective(planner: Planner, engines: list[tuple[int, int]], trials: list[PlanTrial],
               on_trial: Callable[[PlanTrial], None] | None) -> Callable[[optuna.trial.Trial], tuple[float, float]]:
    s = planner.spec
    by_key = {_engine_key(tp, b): (tp, b) for tp, b in engines}

    def run(trial: optuna.trial.Trial) -> tuple[float, float]:
        # One categorical over the engine shapes that fit (TP and max batch together), so the sampler
        # never proposes one the screen already refused.
        tp, batch = by_key[trial.suggest_categorical("engine", list(by_key))]
        shape = Shape(tp, trial.suggest_categorical("gpus", gpu_choices(s.cap)), batch,
                      trial.suggest_categorical("policy", list(planner.policies)))
        t = planner.evaluate(trial.number, shape)
        trials.append(t)
        if on_trial is not None:
            on_trial(t)
        if t.days is None:
            raise optuna.TrialPruned(t.reason)  # not run: no objective values, kept in the plan as infeasible
        # Constrained domination (NSGA-II): a shape past the deadline ranks below every shape meeting it.
        late = t.days - s.deadline_days if s.deadline_days is not None else -1.0
        if _SET_CONSTRAINT:
            trial.set_constraint("deadline", late)
        else:
            trial.set_user_attr("deadline", [late])
        return t.days, t.cost

    return run


def run_plan(spec: PlanSpec, on_trial: Callable[[PlanTrial], None] | None = None) -> Plan:
    """Search `spec.trials` distinct shapes (or the whole space, when smaller) with NSGA-II (seeded) and
    project each; a shape proposed again is not re-run, and the search stops after 3x `trials`
    proposals. The workload's own shape is tried first with every policy, when it lies in the space."""
    planner = Planner(spec)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.NSGAIISampler(
            seed=derive_seed(spec.seed, Stream.PLAN_SAMPLER), population_size=max(4, min(20, spec.trials // 3)),
            **({} if _SET_CONSTRAINT else {"constraints_func": lambda t: t.user_attrs.get("deadline", [1.0])}))
        study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    engines, screened = planner.screen()
    wl = spec.workload
    if (wl.gpus_per_worker, wl.max_batch) in engines and wl.gpus in gpu_choices(spec.cap):
        for p in spec.policies:
            study.enqueue_trial({"engine": _engine_key(wl.gpus_per_worker, wl.max_batch), "gpus": wl.gpus,
                                 "policy": p.name})
    trials: list[PlanTrial] = []
    t0 = time.perf_counter()
    objective = _objective(planner, engines, trials, on_trial)
    want = min(spec.trials, len(engines) * len(gpu_choices(spec.cap)) * len(spec.policies))
    while len(planner.done) < want and len(trials) < PROPOSALS_PER_SHAPE * spec.trials:
        study.optimize(objective, n_trials=1, catch=())
    profiles = {tp: p for tp, p in planner.profiles.items() if isinstance(p, Profile)}
    return Plan(spec, trials, time.perf_counter() - t0, profiles, screened)


def shape_rows(trials: Sequence[PlanTrial], sequence_tokens: int) -> list[list[str]]:
    """Table rows: shape, days, cost, energy, GPU-hours, step minutes, sequences at the cap the KV
    cache holds per engine, status."""
    fmt = lambda v, d: "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{d}f}"  # noqa: E731
    return [[str(t.number), f"TP{t.shape.tp}", str(t.shape.engines), str(t.shape.gpus), str(t.shape.max_batch),
             t.shape.policy, fmt(t.days, 2), fmt(t.cost, 0), fmt(t.energy_kwh, 0), fmt(t.gpu_hours, 0),
             fmt(t.mean_step_min, 1), f"{t.kv_tokens // sequence_tokens:,}" if t.kv_tokens else "-",
             t.status if t.feasible or not t.reason else f"{t.status}: {t.reason}"]
            for t in trials]


ROW_HEADERS = ["trial", "TP", "engines", "GPUs", "max batch", "policy", "days", "cost", "energy kWh", "GPU-hours",
               "step min", "KV seqs@cap", "status"]
