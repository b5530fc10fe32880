"""The search's parts: its spec (`PlanSpec`), the shapes, each trial (`PlanTrial`), the front and
the chosen shape, and the evaluation of a shape (`Planner`). The study that runs them is study.py;
the plan it returns, result.py."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Sequence

from workbench.calibrate.database.catalog import disk_cached_profile, model_choices
from workbench.calibrate.database.aiconfigurator import gpu_names, latest_version, system_spec
from workbench.contracts.architecture import load_architecture
from workbench.contracts.cluster_check import check_workload_profile
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import Workload
from workbench.plan.fit import mean_response_tokens, memory_fit
from workbench.project import DEFAULT_SAMPLE_STEPS, project

GPU_FRACTIONS = (1, 2, 4, 8, 16)  # the cap divided by these: the GPU counts searched
ANY = "any"  # the policy of a screened engine shape (no policy makes it fit)


@dataclass(frozen=True)
class PlanSpec:
    """What a plan searches and for what."""

    # the job: prompts, group size, lengths (its shape fields are what is searched)
    workload: Workload
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
    ep: int | None = None  # a mixture of experts' expert parallelism (None: the framework's)

    def check(self) -> None:
        """Refuse bad inputs before any work, naming the option."""
        if (self.gpus is None) == (self.deadline_days is None):
            raise ConfigError("plan", "--gpus/--deadline-days", "both" if self.gpus else "neither",
                              "exactly one: a GPU budget (--gpus N) or a deadline "
                              "(--deadline-days D)")
        if self.gpus is not None and self.gpus < 1:
            raise ConfigError("plan", "--gpus", self.gpus,
                              "an integer >= 1 (the most GPUs the job may use)")
        if self.deadline_days is not None and not self.deadline_days > 0:
            raise ConfigError("plan", "--deadline-days", self.deadline_days, "a number of days > 0")
        if not self.price_per_gpu_hour > 0:
            raise ConfigError("plan", "--price-per-gpu-hour", self.price_per_gpu_hour,
                              "a price > 0 per GPU-hour")
        for opt, values in (("--tp", self.tps), ("--max-batch", self.max_batches)):
            if not values or any(v < 1 for v in values):
                raise ConfigError("plan", opt, list(values),
                                  "a comma-separated list of integers >= 1")
        if not self.policies:
            raise ConfigError("plan", "--policies", [], "at least one policy")
        for opt, v in (("--trials", self.trials), ("--seeds", self.seeds),
                       ("--sample-steps", self.sample_steps), ("--steps", self.n_steps),
                       ("--max-gpus", self.max_gpus)):
            if v < 1:
                raise ConfigError("plan", opt, v, "an integer >= 1")
        if self.seed < 0:
            raise ConfigError("plan", "--seed", self.seed, "an integer >= 0")
        if self.ep is not None and self.ep < 1:
            raise ConfigError("plan", "--ep", self.ep, "an expert-parallel degree >= 1")
        if self.gpu not in gpu_names():
            raise ConfigError("plan", "--gpu", self.gpu, "one of " + ", ".join(gpu_names()))
        # refuses a framework not measured on this GPU, naming it
        latest_version(self.gpu, self.framework)
        if not self.model_name:
            raise ConfigError("plan", "--model", "",
                              "the model to plan for (the workload names none)")
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
        shapes = len(set(self.tps)) * len(gpu_choices(self.cap)) * len(set(self.max_batches))
        return shapes * len(self.policies)

    @property
    def goal(self) -> str:
        return "budget" if self.gpus is not None else "deadline"


def gpu_choices(cap: int) -> list[int]:
    """The GPU counts searched: the cap and its halves down to 1/16 (whole counts only), largest
    first."""
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
    def screened(self) -> bool:
        """An engine shape refused before the search: for any GPU count and policy."""
        return self.gpus == 0

    @property
    def label(self) -> str:
        if self.screened:
            return f"TP{self.tp}, max batch {self.max_batch} (any GPU count, any policy)"
        if self.gpus % self.tp:
            return (f"TP{self.tp} on {self.gpus} GPUs (TP{self.tp} does not divide them), max "
                    f"batch {self.max_batch}, {self.policy}")
        return (f"{self.engines}x TP{self.tp} ({self.gpus} GPUs), max batch {self.max_batch}, "
                f"{self.policy}")


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
    """Feasible trials no other feasible trial beats on both days and cost (one per shape), fastest
    first."""
    ok = {t.shape: t for t in trials if t.feasible}.values()
    front = [t for t in ok
             if not any((o.days <= t.days and o.cost <= t.cost)
                        and (o.days < t.days or o.cost < t.cost) for o in ok)]
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
        mean_response = mean_response_tokens(spec.workload, spec.n_steps)
        self.mean_sequence_tokens = spec.workload.prompt_tokens + round(mean_response)

    def profile(self, tp: int) -> Profile:
        if tp not in self.profiles:
            s = self.spec
            try:
                self.profiles[tp] = disk_cached_profile(s.architecture, s.gpu, tp, s.framework,
                                                        s.workload.profile, s.ep)
            except ConfigError as exc:
                self.profiles[tp] = exc
            # the package's PerfDataNotAvailableError: shapes it never measured
            except RuntimeError as exc:
                why = f"a model and TP whose operators it measured ({exc})".replace("\n", " ")
                self.profiles[tp] = ConfigError(f"measured database ({s.gpu}, {s.framework})", "tp",
                                                tp, why)
        got = self.profiles[tp]
        if isinstance(got, ConfigError):
            raise got
        return got

    def workload_for(self, shape: Shape, prof: Profile) -> Workload:
        c = prof.cluster
        return replace(self.spec.workload, workers=shape.engines, gpus_per_worker=shape.tp,
                       max_batch=shape.max_batch, profile=prof.name, model=c.model, gpu=c.gpu,
                       framework=c.framework)

    def evaluate(self, number: int, shape: Shape) -> PlanTrial:
        if shape in self.done:
            return replace(self.done[shape], number=number, seconds=0.0)
        t0 = time.perf_counter()
        trial = self._evaluate(number, shape)
        trial.seconds = time.perf_counter() - t0
        self.done[shape] = trial
        return trial

    def engine_fit(self, tp: int, max_batch: int) -> tuple[str, int, int]:
        """(why an engine of this TP and max batch cannot run, "" when it can; KV tokens it holds;
        KV tokens a full batch at the mean length needs): the same for every GPU count and
        policy."""
        fit = memory_fit(self.arch, self.system, tp, self.sequence_tokens)
        demand = max_batch * self.mean_sequence_tokens
        if fit.reason or demand <= fit.kv_tokens:
            return fit.reason, fit.kv_tokens, demand
        return (f"a full batch of {max_batch} at the mean length needs {demand:,} KV tokens, the "
                f"engine holds {fit.kv_tokens:,} (it would preempt, which the simulator does not "
                "model)", fit.kv_tokens, demand)

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
            return PlanTrial(number, shape, "infeasible",
                             f"TP{shape.tp} does not divide {shape.gpus} GPUs")
        why, kv, demand = self.engine_fit(shape.tp, shape.max_batch)
        if why:
            return PlanTrial(number, shape, "infeasible", why, kv_tokens=kv,
                             kv_demand_tokens=demand)
        try:
            prof = self.profile(shape.tp)
            wl = self.workload_for(shape, prof)
            check_workload_profile(wl, prof, f"plan shape {shape.label}")
            result = project(wl, [self.policies[shape.policy]], prof, s.seeds, s.n_steps,
                             s.sample_steps, price_per_gpu_hour=s.price_per_gpu_hour,
                             power=prof.power)
        except (ConfigError, ValueError) as exc:
            return PlanTrial(number, shape, "infeasible", str(exc), kv_tokens=kv,
                             kv_demand_tokens=demand)

        def mean(key: str) -> float | None:
            v = result.figure_values(shape.policy, key)
            return None if v is None else float(v.mean())

        days = mean("days")
        late = s.deadline_days is not None and days > s.deadline_days
        return PlanTrial(number, shape, "deadline missed" if late else "ok",
                         f"{days:.2f} days > deadline {s.deadline_days:g}" if late else "",
                         prof.name, days, mean("gpu_hours"), mean("cost"), mean("energy_kwh"),
                         mean("mean_step_min"), kv, demand, result.method)

