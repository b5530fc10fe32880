"""workbench/schedule.py: the draft length a profile predicts best per batch bucket (pure, no
vLLM)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.acceptance import stats_for
from sim.costs import draft_step_s, verify_step_s
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.schedule import (
    goodput,
    predict_schedule,
    start_tables,
    with_predicted_schedule,
    with_table,
)


def test_goodput_is_the_cost_models_tokens_per_second():
    prof = load_profile("cpu-tiny")
    want = 8 * stats_for(prof.acceptance, "eagle", 1.0, 4).mean / (
        verify_step_s(prof.decode, 8, 256, 4) + draft_step_s(prof.drafter, "eagle", 8, 4))
    assert goodput(prof, "eagle", 1.0, 8, 4, 256) == pytest.approx(want)
    assert goodput(prof, "ngram", 0.0, 8, 0, 256) == pytest.approx(
        8 / verify_step_s(prof.decode, 8, 256, 0)
    )


def test_each_bucket_starts_at_its_best_arm_and_sd_is_off_where_no_arm_pays():
    pol, prof = load_policy("tlt-vllm"), load_profile("cpu-tiny")
    ps = predict_schedule(pol, prof, kind="ngram")
    assert len(ps.buckets) == len(pol.schedule) and ps.kind == "ngram"
    for b in ps.buckets:
        assert set(b.speedups) == set(pol.bandit.arms) | {0} and b.speedups[0] == pytest.approx(1.0)
        best = max(b.speedups.values())
        assert (b.draft_len == 0) == (best <= 1.0)
        if b.draft_len:
            assert b.speedup == best
    # n-gram drafts for free but verifies K + 1 tokens a sequence: it pays at batch 1, not at 17-32.
    assert ps.buckets[0].draft_len > 0 and ps.table[-1] == 0
    # A perfect drafter would pay everywhere under these costs; no drafter at all nowhere.
    perfect = replace(prof, acceptance=replace(prof.acceptance, eagle_alpha_fresh=0.999))
    assert all(k > 0 for k in predict_schedule(pol, perfect, kind="eagle", quality=1.0).table)
    # A cold drafter pays nowhere beyond the drafts it gets right: an EAGLE engine runs its drafter
    # pass with SD off too, so one cold draft (5% accepted) can tie K = 0 at batch 1, never more.
    cold = predict_schedule(pol, prof, kind="eagle", quality=0.0)
    assert all(max(b.speedups.values()) < 1.05 for b in cold.buckets)
    assert all(k <= 1 for k in cold.table) and cold.table[-1] == 0


def test_the_predicted_policy_keeps_everything_but_the_draft_lengths():
    pol, prof = load_policy("tlt-vllm"), load_profile("cpu-tiny")
    tables = start_tables(pol, prof)
    assert set(tables) == {"eagle", "ngram"}  # a fallback policy may run either
    out = with_predicted_schedule(pol, prof)
    assert tuple(r.draft_len for r in out.schedule) == tables["eagle"].table
    assert [(r.min_batch, r.max_batch) for r in out.schedule] == [
        (r.min_batch, r.max_batch) for r in pol.schedule
    ]
    assert replace(out, schedule=pol.schedule) == pol
    # Fixed tables are run as written; no SD, nothing to predict.
    for name in ("static-sd", "baseline", "tlt-base"):
        assert with_predicted_schedule(load_policy(name), prof) == load_policy(name)
    with pytest.raises(ValueError, match="draft lengths for the"):
        with_table(pol, (1, 2))
    with pytest.raises(ValueError, match="kind"):
        predict_schedule(load_policy("baseline"), prof)
