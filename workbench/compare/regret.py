"""Bandits judged in the simulator: regret against the oracle schedule.

For a workload, a profile and a base policy (default: the `tlt` preset),
`bandit_regret` builds four variants that differ only in `bandit.algorithm`
(BEG-MAB `beg`, `ucb1`, epsilon-greedy `egreedy`, and the fixed table `fixed`,
which plays the base policy's schedule), simulates each with the same seeds
(common random numbers: the same response lengths for every variant), and
measures how much decode time each lost to its draft-length choices.

Definitions (also in docs/formats.md, "Bandit regret"):

- A *decision segment* is a timeline row with state `decode_sd`, or `decode`
  at a batch <= `sd_threshold`, in a step whose drafter is not `none`: an
  interval the engine decoded with a draft length a bandit chose (for the fixed
  table: the schedule's). Its bucket is the schedule row holding its batch.
- The *model time* of segment s under draft length a is the time the profile
  says arm a takes to emit the segment's tokens at its batch B and mean context:
      T_s(a) = tokens_s / (B * E[L](a)) * (T_verify(B, context, a) + T_draft(B, a))
  with E[L](a) from `sim.acceptance.stats_for` for the step's drafter kind and
  quality (`StepMetrics.drafter_kind`, `.drafter_quality`) and the costs from
  `sim.costs.verify_step_s` / `draft_step_s`. The chosen arm's time is its
  model time too, not the observed interval: the simulator draws noise in the
  accepted length (and may add a prefill), so observed minus model would make
  a segment look better or worse than its arm is; with model times on both
  sides, a segment that played the oracle's arm has regret exactly 0.
- Candidate arms of bucket b: the base policy's `bandit.arms` plus the
  schedule's draft length for b (so the fixed table is inside the class).
- The *oracle schedule* of a run (one bandit, one seed): per bucket, the arm
  that minimises the bucket's total model time over all its segments in
  hindsight, `o_b = argmin_a sum_{s in b} T_s(a)`: the best fixed schedule.
- *Regret* of a run: `sum_b sum_{s in b} [T_s(c_s) - T_s(o_b)]` seconds, with
  c_s the arm played. Per segment the term can be negative (inside a bucket
  another arm may suit one batch or context better than the oracle's); per
  bucket the total is >= 0 for any player that keeps one arm per bucket (the
  fixed table, a bandit that has settled), since o_b minimises it over those.
  This is the usual external regret: a learning bandit's total could only fall
  below 0 if its switches inside a bucket happened to track batch or context
  better than any single arm does, which would say the bucket is too wide (the
  clairvoyant regret below shows how much a finer schedule could gain).
- *Clairvoyant regret*: `sum_s [T_s(c_s) - min_a T_s(a)]`, against the best
  arm per segment. It is >= 0 for every player by construction and >= the
  regret; the gap is what a finer schedule could still gain.
- `regret_pct_of_rollout`: 100 * regret / rollout worker-seconds (workers x
  the sum over steps of the rollout time). Regret is in worker-seconds of
  decoding; it delays the step only when it falls on the slowest worker.
- The cumulative-regret curve orders a run's decision segments by start time
  (then worker) and sums the per-segment terms; it ends at the regret. The
  fixed table never re-decides within a segment, so its segments are longer
  and fewer than a learning bandit's (cut every `decision_interval` steps).

The context of a segment is the timeline's `context` column (the mean
context over the segment, as the simulator charged it).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.acceptance import position_rows, stats_for
from sim.costs import segment_s
from sim.sweep import ProgressFn, Runner, seed_list, spread, sweep
from workbench.contracts.fileio import save_result
from workbench.contracts.policy import DrafterKind, Policy
from workbench.contracts.profile import Profile, position_row
from workbench.contracts.workload import Workload

SCHEMA = "tlt-regret/1"

# (algorithm, label) in report order.
BANDITS = (("beg", "BEG-MAB"), ("ucb1", "UCB1"), ("egreedy", "epsilon-greedy"),
           ("fixed", "fixed table"))
CURVE_POINTS = 200  # most points per (bandit, seed) cumulative-regret curve in regret.json


def bandit_variants(base: Policy) -> list[Policy]:
    """The base policy four times, differing only in bandit.algorithm (named after it)."""
    if not base.uses_sd:
        raise ValueError(f"policy {base.name!r} never uses speculative decoding (drafter.kind "
                         f"{base.drafter.kind!r}, sd_threshold {base.sd_threshold}): no bandit "
                         "decisions to judge")
    return [replace(base, name=alg, bandit=replace(base.bandit, algorithm=alg))
            for alg, _ in BANDITS]


def candidate_arms(policy: Policy, bucket: int) -> list[int]:
    """Draft lengths the oracle may fix for a bucket: the arms and the schedule's own."""
    return sorted({*policy.bandit.arms, policy.schedule[bucket].draft_len})


def decision_segments(run, policy: Policy, profile: Profile,
                      prompt_tokens: float = 0.0) -> pd.DataFrame:
    """A run's decision segments with their model time under every candidate arm.

    Columns: rl_step, worker, start_s, batch, bucket, chosen, tokens, context,
    observed_s, kind, and t_K (model seconds under draft length K) for every
    K in the union of the buckets' candidates (NaN outside a bucket's set). A profile whose
    acceptance moves along a response (`AcceptanceModel.*_position`) is read at each segment's
    position: its mean context less `prompt_tokens` (a segment never crosses a row's start).
    """
    tl = run.timeline
    by_step = {m.rl_step: m for m in run.steps}
    decode = tl[tl["state"].isin(["decode", "decode_sd"])].copy()
    kinds = decode["rl_step"].map(lambda s: by_step[s].drafter_kind)
    buckets = decode["batch"].map(lambda b: policy.bucket_of(int(b)))
    keep = (kinds != DrafterKind.NONE).to_numpy() & buckets.notna().to_numpy()
    seg = decode[keep].copy()
    seg["kind"] = kinds[keep].to_numpy()
    seg["bucket"] = buckets[keep].astype(int).to_numpy()
    seg["quality"] = seg["rl_step"].map(lambda s: by_step[s].drafter_quality).to_numpy(float)
    if "context" not in seg.columns:
        raise ValueError("the timeline has no 'context' column (mean context of each segment); "
                         "regret needs the simulator that writes it")
    seg["observed_s"] = seg["end_s"] - seg["start_s"]
    seg = seg.rename(columns={"draft_len": "chosen"})
    seg = seg.sort_values(["start_s", "worker"], kind="stable")
    seg = seg.reset_index(drop=True)

    union = sorted({k for b in range(len(policy.schedule))
                    for k in candidate_arms(policy, b)} | set(seg["chosen"]))
    acc, dec, dft = profile.acceptance, profile.decode, profile.drafter
    mean_len: dict[tuple[str, float, int], float] = {}
    cols = {k: np.full(len(seg), np.nan) for k in union}
    allowed = {b: set(candidate_arms(policy, b)) for b in range(len(policy.schedule))}
    rows = zip(seg["kind"], seg["quality"], seg["batch"], seg["context"], seg["tokens"],
               seg["bucket"], seg["chosen"])
    for i, (kind, quality, batch, context, tokens, bucket, chosen) in enumerate(rows):
        batch = int(batch)
        along = position_rows(acc, kind)
        row = position_row(along, context - prompt_tokens) if along else -1
        miss = along[row].miss if along else 1.0
        for k in union:
            if k not in allowed[bucket] and k != chosen:
                continue
            key = (kind, quality, k, miss)
            if key not in mean_len:
                mean_len[key] = stats_for(acc, kind, quality, k, miss).mean
            passes = tokens / (batch * mean_len[key])
            cols[k][i] = segment_s(dec, dft, kind, batch, context, k, passes,
                                    profile.mechanisms)
    for k in union:
        seg[f"t_{k}"] = cols[k]
    keep_cols = ["rl_step", "worker", "start_s", "batch", "bucket", "chosen", "tokens", "context",
                 "observed_s", "kind"]
    return seg[keep_cols + [f"t_{k}" for k in union]]


@dataclass(frozen=True)
class OracleBucket:
    """One schedule bucket of a run: the oracle's draft length in hindsight and the regret against
    it."""

    bucket: int  # index in the base policy's schedule
    min_batch: int
    max_batch: int  # capped at sd_threshold
    oracle_draft_len: int | None  # None: the run made no decision in this bucket
    schedule_draft_len: int
    segments: int
    regret_s: float


@dataclass
class RunRegret:
    """Regret of one bandit on one seed."""

    algorithm: str
    seed: int
    regret_s: float
    clairvoyant_regret_s: float
    decision_time_s: float  # model time of the decision segments under the arms played
    observed_decision_time_s: float  # their simulated duration (acceptance noise, prefill)
    rollout_worker_s: float
    step_time_s: float  # mean over steps
    rollout_time_s: float  # mean over steps
    decisions: int
    oracle: list[OracleBucket]  # per bucket that holds batches at or below sd_threshold
    curve: np.ndarray = field(repr=False)  # cumulative regret per decision index

    @property
    def regret_pct(self) -> float:
        return 100.0 * self.regret_s / self.rollout_worker_s if self.rollout_worker_s else 0.0


def run_regret(run, policy: Policy, profile: Profile, workers: int, algorithm: str, seed: int,
               prompt_tokens: float = 0.0) -> RunRegret:
    seg = decision_segments(run, policy, profile, prompt_tokens)
    chosen_t = np.array([seg.at[i, f"t_{c}"]
                         for i, c in enumerate(seg["chosen"])]) if len(seg) else np.zeros(0)
    per_seg = np.zeros(len(seg))
    clair = 0.0
    oracle = []
    for b, row in enumerate(policy.schedule):
        mask = (seg["bucket"] == b).to_numpy()
        cands = candidate_arms(policy, b)
        if mask.any():
            totals = {k: float(seg.loc[mask, f"t_{k}"].sum()) for k in cands}
            best = min(cands, key=lambda k: (totals[k], k))
            per_seg[mask] = chosen_t[mask] - seg.loc[mask, f"t_{best}"].to_numpy()
            best_t = seg.loc[mask, [f"t_{k}" for k in cands]].min(axis=1).to_numpy()
            clair += float((chosen_t[mask] - best_t).sum())
        else:
            best = None
        oracle.append(OracleBucket(b, row.min_batch, min(row.max_batch, policy.sd_threshold), best,
                                   row.draft_len, int(mask.sum()), float(per_seg[mask].sum())))
    rollout = float(sum(m.rollout_time_s for m in run.steps))
    return RunRegret(
        algorithm=algorithm, seed=seed,
        regret_s=float(per_seg.sum()), clairvoyant_regret_s=clair,
        decision_time_s=float(chosen_t.sum()),
        observed_decision_time_s=float(seg["observed_s"].sum()),
        rollout_worker_s=rollout * workers, step_time_s=run.mean("step_time_s"),
        rollout_time_s=run.mean("rollout_time_s"),
        decisions=len(seg), oracle=[o for o in oracle if o.min_batch <= o.max_batch],
        curve=np.cumsum(per_seg),
    )


def _downsample(curve: np.ndarray, points: int = CURVE_POINTS) -> tuple[list[int], list[float]]:
    if len(curve) == 0:
        return [], []
    idx = np.unique(np.linspace(0, len(curve) - 1, min(points, len(curve))).round().astype(int))
    return [int(i) + 1 for i in idx], [float(curve[i]) for i in idx]


@dataclass
class RegretReport:
    workload: str
    profile: str
    base_policy: str
    steps: int
    seeds: list[int]
    arms: list[int]
    schedule: list[list[int]]
    sd_threshold: int
    runs: list[RunRegret]

    @property
    def algorithms(self) -> list[str]:
        present = {r.algorithm for r in self.runs}
        return [alg for alg, _ in BANDITS if alg in present]

    def _of(self, algorithm: str) -> list[RunRegret]:
        return [r for r in self.runs if r.algorithm == algorithm]

    def summary(self) -> pd.DataFrame:
        """Per bandit: regret seconds, regret % of rollout worker-time and clairvoyant regret, with
        spread over seeds."""
        labels = dict(BANDITS)
        rows = []
        for alg in self.algorithms:
            rs = self._of(alg)
            row = {"bandit": alg, "label": labels[alg]}
            for name, vals in (("regret_s", [r.regret_s for r in rs]),
                               ("regret_pct", [r.regret_pct for r in rs]),
                               ("clairvoyant_regret_s", [r.clairvoyant_regret_s for r in rs]),
                               ("step_time_s", [r.step_time_s for r in rs])):
                for stat, v in spread(vals).items():
                    row[f"{name}_{stat}"] = v
            row["decisions_mean"] = float(np.mean([r.decisions for r in rs]))
            rows.append(row)
        return pd.DataFrame(rows).set_index("bandit")

    def oracle_frame(self) -> pd.DataFrame:
        """The oracle's draft length per bucket (columns "MIN-MAX"), one row per (bandit, seed)."""
        return pd.DataFrame([{"bandit": r.algorithm, "seed": r.seed,
                              **{f"{o.min_batch}-{o.max_batch}": o.oracle_draft_len
                                 for o in r.oracle}}
                             for r in self.runs])

    def oracle_consensus(self) -> list[tuple[int, int, int]]:
        """(min_batch, max_batch, draft length) per bucket: the oracle's most common choice over all
        runs."""
        votes: dict[tuple[int, int], Counter] = {}
        for r in self.runs:
            for o in r.oracle:
                if o.oracle_draft_len is not None:
                    votes.setdefault((o.min_batch, o.max_batch), Counter())[o.oracle_draft_len] += 1
        return [(lo, hi, c.most_common(1)[0][0]) for (lo, hi), c in sorted(votes.items())]

    def to_dict(self) -> dict:
        labels = dict(BANDITS)
        out = {
            "schema": SCHEMA, "workload": self.workload, "profile": self.profile,
            "base_policy": self.base_policy,
            "steps": self.steps, "seeds": list(self.seeds), "common_random_numbers": True,
            "arms": list(self.arms), "schedule": self.schedule, "sd_threshold": self.sd_threshold,
            "bandits": {},
        }
        for alg in self.algorithms:
            rs = self._of(alg)
            entry = {
                "label": labels[alg],
                "regret_s": spread([r.regret_s for r in rs]),
                "regret_pct_of_rollout": spread([r.regret_pct for r in rs]),
                "clairvoyant_regret_s": spread([r.clairvoyant_regret_s for r in rs]),
                "per_seed": [],
            }
            for r in rs:
                idx, cum = _downsample(r.curve)
                entry["per_seed"].append({
                    "seed": r.seed, "regret_s": r.regret_s, "regret_pct_of_rollout": r.regret_pct,
                    "clairvoyant_regret_s": r.clairvoyant_regret_s, "decisions": r.decisions,
                    "decision_time_s": r.decision_time_s,
                    "observed_decision_time_s": r.observed_decision_time_s,
                    "rollout_worker_s": r.rollout_worker_s, "step_time_s": r.step_time_s,
                    "rollout_time_s": r.rollout_time_s,
                    "oracle_schedule": [asdict(o) for o in r.oracle],
                    "curve": {"decision": idx, "cumulative_regret_s": cum},
                })
            out["bandits"][alg] = entry
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def figure(self) -> Figure:
        """Left: cumulative regret vs decision index (one line per seed). Right: regret % of
        rollout, mean +- std."""
        labels = dict(BANDITS)
        fig = Figure(figsize=(12.0, 4.8), layout="constrained")
        ax, bx = fig.subplots(1, 2, width_ratios=[2, 1])
        algs = self.algorithms
        for i, alg in enumerate(algs):
            for j, r in enumerate(self._of(alg)):
                ax.plot(np.arange(1, len(r.curve) + 1), r.curve, color=f"C{i}", lw=1.2,
                        alpha=0.8 if j == 0 else 0.4, label=labels[alg] if j == 0 else None)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xlabel("decision segment (in start-time order)")
        ax.set_ylabel("cumulative regret (worker-seconds)")
        ax.set_title("Cumulative regret vs the oracle schedule (one line per seed)")
        ax.grid(alpha=0.3)
        ax.legend()
        pct = [[r.regret_pct for r in self._of(a)] for a in algs]
        means = [float(np.mean(p)) for p in pct]
        stds = [float(np.std(p, ddof=1)) if len(p) > 1 else 0.0 for p in pct]
        x = np.arange(len(algs))
        bx.bar(x, means, yerr=stds, capsize=5, color=[f"C{i}" for i in range(len(algs))],
               alpha=0.75, edgecolor="black", linewidth=0.6)
        for i, a in enumerate(algs):
            secs = float(np.mean([r.regret_s for r in self._of(a)]))
            bx.annotate(f"{secs:,.1f} s", (x[i], means[i] + stds[i]), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=9)
        bx.set_xticks(x, [labels[a] for a in algs], rotation=15)
        bx.set_ylabel("regret, % of rollout worker-time")
        bx.set_title("Total regret (mean, std over seeds)")
        bx.grid(axis="y", alpha=0.3)
        fig.suptitle(f"{self.workload} on {self.profile}, base policy {self.base_policy}: "
                     f"{self.steps} step(s) x {len(self.seeds)} seed(s); arms "
                     f"{list(self.arms)}", fontsize=10)
        return fig

    def save(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write DIR/regret.json and DIR/regret.png, each atomically."""
        return save_result(out_dir, "regret", self.to_json(), self.figure())


def bandit_regret(workload: Workload, base: Policy, profile: Profile, seeds: int | Iterable[int],
                  steps: int | None = None, on_progress: ProgressFn | None = None,
                  algorithms: Sequence[str] | None = None, runner: Runner = sweep) -> RegretReport:
    """Simulate the four bandit variants of `base` for every seed and measure their regret
    (`runner`: `sim.sweep.sweep` here, or a Ray runner from workbench/deploy/distributed.py)."""
    variants = bandit_variants(base)
    if algorithms is not None:
        unknown = sorted(set(algorithms) - {a for a, _ in BANDITS})
        if unknown:
            raise ValueError(f"algorithms: {unknown[0]!r}; allowed: "
                             + ", ".join(a for a, _ in BANDITS))
        variants = [v for v in variants if v.bandit.algorithm in algorithms]
    runs = [run_regret(r.run, r.policy, profile, workload.workers, r.policy.bandit.algorithm,
                       r.seed, workload.prompt_tokens)
            for r in runner(workload, variants, profile, seeds, steps, on_progress)]
    return RegretReport(
        workload=workload.name, profile=profile.name, base_policy=base.name,
        steps=steps if steps is not None else workload.steps, seeds=seed_list(seeds),
        arms=list(base.bandit.arms),
        schedule=[[r.min_batch, r.max_batch, r.draft_len] for r in base.schedule],
        sd_threshold=base.sd_threshold, runs=runs,
    )
