"""Why a policy gains what it gains over a reference run: one small decomposition a person can
check.

From two timelines in `TimelineRow`'s columns (a simulated run's or a real run's trace, the same
format) and their mean step times, `explain` gives:

- `rollout_share`: the reference's rollout / its step (Amdahl: the update and the sync stay);
- `sd_batch`: the largest running batch at which the policy's run decoded with SD (0: never);
- `sd_share`: the share of the reference's decode engine-time (worker-seconds decoding) at a
  running batch <= `sd_batch`, the decoding the policy's SD can touch; the rest runs where SD is
  off;
- `sd_speedup`: the policy's decode rate there over the reference's (response tokens per
  engine-second at batch <= `sd_batch`); `off_speedup` the same above `sd_batch`, where SD is off
  (below 1 where the policy's engine pays for drafting it does not use, e.g. an EAGLE drafter's
  pass in every step);
- `bubble_ref`, `bubble`: idle worker-time / rollout worker-time (`rollout_split`);
- `ceiling_step_s`: the reference's step if its SD-eligible decoding took no time: the step less
  the wall time during which every worker still decoding is at a batch <= `sd_batch` (a worker at
  a larger batch keeps the rollout going whatever SD does to the others); `ceiling_speedup` the
  reference's step over it;
- `reached`: the share of that ceiling's saving the policy's step realises (below zero where the
  policy is slower than the reference: the sentence and the table then say "slower", and why).

`sentence` turns these numbers into one line of why the gain is small or large. The same function
serves `tlt sim`, `tlt compare`, the What-if and Compare pages and a real run's trace.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from workbench.contracts.timeline import DECODE_STATES, rollout_seconds, rollout_split

# A speedup within this of 1 is "no change" in words (seed noise on a few steps is about that).
NO_CHANGE = 0.02


@dataclass(frozen=True)
class RunTimes:
    """What the decomposition reads of a run: every step's timeline rows and its mean step and
    rollout times (the simulator's StepMetrics means; for a real run, `from_timeline`)."""

    timeline: pd.DataFrame
    step_s: float
    rollout_s: float

    @staticmethod
    def from_timeline(timeline: pd.DataFrame) -> "RunTimes":
        """A run known only by its timeline (a real run's trace): each step from its first interval
        to its last (rollout, update and sync), its rollout by `rollout_seconds`."""
        steps = [rows for _, rows in timeline.groupby("rl_step", sort=True)]
        step = [float(r["end_s"].max() - r["start_s"].min()) for r in steps]
        rollout = [rollout_seconds(r) for r in steps]
        return RunTimes(timeline, float(np.mean(step)), float(np.mean(rollout)))


@dataclass(frozen=True)
class SpeedupWhy:
    """Where a policy's gain over the reference comes from (module docstring)."""

    policy: str
    reference: str
    speedup: float  # reference step / policy step
    rollout_share: float
    sd_batch: int
    sd_share: float
    sd_speedup: float  # NaN where the policy never drafted
    off_speedup: float  # the same above sd_batch (NaN where neither run decodes there)
    bubble_ref: float
    bubble: float
    ceiling_step_s: float  # NaN where the policy never drafted
    ceiling_speedup: float
    reached: float  # NaN where the ceiling saves nothing

    @property
    def sentence(self) -> str:
        return sentence(self)


def explain(policy: str, run: RunTimes, reference: str, ref: RunTimes) -> SpeedupWhy:
    """The decomposition of `run` (policy `policy`) against `ref` (module docstring)."""
    sd_rows = run.timeline[run.timeline["state"].astype(str) == "decode_sd"]
    sd_batch = int(sd_rows["batch"].max()) if len(sd_rows) else 0
    ref_s, ref_tokens = _decode_at(ref.timeline, 0, sd_batch)
    all_s, _ = _decode_at(ref.timeline, 0, None)
    sd_share = ref_s / all_s if all_s > 0 else 0.0
    sd_speedup = _rate_ratio(run.timeline, ref.timeline, 0, sd_batch) if sd_batch else math.nan
    off_speedup = _rate_ratio(run.timeline, ref.timeline, sd_batch, None)
    steps = ref.timeline["rl_step"].nunique() or 1
    saved = (
        sum(eligible_wall_s(rows, sd_batch) for _, rows in ref.timeline.groupby("rl_step")) / steps
    )
    ceiling = max(ref.step_s - saved, 1e-12) if sd_batch else math.nan
    gain = ref.step_s - run.step_s
    return SpeedupWhy(
        policy=policy,
        reference=reference,
        speedup=ref.step_s / run.step_s if run.step_s > 0 else math.nan,
        rollout_share=ref.rollout_s / ref.step_s if ref.step_s > 0 else math.nan,
        sd_batch=sd_batch,
        sd_share=sd_share,
        sd_speedup=sd_speedup,
        off_speedup=off_speedup,
        bubble_ref=_bubble(ref.timeline),
        bubble=_bubble(run.timeline),
        ceiling_step_s=ceiling,
        ceiling_speedup=ref.step_s / ceiling,
        reached=gain / saved if saved > 0 else math.nan,
    )


def _decode_at(timeline: pd.DataFrame, above: int, upto: int | None) -> tuple[float, float]:
    """Decode worker-seconds and response tokens at a running batch in (above, upto] (None: no
    top)."""
    rows = timeline[timeline["state"].astype(str).isin(DECODE_STATES)]
    rows = rows[rows["batch"] > above]
    if upto is not None:
        rows = rows[rows["batch"] <= upto]
    return float((rows["end_s"] - rows["start_s"]).sum()), float(rows["tokens"].sum())


def _rate_ratio(run: pd.DataFrame, ref: pd.DataFrame, above: int, upto: int | None) -> float:
    """The run's response tokens per decode engine-second at batch in (above, upto] over the
    reference's."""
    s, tokens = _decode_at(run, above, upto)
    ref_s, ref_tokens = _decode_at(ref, above, upto)
    if min(s, tokens, ref_s, ref_tokens) <= 0:
        return math.nan
    return (tokens / s) / (ref_tokens / ref_s)


def _bubble(timeline: pd.DataFrame) -> float:
    """Mean over steps of the idle share of rollout worker-time (`rollout_split`)."""
    splits = [rollout_split(rows).bubble_fraction for _, rows in timeline.groupby("rl_step")]
    return float(np.mean(splits)) if splits else 0.0


def eligible_wall_s(rows: pd.DataFrame, batch: int) -> float:
    """Wall seconds during which some worker decodes and every worker decoding is at a running
    batch <= `batch`: what the rollout would lose if that decoding took no time."""
    if batch <= 0:
        return 0.0
    dec = rows[rows["state"].astype(str).isin(DECODE_STATES)]
    if dec.empty:
        return 0.0
    start, end = dec["start_s"].to_numpy(float), dec["end_s"].to_numpy(float)
    large = (dec["batch"].to_numpy() > batch).astype(float)
    times = np.concatenate([start, end])
    # Sweep the interval ends: decoders running and decoders at a large batch, between events.
    d_all = np.concatenate([np.ones(len(start)), -np.ones(len(end))])
    d_large = np.concatenate([large, -large])
    order = np.argsort(times, kind="stable")
    t, running, at_large = times[order], np.cumsum(d_all[order]), np.cumsum(d_large[order])
    span = np.diff(t)
    only_small = (running[:-1] > 0.5) & (at_large[:-1] < 0.5)
    return float(span[only_small].sum())


def _pct(x: float) -> str:
    return f"{x:.0%}"


def sentence(w: SpeedupWhy) -> str:
    """One line, from the numbers alone, of why `w.policy` gains little or much on this workload."""
    head = f"{w.policy} {w.speedup:.2f}x vs {w.reference}"
    amdahl = (
        f"; the rollout is {_pct(w.rollout_share)} of the step" if w.rollout_share < 0.75 else ""
    )
    if w.sd_batch == 0:
        if abs(w.speedup - 1) <= NO_CHANGE:
            return (
                f"{head}: no speculative decoding and no change to the rollout's schedule{amdahl}."
            )
        verb = "gains" if w.speedup > 1 else "loses"
        return (
            f"{head}: no speculative decoding; it {verb} by how the rollout is scheduled (bubble "
            f"{_pct(w.bubble_ref)} -> {_pct(w.bubble)}){amdahl}."
        )
    if w.speedup < 1 - NO_CHANGE:
        return _slower(w, head, amdahl)
    off = ""
    if math.isfinite(w.off_speedup) and abs(w.off_speedup - 1) > NO_CHANGE:
        off = f" and runs {w.off_speedup:.2f}x as fast" + (
            " (a drafter pass in every step)" if w.off_speedup < 1 else ""
        )
    if w.sd_share < 0.5:
        where = (
            f"{_pct(1 - w.sd_share)} of {w.reference}'s decoding runs above batch {w.sd_batch}, "
            f"where SD is off{off}; SD makes the rest"
        )
    else:
        where = (
            f"{_pct(w.sd_share)} of {w.reference}'s decoding runs at batch <= {w.sd_batch}, "
            "where SD runs; SD makes it"
        )
    faster = " faster"
    if math.isfinite(w.sd_speedup):
        faster = f" {w.sd_speedup:.2f}x " + ("faster" if w.sd_speedup >= 1 else "as fast")
    if w.sd_share >= 0.5 and off:
        faster += f" (above batch {w.sd_batch} it runs {w.off_speedup:.2f}x as fast)"
    reach = ""
    if math.isfinite(w.reached):
        reach = (f", and {w.policy} reaches {_pct(w.reached)} of that" if w.reached >= 0
                 else f", and {w.policy}'s step is no faster (within {NO_CHANGE:.0%})")
    return (
        f"{head}: {where}{faster}; free SD-eligible decoding would give at most "
        f"{w.ceiling_speedup:.2f}x"
        f"{reach}{amdahl}."
    )


def _slower(w: SpeedupWhy, head: str, amdahl: str) -> str:
    """The sentence for a policy slower than the reference: what its SD costs, where, and the
    ceiling it works under (never a share of that ceiling: the share would be negative)."""
    reasons = []
    if math.isfinite(w.off_speedup) and w.off_speedup < 1 - NO_CHANGE:
        reasons.append(f"above batch {w.sd_batch}, where SD is off, it decodes "
                       f"{w.off_speedup:.2f}x as fast as {w.reference} (a drafter pass in every "
                       f"step) and {_pct(1 - w.sd_share)} of the decoding runs there")
    if math.isfinite(w.sd_speedup) and w.sd_speedup < 1 + NO_CHANGE:
        reasons.append(f"at batch <= {w.sd_batch}, where SD runs, drafting and verifying save "
                       f"{'nothing' if w.sd_speedup <= 1 else 'little'} ({w.sd_speedup:.2f}x)")
    if w.bubble > w.bubble_ref + NO_CHANGE:
        reasons.append(f"its engines wait more (bubble {_pct(w.bubble_ref)} -> {_pct(w.bubble)})")
    if not reasons:
        reasons.append(f"what SD saves at batch <= {w.sd_batch} ({w.sd_speedup:.2f}x there) is "
                       f"less than its costs elsewhere")
    return (f"{head}: slower than {w.reference}, because {'; and '.join(reasons)}; free "
            f"SD-eligible decoding would give at most {w.ceiling_speedup:.2f}x{amdahl}.")


# The decomposition as a table (the CLI's text table, the pages' frame): one header each.
WHY_HEADERS = {
    "policy": "policy",
    "speedup": "speedup",
    "rollout_share": "rollout/step",
    "sd_batch": "SD up to batch",
    "sd_share": "decoding there",
    "sd_speedup": "SD speedup there",
    "off_speedup": "speed elsewhere",
    "bubble": "bubble",
    "ceiling_step_s": "ceiling step s",
    "ceiling_speedup": "ceiling",
    "reached": "reached",
}


def _fmt(name: str, value: float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "-"
    if name in ("speedup", "sd_speedup", "off_speedup", "ceiling_speedup"):
        return f"{value:.2f}x"
    if name == "reached" and value < 0:
        return "slower"  # a share of the ceiling below zero means nothing to a reader
    if name in ("rollout_share", "sd_share", "bubble", "reached"):
        return f"{value:.0%}"
    if name == "ceiling_step_s":
        return f"{value:,.1f}"
    return str(value) if value else "-"


def why_table(whys: list[SpeedupWhy]) -> list[list[str]]:
    """Text rows in WHY_HEADERS' order ('-' where a figure does not apply)."""
    return [[w.policy, *(_fmt(k, getattr(w, k)) for k in list(WHY_HEADERS)[1:])] for w in whys]


def why_frame(whys: list[SpeedupWhy]) -> pd.DataFrame:
    """The decompositions as numbers (NaN where a figure does not apply), indexed by policy, with
    the sentence."""
    rows = [
        {**{k: getattr(w, k) for k in WHY_HEADERS}, "bubble_ref": w.bubble_ref, "why": w.sentence}
        for w in whys
    ]
    for row in rows:  # a share of the ceiling below zero does not apply: the policy is slower
        if row["reached"] < 0:
            row["reached"] = math.nan
    return pd.DataFrame(rows).set_index("policy")


def why_json(w: SpeedupWhy) -> dict:
    """The decomposition for a JSON file: NaN as null, and the sentence."""
    out = {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v)
        for k, v in asdict(w).items()
    }
    return {**out, "sentence": w.sentence}
