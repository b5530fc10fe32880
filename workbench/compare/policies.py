"""Compare scheduling policies on one workload over several seeds, with their spread.

`compare(workload, policies, profile, seeds)` simulates every policy once per
seed and keeps, per (policy, seed), the means over the simulated RL steps of
step time, rollout time, bubble fraction, mean accepted length, spot-training
share and tail fraction. `Comparison.summary()` gives per policy the mean, standard deviation
(ddof 1), min, max and 95% t-interval half-width of each metric over the seeds,
and two speedups against the first policy:

- `speedup`: ratio of means, mean step time of the first policy / this one's;
- `speedup_paired_*`: the per-seed ratio first[seed] / this[seed], summarised
  the same way. Seeds are common random numbers: seed s draws the same response
  lengths for every policy (`sim.sweep`), so a per-seed ratio compares policies on identical
  rollouts and its spread is much narrower than the spread of either policy alone.

Nothing here knows what a policy does; it only runs the simulator. The JSON
(`Comparison.to_json`, written as `compare.json`) is documented in
`docs/formats.md`; `Comparison.figure()` draws the 4-panel `compare.png`.

One seed: `summarize_runs` gives each simulated run's means over its steps and its
speedup against the first run (what `tlt sim` prints and the What-if page shows).

Why each speedup: `why_runs` (one seed) and `Comparison.why` (means over seeds) give each
policy's decomposition against the first (workbench/contracts/speedup.py): the rollout's share of
the step, the share of decoding where the policy's SD runs and its speedup there, the bubble,
and the ceiling if that decoding were free.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.results import PolicyRun
from sim.sweep import ProgressFn, Runner, seed_list, spread, sweep
from workbench.compare.intervals import PolicyInterval, interval_json, policy_intervals, run_work
from workbench.compare.agentic import AGENTIC_FIELDS, AgenticWhy, agentic_why
from workbench.contracts.fileio import save_result
from workbench.contracts.policy import Policy
from workbench.contracts.profile import Profile
from workbench.contracts.speedup import RunTimes, SpeedupWhy, explain, why_json
from workbench.contracts.workload import Workload
from workbench.project import step_usage

SCHEMA = "tlt-compare/1"

# Per-seed metrics (means over the simulated steps), in table order.
METRICS = ("step_time_s", "rollout_time_s", "bubble_fraction", "mean_accept_len",
           "drafter_train_fraction", "tail_fraction")
# GPU-seconds per step in each power state (workbench/project.py, step_usage): what energy is made
# of.
GPU_STATES = ("gpu_decode_s", "gpu_idle_s", "gpu_train_s")
# The four drawn in compare.png: (metric, panel title, y label).
PANELS = (
    ("step_time_s", "RL step time", "seconds"),
    ("rollout_time_s", "Rollout time", "seconds"),
    ("bubble_fraction", "Bubble fraction", "idle share of rollout worker-time"),
    ("mean_accept_len", "Mean accepted length", "tokens per verify pass"),
)


@dataclass(frozen=True)
class RunSummary:
    """One simulated run (one policy, one seed): means over its steps, and its speedup against the
    first run."""

    policy: str  # the run's label
    step_time_s: float
    rollout_time_s: float
    bubble_fraction: float  # idle worker-time / rollout worker-time: workers that finished and wait
    # worker-time decoding at a small batch / rollout worker-time (contracts' rollout_split)
    tail_fraction: float
    mean_accept_len: float
    drafter_train_fraction: float
    tokens_per_s: float
    speedup: float  # the first run's mean step time / this run's


_RUN_FIELDS = ("step_time_s", "rollout_time_s", "bubble_fraction", "tail_fraction",
               "mean_accept_len", "drafter_train_fraction", "tokens_per_s")


def summarize_runs(runs: Sequence[PolicyRun],
                   labels: Sequence[str] | None = None) -> list[RunSummary]:
    """Each run's summary (labelled by `labels`, default the policy names); the first is the
    reference."""
    ref = runs[0].mean("step_time_s")
    out = []
    for label, run in zip(labels if labels is not None else [r.policy_name for r in runs], runs):
        s = run.summary()
        out.append(RunSummary(policy=label, **{f: s[f] for f in _RUN_FIELDS},
                              speedup=ref / s["step_time_s"] if s["step_time_s"] else float("nan")))
    return out


def run_times(run: PolicyRun) -> RunTimes:
    """A simulated run as the speedup decomposition reads it."""
    return RunTimes(run.timeline, run.mean("step_time_s"), run.mean("rollout_time_s"))


def why_runs(runs: Sequence[PolicyRun], labels: Sequence[str] | None = None) -> list[SpeedupWhy]:
    """Each run's decomposition against the first (the first's own included: no SD, no change)."""
    labels = list(labels) if labels is not None else [r.policy_name for r in runs]
    ref = run_times(runs[0])
    return [explain(label, run_times(run), labels[0], ref) for label, run in zip(labels, runs)]


WHY_FIELDS = tuple(f for f in SpeedupWhy.__dataclass_fields__ if f not in ("policy", "reference"))


def mean_why(rows: Sequence[SpeedupWhy], speedup: float) -> SpeedupWhy:
    """Per-seed decompositions of one policy as one: field means over seeds (the largest SD
    batch), with `speedup` the comparison's ratio of means."""
    mean = {f: float(np.nanmean([getattr(r, f) for r in rows]))
            if any(np.isfinite(getattr(r, f)) for r in rows)
            else float("nan") for f in WHY_FIELDS}
    ref_step = float(np.mean([r.ceiling_step_s * r.ceiling_speedup for r in rows]))
    mean.update(sd_batch=max(r.sd_batch for r in rows), speedup=speedup,
                ceiling_speedup=ref_step / mean["ceiling_step_s"] if np.isfinite(ref_step)
                else float("nan"))
    return SpeedupWhy(policy=rows[0].policy, reference=rows[0].reference, **mean)


def summary_frame(summaries: Sequence[RunSummary]) -> pd.DataFrame:
    """The summaries as a table, one row per run, indexed by policy."""
    return pd.DataFrame([asdict(s) for s in summaries]).set_index("policy")


@dataclass
class Comparison:
    """Per-seed results of several policies on one workload (seeds are common random numbers)."""

    workload: str
    profile: str
    steps: int
    seeds: list[int]
    policies: list[str]  # in the order given; the first is the reference for speedups
    runs: pd.DataFrame  # tidy: policy, seed, *METRICS, *GPU_STATES (per-seed means over steps)
    natures: list[str]  # per policy: what it does to the RL algorithm (RolloutConfig.nature)
    # per (policy, seed), against the first policy
    whys: list[SpeedupWhy] = field(default_factory=list)
    # per policy, with the profile's cost uncertainty (None: the profile has none)
    intervals: list[PolicyInterval] | None = None
    # agentic workloads: per (policy, seed), where time goes around the tool calls
    agentic: list[AgenticWhy] = field(default_factory=list)

    def agentic_why(self) -> list[AgenticWhy]:
        """Per policy: its agentic split, means over seeds (empty for a single-turn workload)."""
        out = []
        for name in self.policies:
            rows = [a for a in self.agentic if a.policy == name]
            if rows:
                out.append(AgenticWhy(name, *(float(np.mean([getattr(a, f) for a in rows]))
                                              for f in AGENTIC_FIELDS)))
        return out

    def why(self) -> list[SpeedupWhy]:
        """Per policy: its decomposition, means over seeds (`mean_why`); empty without per-seed
        ones."""
        if not self.whys:
            return []
        ref = float(np.mean(self._by_seed(self.reference, "step_time_s")))
        return [mean_why([w for w in self.whys if w.policy == name],
                         ref / float(np.mean(self._by_seed(name, "step_time_s"))))
                         for name in self.policies]

    @property
    def reference(self) -> str:
        return self.policies[0]

    def _by_seed(self, policy: str, metric: str) -> np.ndarray:
        rows = self.runs[self.runs["policy"] == policy].set_index("seed").loc[self.seeds]
        return rows[metric].to_numpy(dtype=float)

    def paired_speedups(self, policy: str) -> np.ndarray:
        """Per seed: the reference's step time / this policy's, on the same draws."""
        return self._by_seed(self.reference, "step_time_s") / self._by_seed(policy, "step_time_s")

    def summary(self) -> pd.DataFrame:
        """One row per policy: METRIC_{mean,std,min,max,ci95}, speedup and speedup_paired_{...}."""
        ref_mean = float(np.mean(self._by_seed(self.reference, "step_time_s")))
        rows = []
        for name in self.policies:
            nature = self.natures[self.policies.index(name)]
            row: dict[str, float | str | None] = {"policy": name, "nature": nature}
            for metric in METRICS:
                for stat, v in spread(self._by_seed(name, metric)).items():
                    row[f"{metric}_{stat}"] = v
            row["speedup"] = ref_mean / row["step_time_s_mean"]
            for stat, v in spread(self.paired_speedups(name)).items():
                row[f"speedup_paired_{stat}"] = v
            rows.append(row)
        return pd.DataFrame(rows).set_index("policy")

    def to_dict(self) -> dict:
        ref_mean = float(np.mean(self._by_seed(self.reference, "step_time_s")))
        out = {
            "schema": SCHEMA,
            "workload": self.workload,
            "profile": self.profile,
            "steps": self.steps,
            "seeds": list(self.seeds),
            "common_random_numbers": True,
            "reference_policy": self.reference,
            "metrics": list(METRICS),
            "policies": {},
        }
        for name in self.policies:
            entry: dict = {metric: spread(self._by_seed(name, metric)) for metric in METRICS}
            entry["nature"] = self.natures[self.policies.index(name)]
            entry["speedup_vs_first"] = {
                "ratio_of_means": ref_mean / entry["step_time_s"]["mean"],
                "paired": spread(self.paired_speedups(name)),
            }
            why = next((w for w in self.why() if w.policy == name), None)
            if why is not None:
                entry["why"] = why_json(why)
            pi = next((p for p in self.intervals or [] if p.policy == name), None)
            if pi is not None:
                entry["interval"] = interval_json(pi)
            entry["per_seed"] = [
                {"seed": seed, **{m: float(v) for m, v in zip(METRICS, vals)}}
                for seed, *vals in zip(self.seeds, *(self._by_seed(name, m) for m in METRICS))
            ]
            out["policies"][name] = entry
        if self.agentic:
            out["agentic"] = {a.policy: {f: getattr(a, f) for f in AGENTIC_FIELDS}
                              for a in self.agentic_why()}
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def figure(self) -> Figure:
        """Four panels (step time, rollout time, bubble fraction, accepted length):
        bars are means over seeds, error bars one standard deviation, dots the seeds."""
        n = len(self.policies)
        fig = Figure(figsize=(max(8.0, 2.2 + 1.3 * n * 2), 7.0), layout="constrained")
        axes = fig.subplots(2, 2).ravel()
        x = np.arange(n)
        colors = [f"C{i % 10}" for i in range(n)]
        k = len(self.seeds)
        # deterministic spread of the seed dots
        jitter = (np.arange(k) - (k - 1) / 2) * (0.5 / max(k, 1))
        for ax, (metric, title, ylabel) in zip(axes, PANELS):
            per = [self._by_seed(p, metric) for p in self.policies]
            means = [float(v.mean()) for v in per]
            stds = [float(v.std(ddof=1)) if len(v) > 1 else 0.0 for v in per]
            ax.bar(x, means, yerr=stds, capsize=5, color=colors, alpha=0.75, edgecolor="black",
                   linewidth=0.6)
            for i, v in enumerate(per):
                ax.scatter(x[i] + jitter, v, s=12, color="black", zorder=3)
            ax.set_title(title)
            ax.set_ylabel(ylabel)
            ax.set_xticks(x, self.policies, rotation=20 if n > 3 else 0,
                          ha="right" if n > 3 else "center")
            ax.grid(axis="y", alpha=0.3)
            if metric == "step_time_s":
                top = max(m + s for m, s in zip(means, stds))
                for i, name in enumerate(self.policies):
                    ax.annotate(f"{means[0] / means[i]:.2f}x",
                                (x[i], means[i] + stds[i] + 0.02 * top),
                                ha="center", va="bottom", fontsize=9)
                ax.set_ylim(0, top * 1.15)
            if metric == "bubble_fraction":
                ax.set_ylim(0, min(1.0, max(m + s for m, s in zip(means, stds)) * 1.2 or 1.0))
        fig.suptitle(f"{self.workload} on {self.profile}: {self.steps} step(s) x {k} seed(s) "
                     "(bars: mean, error bars: std over seeds, dots: seeds; speedup vs "
                     f"{self.reference})",
                     fontsize=10)
        return fig

    def save(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write DIR/compare.json and DIR/compare.png, each atomically."""
        return save_result(out_dir, "compare", self.to_json(), self.figure())


def compare(workload: Workload, policies: Sequence[Policy], profile: Profile,
            seeds: int | Iterable[int], steps: int | None = None,
            on_progress: ProgressFn | None = None,
            runner: Runner = sweep) -> Comparison:
    """Simulate every policy for every seed (an int K means seeds 0..K-1) and collect per-seed
    means.

    `runner` runs the units: `sim.sweep.sweep` in this process, or a Ray runner
    (workbench/deploy/distributed.py)."""
    rows, whys, refs, agentic = [], [], {}, []
    works: dict[str, list] = {p.name: [] for p in policies}
    for r in runner(workload, policies, profile, seeds, steps, on_progress):
        works[r.policy.name].append(run_work(r.run, profile, workload.workers))
        if r.run.turns is not None:
            agentic.append(agentic_why(r.run))
        usage = [step_usage(m, workload, r.policy).gpu for m in r.run.steps]
        gpu = {f"gpu_{s}_s": float(np.mean([getattr(u, s) for u in usage]))
               for s in ("decode", "idle", "train")}
        rows.append({"policy": r.policy.name, "seed": r.seed, **{m: r.run.mean(m) for m in METRICS},
                     **gpu})
        # The reference's runs come first (the runners report policy by policy), one per seed.
        if r.policy.name == policies[0].name:
            times = refs.setdefault(r.seed, run_times(r.run))
        else:
            times = run_times(r.run)
        whys.append(explain(r.policy.name, times, policies[0].name, refs[r.seed]))
    runs = pd.DataFrame(rows, columns=["policy", "seed", *METRICS, *GPU_STATES])
    return Comparison(workload.name, profile.name, steps if steps is not None else workload.steps,
                      seed_list(seeds), [p.name for p in policies], runs,
                      [p.rollout.nature for p in policies], whys,
                      policy_intervals(list(works.items()), profile), agentic)
