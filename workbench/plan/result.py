"""A plan: the trials of a search, its front and chosen shape, and the files it writes
(plan.json, plan.png, the chosen shape's workload, policy and profile)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

import yaml
from matplotlib.figure import Figure

from workbench.calibrate.database.profile import model_name
from workbench.contracts.fileio import save_figure, sig, write_atomic
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.schema import to_mapping
from workbench.contracts.workload import Workload
from workbench.plan.search import PlanSpec, PlanTrial, choose, gpu_choices, pareto_front

SCHEMA = "tlt-plan/1"


@dataclass
class Plan:
    spec: PlanSpec
    trials: list[PlanTrial]
    seconds: float
    # TP -> derived profile (for the chosen files)
    profiles: dict[int, Profile] = field(default_factory=dict)
    # Engine shapes that cannot run, found before the search.
    screened: list[PlanTrial] = field(default_factory=list)

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
        return (f"each shape projected over {s.n_steps} RL steps ({'/'.join(sorted(how))}: "
                f"{s.sample_steps} steps simulated at most per run, workbench/project.py), "
                f"seeds 0..{s.seeds - 1}; profiles from aiconfigurator-core's measured database "
                f"({s.gpu}, {s.framework}), acceptance and learning curve of {s.workload.profile}")

    def chosen_workload(self) -> Workload | None:
        c = self.chosen
        s = self.spec
        return None if c is None else replace(
            s.workload, name=f"{s.workload.name}-plan", workers=c.shape.engines,
            gpus_per_worker=c.shape.tp, max_batch=c.shape.max_batch, profile="profile.yaml",
            model=model_name(s.architecture), gpu=s.gpu,
            framework=s.framework, steps=s.n_steps,
            description=(f"{s.workload.name} in the shape tlt plan chose: {c.shape.label} on "
                         f"{s.gpu}, {s.framework}."))

    def chosen_policy(self) -> Policy | None:
        c = self.chosen
        if c is None:
            return None
        return next(p for p in self.spec.policies if p.name == c.shape.policy)

    def chosen_run(self) -> tuple[Workload, Policy, Profile] | None:
        """The chosen shape as the simulator runs it: its workload (naming its profile), policy
        and profile; None when nothing was chosen."""
        wl, pol = self.chosen_workload(), self.chosen_policy()
        if wl is None or pol is None:
            return None
        prof = self.profiles[wl.gpus_per_worker]
        return replace(wl, profile=prof.name), pol, prof

    def to_dict(self) -> dict:
        s = self.spec

        def row(t: PlanTrial) -> dict:
            return {**_rounded(asdict(t)), "shape": {**asdict(t.shape), "engines": t.shape.engines}}

        chosen = self.chosen
        return {
            "schema": SCHEMA, "workload": s.workload.name, "model": model_name(s.architecture),
            "gpu": s.gpu, "framework": s.framework, "goal": s.goal, "gpus": s.gpus,
            "deadline_days": s.deadline_days,
            "max_gpus": s.max_gpus if s.goal == "deadline" else None,
            "price_per_gpu_hour": s.price_per_gpu_hour,
            "steps": s.n_steps, "seeds": s.seeds, "seed": s.seed, "trials_requested": s.trials,
            "proposals": len(self.trials),
            "search_space": {"tp": list(s.tps), "gpus": gpu_choices(s.cap),
                             "max_batch": list(s.max_batches),
                             "policy": [p.name for p in s.policies]},
            "sampler": "optuna NSGA-II (objectives: days, cost; both minimised)",
            "method": self.method, "objectives": ["days", "cost"],
            "energy_scope": "GPU board power only (no host, network or cooling)",
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
        ax.scatter([t.days for t in ok], [t.cost for t in ok], s=18, color="#9aa5b1",
                   label="feasible shape")
        if late:
            ax.scatter([t.days for t in late], [t.cost for t in late], s=18, marker="x",
                       color="#bbbbbb",
                       label="deadline missed")
        front = self.front
        ax.plot([t.days for t in front], [t.cost for t in front], "o-", color="#d62728",
                drawstyle="steps-post",
                label="Pareto front")
        for t in front:
            label = f"TP{t.shape.tp}x{t.shape.engines} b{t.shape.max_batch} {t.shape.policy}"
            ax.annotate(label, (t.days, t.cost),
                        fontsize=7, xytext=(4, 4), textcoords="offset points")
        if self.chosen is not None:
            ax.scatter([self.chosen.days], [self.chosen.cost], s=160, marker="*", color="#e4a11b",
                       zorder=5,
                       label="chosen")
        if self.spec.deadline_days is not None:
            ax.axvline(self.spec.deadline_days, color="k", ls="--", lw=1, label="deadline")
        ax.set_xlabel("whole run (days)")
        ax.set_ylabel(f"cost (at {self.spec.price_per_gpu_hour:g} per GPU-hour)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        n_bad = len({t.shape for t in self.trials if t.status == "infeasible"}) + len(self.screened)
        shapes = len({t.shape for t in self.trials})
        ax.set_title(f"{self.spec.workload.name} on {self.spec.gpu}: {shapes} shapes "
                     f"({len(self.trials)} proposals); {n_bad} cannot run (not plotted)",
                     fontsize=10)
        return fig

    def chosen_files(self) -> dict[str, str]:
        """File name -> YAML text of the chosen shape: workload.yaml (naming profile.yaml beside
        it), policy.yaml and profile.yaml; empty when nothing was chosen."""
        wl, pol = self.chosen_workload(), self.chosen_policy()
        if wl is None or pol is None:
            return {}
        prof = self.profiles[wl.gpus_per_worker]
        dump = lambda obj: yaml.safe_dump(to_mapping(obj), sort_keys=False)  # noqa: E731
        return {"workload.yaml": dump(wl), "policy.yaml": dump(pol), "profile.yaml": dump(prof)}

    def save(self, out_dir: str | Path) -> list[Path]:
        """plan.json, plan.png and the chosen shape's files (`chosen_files`), each written
        atomically; `tlt sim --workload DIR/workload.yaml --policy DIR/policy.yaml` runs the
        chosen shape."""
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


def shape_rows(trials: Sequence[PlanTrial], sequence_tokens: int) -> list[list[str]]:
    """Table rows: shape, days, cost, energy, GPU-hours, step minutes, sequences at the cap the KV
    cache holds per engine, status."""
    def fmt(v: float | None, d: int) -> str:
        missing = v is None or (isinstance(v, float) and math.isnan(v))
        return "-" if missing else f"{v:,.{d}f}"

    def counts(t: PlanTrial) -> list[str]:
        """Trial, engines, GPUs: an engine shape screened before the search had no trial and
        holds for any GPU count; a GPU count TP does not divide makes no whole engine."""
        s = t.shape
        if s.screened:
            return ["screened", "any", "any"]
        return [str(t.number), "-" if s.gpus % s.tp else str(s.engines), str(s.gpus)]

    return [[counts(t)[0], f"TP{t.shape.tp}", *counts(t)[1:],
             str(t.shape.max_batch), t.shape.policy, fmt(t.days, 2), fmt(t.cost, 0),
             fmt(t.energy_kwh, 0), fmt(t.gpu_hours, 0),
             fmt(t.mean_step_min, 1), f"{t.kv_tokens // sequence_tokens:,}" if t.kv_tokens else "-",
             t.status if t.feasible or not t.reason else f"{t.status}: {t.reason}"]
            for t in trials]


ROW_HEADERS = ["trial", "TP", "engines", "GPUs", "max batch", "policy", "days", "cost",
               "energy kWh", "GPU-hours", "step min", "KV seqs@cap", "status"]
