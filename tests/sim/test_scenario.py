"""End to end on the FastRL 7B example: a static drafter goes stale, a spot-trained one holds, TLT
pays."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.simulator import simulate
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload

STEPS = 20
# Spot training reaches the drafter's plateau within 5-10 steps here (it depends on how
# much idle time the long tail leaves each step); judge the plateau from step 10.
WARMUP = 10


@pytest.fixture(scope="module")
def runs(paper_7b, policies):
    wl = replace(paper_7b, steps=STEPS)
    profile = load_profile(wl.profile)
    # The cold-start mechanisms (staleness, spot training, the n-gram switch) with the drafter
    # trained at the profile's best learning rate: not a preset's hyperparameter.
    cold = policies["tlt-cold"]
    cold = replace(cold, spot_training=replace(cold.spot_training, lr=profile.learning.lr_best))
    chosen = {"baseline": policies["baseline"], "static-sd": policies["static-sd"],
              "tlt-cold": cold}
    return {name: simulate(wl, pol, profile, seed=0) for name, pol in chosen.items()}


def test_every_step_is_reported(runs):
    for run in runs.values():
        assert [m.rl_step for m in run.steps] == list(range(STEPS))


def accept_len_at(run, draft_len: int) -> dict[int, float]:
    """Per step, tokens per verify pass over the passes that drafted `draft_len` tokens.

    The step's overall mean accepted length also moves with the draft lengths the bandit
    picks; at one fixed draft length it measures the drafter alone.
    """
    df = run.timeline
    rows = df[(df["state"] == "decode_sd") & (df["draft_len"] == draft_len)]
    sums = rows.groupby("rl_step")[["tokens", "passes"]].sum()
    return {int(step): float(r.tokens / r.passes) for step, r in sums.iterrows() if r.passes > 0}


def test_static_drafter_goes_stale(runs):
    accept = [m.mean_accept_len for m in runs["static-sd"].steps]
    assert accept[-1] < 0.92 * accept[0], accept
    # The trend is down: the last quarter is below the first quarter.
    assert np.mean(accept[-5:]) < np.mean(accept[:5]) - 0.1, accept
    at4 = accept_len_at(runs["static-sd"], 4)
    steps = sorted(at4)
    assert steps[0] == 0 and steps[-1] >= STEPS - 2
    assert at4[steps[-1]] < 0.9 * at4[steps[0]], at4
    quality = [m.drafter_quality for m in runs["static-sd"].steps]
    assert all(b < a for a, b in zip(quality, quality[1:]))
    assert all(m.drafter_trained_tokens == 0 for m in runs["static-sd"].steps)


def test_a_cold_drafter_holds_after_warm_up(runs):
    at4 = accept_len_at(runs["tlt-cold"], 4)
    held = [at4[s] for s in range(WARMUP, STEPS)]  # K=4 is used every step
    assert min(held) >= 0.9 * max(held), at4
    static4 = accept_len_at(runs["static-sd"], 4)
    assert held[-1] > 1.1 * static4[max(static4)], (at4, static4)
    # Overall, whatever draft lengths the bandit picked, it ends well above static-sd.
    tlt = [m.mean_accept_len for m in runs["tlt-cold"].steps]
    static = [m.mean_accept_len for m in runs["static-sd"].steps]
    assert tlt[-1] > 1.2 * static[-1], (tlt, static)
    assert np.mean(tlt[WARMUP:]) > 1.2 * np.mean(static[WARMUP:])
    # It starts cold on the n-gram drafter and switches to the learned one.
    kinds = [m.drafter_kind for m in runs["tlt-cold"].steps]
    assert kinds[0] == "ngram" and all(k == "eagle" for k in kinds[WARMUP:])
    # Spot training needs idle time: a step whose engines finish within one drafter step of
    # each other trains nothing; most steps leave some.
    assert sum(m.drafter_trained_tokens > 0 for m in runs["tlt-cold"].steps) >= 0.8 * STEPS
    assert all(m.drafter_quality > 0.9 for m in runs["tlt-cold"].steps[WARMUP:])


@pytest.fixture(scope="module")
def paper_runs(policies):
    """The paper's evaluation workload for Qwen2.5-7B (a short run), baseline vs the paper's TLT."""
    wl = replace(load_workload("tlt-eval-qwen2.5-7b"), steps=6)
    profile = load_profile(wl.profile)
    return {name: simulate(wl, policies[name], profile, seed=0) for name in ("baseline", "tlt")}


def test_tlt_steps_are_faster_than_baseline(paper_runs):
    """The paper's TLT (warm-started trees per bucket): every step faster on the same responses."""
    base = [m.step_time_s for m in paper_runs["baseline"].steps]
    tlt = [m.step_time_s for m in paper_runs["tlt"].steps]
    assert all(t < b for t, b in zip(tlt, base)), list(zip(tlt, base))
    assert sum(base) / sum(tlt) > 1.1
    assert paper_runs["tlt"].mean("rollout_time_s") < paper_runs["baseline"].mean("rollout_time_s")


def test_the_long_tail_leaves_bubbles_that_tlt_fills(runs):
    base = runs["baseline"]
    assert base.mean("bubble_fraction") > 0.05
    assert runs["tlt-cold"].mean("drafter_train_fraction") > 0.0
    assert runs["tlt-cold"].mean("bubble_fraction") < base.mean("bubble_fraction")
