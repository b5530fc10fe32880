"""What a run log's reader found, printed before the shape: the framework that wrote it (name,
version and where that came from, the logging code its names were read from), its timers onto
veRL's phases and those it could not map, the semantics honoured, what the lengths model had to
assume, and the engines' running batch where the log has their periodic lines."""

from __future__ import annotations

import numpy as np

from workbench.runlog.frameworks.engine_lines import SMALL_BATCH, step_batch
from workbench.runlog.lengths import ModelledLengths, StepStats
from workbench.runlog.reader import TIMING, RunLog
from workbench.runlog.sd_acceptance import LogAcceptance


def framework_lines(log: RunLog, stats: StepStats | None = None) -> list[str]:
    fw = log.framework
    lines = [f"framework: {fw.describe()}"]
    phases = [c[len(TIMING):] for c in log.metrics.columns if str(c).startswith(TIMING)]
    lines.append(f"  timers onto veRL's phases: {', '.join(phases)}")
    if log.unmapped:
        lines.append(f"  kept under their own names (no veRL phase): {', '.join(log.unmapped)}")
    lines += [f"  {note}" for note in log.notes]
    if stats is not None:
        unknown = int((~stats.max_known).sum())
        if unknown:
            lines.append(f"  {unknown} steps without a longest response: their lengths' spread is "
                         "the run's median (or 0.5 where no step gives one)")
        if not stats.prompt_known:
            lines.append("  no prompt length in the log: prompts modelled as 1 token (their "
                         "prefill and context go into the fitted decode speed)")
    return lines + running_lines(log)


def running_lines(log: RunLog) -> list[str]:
    """The engines' running batch, by step (each step's rollout: its engines' lines printed
    between the previous step's record and its own)."""
    rb = log.running
    if rb is None:
        return []
    rows = log.metrics["line"].to_numpy(int)
    per = [step_batch(rb, int(a) + 1, int(b)) for a, b in zip(np.r_[0, rows[:-1]], rows)]
    per = [p for p in per if p is not None]
    out = [f"running batch: {rb.samples} periodic {rb.source} lines from "
           f"{len(set(rb.engine))} engine(s); in {len(per)} timed steps' rollouts"]
    if per:
        med = np.median([p.median for p in per])
        small = np.median([p.small_share for p in per])
        out.append(f"  per step (medians over steps): running batch median {med:.0f}, p90 "
                   f"{np.median([p.p90 for p in per]):.0f}, largest "
                   f"{np.median([p.largest for p in per]):.0f}; {100 * small:.0f}% of the lines at "
                   f"a batch <= {SMALL_BATCH}")
        acc = [p.accept_len for p in per if np.isfinite(p.accept_len)]
        if acc:
            out.append(f"  speculative decoding: accepted length {np.median(acc):.2f} tokens per "
                       "verify pass (the engines' lines, median over steps)")
    return out


def framework_summary(log: RunLog, acceptance: LogAcceptance | None) -> dict:
    """The summary JSON's `framework`: who wrote the log, what mapped, SD's acceptance."""
    fw = log.framework
    out = {"name": fw.name, "version": fw.version or None, "version_source": fw.version_source,
           "code": fw.code, "unmapped": list(log.unmapped), "notes": list(log.notes)}
    if acceptance is not None:
        out["sd_accept_length"] = round(acceptance.accept_len, 4)
        out["sd_eagle_alpha_fresh"] = round(acceptance.alpha, 5)
        out["sd_eagle_alpha_fresh_se"] = round(acceptance.alpha_se, 5)
        err = acceptance.heldout_error_pct
        out["sd_accept_heldout_median_abs_error_pct"] = None if np.isnan(err) else round(err, 2)
    return out


def running_check(log: RunLog, lengths: ModelledLengths, passes: np.ndarray, engines: int
                  ) -> list[str]:
    """The running batch the simulation decoded at against the engines' own lines, per step: the
    measured mean of the lines printed in the step's rollout (SGLang prints one every 40 decode
    passes, so its mean weighs passes alike; vLLM's every few seconds, weighing time), the simulated
    one its response tokens per engine over its mean engine passes (`passes`: steps x engines)."""
    rb = log.running
    if rb is None:
        return []
    rows = log.metrics["line"].to_numpy(int)
    meas, sim = [], []
    for i, (a, b) in enumerate(zip(np.r_[0, rows[:-1]], rows)):
        idx = rb.between(int(a) + 1, int(b))
        if len(idx) and passes[i].mean() > 0:
            meas.append(float(rb.running[idx].mean()))
            sim.append(float(lengths.lengths[i].sum()) / engines / float(passes[i].mean()))
    if not meas:
        return []
    m, s = np.array(meas), np.array(sim)
    err = float(np.median(np.abs(s - m) / m) * 100)
    return [f"running batch, simulated against the engines' lines ({len(m)} steps): measured "
            f"{np.median(m):.1f}, simulated {np.median(s):.1f} sequences per engine pass (medians "
            f"over steps); median |error| {err:.0f}%"]
