"""A `tlt train` run's steps as the Train page shows them: metrics.csv with each column named in
words and given its unit, and what the engines ran, step by step, with the reason each change was
made.

What the engines run is decided between RL steps (real/run/engine_plan.py): SD off while it
decodes slower than a plain engine (the SD guard, from each rollout's measured speed), back on
once the drafter's estimates predict it pays, n-gram or the learned drafter by their estimated
tokens per verify pass; before step 0 a probe may turn SD off at once. metrics.csv records the
drafter each step ran (`drafter_kind`), SD's measured speed on its rollout (`sd_speedup`) and the
drafters' estimates (`eagle_est`, `ngram_est`); the trace's meta records the probe (`sd_probe`).
`engine_story` turns them into sentences, so a run whose accepted length sits at 1.00 for most of
its steps says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from workbench.contracts.policy import DrafterKind

_NUM = st.column_config.NumberColumn
_TEXT = st.column_config.TextColumn
# metrics.csv column -> (label, Streamlit format, help); columns not listed keep their name
METRIC_LABELS: dict[str, tuple[str, str | None, str]] = {
    "rl_step": ("Step", None, "The RL step (from 0)."),
    "step_s": ("Step (s)", "%.1f", "Wall time of the whole RL step."),
    "rollout_s": ("Rollout (s)", "%.1f", "Until the last worker finished decoding."),
    "train_s": ("Update (s)", "%.1f", "The GRPO update."),
    "sync_s": ("Sync (s)", "%.2f", "New weights into every engine."),
    "bubble_fraction": ("Bubble", "percent", "Idle worker-time / rollout worker-time."),
    "tail_fraction": ("Tail", "percent", "Worker-time decoding at a small batch / rollout "
                                         "worker-time."),
    "drafter_train_fraction": ("Spot training", "percent", "Rollout worker-time training the "
                                                           "drafter."),
    "mean_accept_len": ("Accepted length", "%.2f", "Tokens per verify pass (1.00: no SD)."),
    "reward": ("Reward", "%.3f", "Mean reward of the step's responses."),
    "pass_at_g": ("Pass@G", "%.3f", "Mean best reward per prompt."),
    "drafter_kind": ("Drafter", None, "What the engines drafted with ('none': SD off)."),
    "sd_speedup": ("SD vs plain", "%.2fx", "SD's decode speed over a plain engine's on the "
                                           "step's rollout (below 1: SD loses)."),
    "eagle_est": ("EAGLE est.", "%.2f", "The learned drafter's estimated tokens per pass."),
    "ngram_est": ("n-gram est.", "%.2f", "n-gram's estimated tokens per pass."),
    "static_est": ("Static est.", "%.2f", "The initial drafter's, kept static."),
    "drafter_steps": ("Drafter steps", None, "Spot-training steps this RL step."),
    "drafter_loss": ("Drafter loss", "%.3f", "Mean spot-training loss."),
    "tokens": ("Tokens", None, "Response tokens decoded."),
    "longest": ("Longest (tokens)", None, "The step's longest response."),
    "grpo_loss": ("GRPO loss", "%.4f", ""),
    "kl": ("KL", "%.4f", "KL to the reference model."),
    "stop_latency_s": ("Spot stop (s)", "%.3f", "Longest wait for a spot trainer to stop."),
    "style_share": ("Style share", "percent", "Responses in the style the reward asks for."),
}
MISSING = "-"


def metrics_table(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """metrics.csv to show and its column config: a column no step filled is left out (nothing
    measured it in this run), one some steps did not fill is text with MISSING there."""
    shown = df.drop(columns=[c for c in df.columns if df[c].isna().all()])
    config = {}
    for c in shown.columns:
        label, fmt, hlp = METRIC_LABELS.get(c, (c, None, ""))
        if shown[c].dtype.kind == "f" and shown[c].isna().any():
            shown[c] = [MISSING if math.isnan(v) else _text(v, fmt) for v in shown[c]]
            config[c] = _TEXT(label, help=hlp or None)
        elif shown[c].dtype.kind in "if":
            config[c] = _NUM(label, format=fmt, help=hlp or None)
        else:
            config[c] = _TEXT(label, help=hlp or None)
    return shown, config


def _text(v: float, fmt: str | None) -> str:
    if fmt == "percent":
        return f"{v:.1%}"
    return fmt % v if fmt else f"{v:g}"


@dataclass(frozen=True)
class EngineChange:
    """The engines ran `before` up to step `step`, `after` from the next."""

    step: int
    before: str
    after: str
    sentence: str


def _steps(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _est(row: pd.Series, kind: str) -> float:
    v = row.get(f"{kind}_est", math.nan)
    return math.nan if v is None else float(v)


def _why(row: pd.Series, before: str, after: str, upto: int) -> str:
    step = int(row["rl_step"])
    speed = float(row.get("sd_speedup", math.nan))
    if after == DrafterKind.NONE:
        measured = (f"SD with {before} decoded at {speed:.2f}x a plain engine's speed on step "
                    f"{step}'s rollout, slower than without SD" if not math.isnan(speed) else
                    f"the run's SD guard judged SD with {before} slower than a plain engine")
        return (f"SD switched off after step {step}: {measured}, so {_steps(step + 1, upto)} "
                "ran without a drafter (accepted length 1.00). It comes back once the drafter's "
                "estimated tokens per pass predict that SD pays.")
    if before == DrafterKind.NONE:
        est = _est(row, after)
        said = f" ({est:.2f} tokens per pass)" if not math.isnan(est) else ""
        return (f"SD back on after step {step}, with {after}: its estimated tokens per "
                f"pass{said} predicted that SD pays again.")
    return (f"The engines switched from {before} to {after} after step {step}: {after}'s "
            f"estimated {_est(row, after):.2f} tokens per pass beat {before}'s "
            f"{_est(row, before):.2f}.")


def engine_story(df: pd.DataFrame, probe: dict | None = None) -> list[EngineChange]:
    """Each change of what the engines ran, in step order, with its reason; `probe`: the trace
    meta's `sd_probe` (a probe that turned SD off before step 0 comes first)."""
    if df.empty or "drafter_kind" not in df.columns:
        return []
    d = df.sort_values("rl_step").reset_index(drop=True)
    kinds = [str(k) for k in d["drafter_kind"]]
    last = int(d["rl_step"].iloc[-1])
    out = []
    if probe and probe.get("sd_off"):
        upto = next((int(d["rl_step"][i]) - 1 for i, k in enumerate(kinds)
                     if k != DrafterKind.NONE), last)
        speed = probe.get("speedup", math.nan)
        out.append(EngineChange(-1, "(the policy's drafter)", DrafterKind.NONE.value,
                                f"SD was off from the first step: before step 0 a probe decoded "
                                f"at {speed:.2f}x a plain engine's speed, so {_steps(0, upto)} "
                                "ran without a drafter (accepted length 1.00)."))
    for i in range(len(d) - 1):
        if kinds[i] != kinds[i + 1]:
            upto = next((int(d["rl_step"][j]) - 1 for j in range(i + 1, len(d))
                         if kinds[j] != kinds[i + 1]), last)
            out.append(EngineChange(int(d["rl_step"][i]), kinds[i], kinds[i + 1],
                                    _why(d.iloc[i], kinds[i], kinds[i + 1], upto)))
    return out


def show_engine_story(df: pd.DataFrame, probe: dict | None) -> None:
    """What the engines ran, above the metrics: a warning while SD was off for some steps."""
    changes = engine_story(df, probe)
    if not changes:
        return
    off = sum(str(k) == DrafterKind.NONE for k in df["drafter_kind"])
    text = " ".join(c.sentence for c in changes)
    if off:
        st.warning(f"**{off} of {len(df)} steps ran without SD.** {text}")
    else:
        st.info(text)
