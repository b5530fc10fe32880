"""The SD guard's pure rules: a plain engine's cost fitted on an SD engine's steps and SD's
verdict on a rollout (real/run/sd_pricing.py), and when the engines turn SD off and back on
(real/run/engine_plan.py)."""

from __future__ import annotations

import math

import pytest

from real.rollout.requests import EngineStepRow
from real.run.engine_plan import SDOff, guards_sd, sd_next
from real.run.sd_pricing import (
    MIN_STEPS,
    PlainCost,
    SDVerdict,
    plain_cost,
    rollout_verdict,
    sd_verdict,
)


def _step(batch: int, wall: float, draft: float, new_tokens: int | None = None, draft_len: int = 0,
          prefill: int = 0) -> EngineStepRow:
    return EngineStepRow(
        rl_step=0,
        worker=0,
        engine_step=0,
        start_s=0.0,
        wall_s=wall,
        batch_size=batch + prefill,
        num_waiting=0,
        prefill_requests=prefill,
        prefill_tokens=prefill * 20,
        decode_requests=batch,
        scheduled_tokens=batch,
        context_mean=100.0,
        context_max=100,
        draft_len=draft_len,
        num_drafts=0,
        num_draft_tokens=0,
        num_accepted_tokens=0,
        accepted_per_pos=[],
        new_tokens=batch if new_tokens is None else new_tokens,
        draft_s=draft,
    )


def _plain_steps(
    fixed: float, per_seq: float, batches=(64, 48, 40, 33), each: int = 4, draft: float = 0.002
):
    """K=0 steps of an EAGLE engine: wall = a plain step + the drafter's first pass."""
    return [_step(b, fixed + per_seq * b + draft, draft) for b in batches for _ in range(each)]


def test_plain_cost_recovers_fixed_and_per_sequence_cost_from_wall_minus_drafting():
    cost = plain_cost(_plain_steps(0.004, 0.0001))
    assert cost is not None and cost.steps == 16
    assert cost.fixed_s == pytest.approx(0.004) and cost.per_seq_s == pytest.approx(0.0001)
    assert cost.step_s(1) == pytest.approx(0.0041)


def test_plain_cost_ignores_slow_outliers_steps_that_verified_drafts_prefills_and_untimed_steps():
    steps = _plain_steps(0.004, 0.0001)
    # one slow step of a shared machine: a median per batch size
    steps.append(_step(64, 5.0, 0.002))
    # verified drafts: not a plain step's target pass
    steps += [_step(8, 0.02, 0.003, new_tokens=20, draft_len=3)]
    steps += [_step(8, 0.5, 0.001, prefill=4), _step(8, 0.5, math.nan)]
    cost = plain_cost(steps)
    assert cost.fixed_s == pytest.approx(0.004) and cost.per_seq_s == pytest.approx(0.0001)


def test_plain_cost_never_prices_a_step_below_nothing():
    """Large batches slowed by a busy machine steepen the line past the origin: the fit then goes
    through 0 (the constrained least squares), and a verdict's plain time stays positive (the
    switch test's guard read plain_s -0.65 s from such a fit)."""
    steps = [_step(b, t, 0.0) for b, t in ((1, 0.002), (8, 0.003), (32, 0.060), (64, 0.140))
             for _ in range(4)]
    cost = plain_cost(steps)
    assert cost.fixed_s == pytest.approx(0.0, abs=1e-12) and cost.per_seq_s > 0
    assert all(cost.step_s(b) > 0 for b in (1, 8, 32, 64))
    verdict = sd_verdict([_step(4, 0.01, 0.002, new_tokens=12, draft_len=3)], cost)
    assert verdict.plain_s > 0 and verdict.speedup > 0


def test_plain_cost_needs_enough_steps_at_two_batch_sizes():
    assert plain_cost(_plain_steps(0.004, 0.0001, batches=(64,), each=20)) is None
    assert (
        plain_cost(_plain_steps(0.004, 0.0001, batches=(64, 33), each=(MIN_STEPS - 1) // 2)) is None
    )


def test_verdict_prices_each_steps_tokens_at_the_plain_steps_they_need():
    cost = PlainCost(fixed_s=0.004, per_seq_s=0.0, steps=10)
    # batch 2, 6 tokens (3 per sequence) in 0.006 s: a plain engine needs 3 steps, 0.012 s
    v = sd_verdict(
        [_step(2, 0.006, 0.001, new_tokens=6, draft_len=2), _step(2, 0.5, 0.0, prefill=1)], cost
    )
    assert (v.sd_s, v.plain_s, v.steps) == (pytest.approx(0.006), pytest.approx(0.012), 1)
    assert v.speedup == pytest.approx(2.0)


def test_an_engine_whose_k0_steps_pay_a_drafter_pass_and_drafts_accept_little_loses_to_plain():
    """The styles model's case: SD at batch 4 emits 1.3 tokens a sequence per step for 1.5 plain
    steps' time, and K=0 at large batches pays the drafter's pass; a plain engine wins."""
    rows = _plain_steps(0.004, 0.0001, draft=0.003)
    rows += [
        _step(4, 1.5 * 0.0044, 0.002, new_tokens=round(4 * 1.3), draft_len=2) for _ in range(50)
    ]
    v = rollout_verdict([(plain_cost(rows), rows)])
    assert v is not None and v.speedup < 1.0
    # The same steps accepting 3 tokens a sequence per step: SD wins.
    rows = _plain_steps(0.004, 0.0001, draft=0.003) + [
        _step(4, 1.5 * 0.0044, 0.002, new_tokens=12, draft_len=2) for _ in range(50)
    ]
    assert rollout_verdict([(plain_cost(rows), rows)]).speedup > 1.0


def test_rollout_verdict_sums_engines_each_at_its_own_cost_and_skips_engines_without_a_fit():
    fast, slow = _plain_steps(0.002, 0.0), _plain_steps(0.008, 0.0, each=2)  # 16 and 8 K=0 steps
    lone = [_step(4, 0.01, 0.0, new_tokens=8, draft_len=1)]
    v = rollout_verdict(
        [(plain_cost(fast), fast), (plain_cost(slow), slow), (plain_cost(lone), lone)]
    )
    assert v.steps == len(fast) + len(slow)
    # Each engine against its own plain cost (one fit over both would price all at 0.002 s: 0.33x).
    assert v.speedup == pytest.approx((16 * 0.002 + 8 * 0.008) / (16 * 0.004 + 8 * 0.010))
    assert rollout_verdict([(plain_cost(lone), lone)]) is None


def test_a_plain_engines_own_steps_are_what_the_cost_is_fitted_on():
    """The workers' measured plain engine: no drafts, drafting 0 (what `_measure_plain` records)."""
    rows = [_step(b, 0.004 + 0.0001 * b, 0.0) for b in range(32, 0, -1) for _ in range(8)]
    cost = plain_cost(rows)
    assert (
        cost.steps == 256
        and cost.fixed_s == pytest.approx(0.004)
        and cost.per_seq_s == pytest.approx(0.0001)
    )


def test_only_adaptive_sd_policies_are_guarded():
    from workbench.contracts.policy import load_policy

    assert guards_sd(load_policy("tlt-vllm")) and guards_sd(load_policy("tlt-cold"))
    # tlt: a fixed schedule
    assert not guards_sd(load_policy("baseline")) and not guards_sd(load_policy("tlt"))


def test_sd_turns_off_below_one_over_one_plus_margin_and_remembers_why():
    # within the margin
    assert sd_next(None, SDVerdict(1.0, 0.95, 10), "eagle", 2.0, margin=0.1) is None
    assert sd_next(None, None, "eagle", 2.0, margin=0.1) is None  # not judged: SD stays on
    off = sd_next(None, SDVerdict(1.0, 0.8, 10), "eagle", 2.0, margin=0.1)
    assert off == SDOff("eagle", 0.8, 2.0)


def test_sd_comes_back_when_the_mean_of_recent_estimates_predicts_it_wins_by_the_margin():
    off = SDOff("eagle", 0.8, 2.0)
    off = sd_next(off, None, "eagle", 3.0, margin=0.1)
    assert off == SDOff("eagle", 0.8, 2.0, (3.0,))  # one estimate is not enough, however high
    off = sd_next(off, None, "eagle", 2.2, margin=0.1)
    assert off is not None and off.recent == (3.0, 2.2)  # mean 2.6 predicts 1.04x: not enough
    assert sd_next(off, None, "eagle", math.nan, margin=0.1) == off  # not judged this step
    assert sd_next(off, None, "eagle", 3.3, margin=0.1) is None  # mean 2.83 predicts 1.13x


def test_one_high_estimate_among_recent_ones_does_not_bring_sd_back():
    """The styles bench's steps: 2.94 when SD went off at 0.77x, then 2.45, 3.22, 4.73 (the static
    drafter moved alike: the responses, not the drafter, changed)."""
    off = SDOff("eagle", 0.77, 2.94)
    for est in (2.45, 3.22, 4.73):
        off = sd_next(off, None, "eagle", est, margin=0.1)
        assert off is not None
    assert off.recent == (2.45, 3.22, 4.73)


def test_sd_turned_off_before_any_estimate_compares_later_ones_with_the_first():
    """The probe turns SD off before step 0, with no estimate of the drafter yet: the first one
    judged is the reference, and SD returns only once later ones predict a win."""
    off = SDOff("eagle", 0.5, math.nan)
    # not judged: nothing to compare with
    assert sd_next(off, None, "eagle", math.nan, margin=0.1) == off
    off = sd_next(off, None, "eagle", 9.0, margin=0.1)
    assert off == SDOff("eagle", 0.5, 9.0)  # however high, the first estimate is only the reference
    for est in (12.0, 15.0, 30.0):
        off = sd_next(off, None, "eagle", est, margin=0.1)
        assert off is not None  # 0.5 x mean / 9 predicts 0.75x, then 1.06x: short of 1.1
    # mean 30 of the last 3 predicts 1.67x
    assert sd_next(off, None, "eagle", 45.0, margin=0.1) is None


def test_the_probe_falls_from_a_full_batch_to_one_with_the_deepest_contexts_last():
    """Caps rise evenly from 16 to PROBE_TOKENS (never past the run's cap) over problems sorted by
    solution length, each prompt carrying the first half of its solution's lines."""
    from real.run.sd_pricing import PROBE_TOKENS, probe_requests

    reqs = probe_requests(32, seed=5, temperature=1.0, max_tokens=1024, mix="default")
    caps = [r.sampling.max_tokens for r in reqs]
    assert caps[0] == 16 and caps[-1] == PROBE_TOKENS and caps == sorted(caps)
    assert all(r.sampling.temperature == 1.0 and r.sampling.seed is None for r in reqs)
    assert len(reqs[-1].prompt) > len(reqs[0].prompt) and reqs[-1].prompt.count("\n") > 2
    assert max(r.sampling.max_tokens for r in probe_requests(8, 5, 1.0, 100, "default")) == 100


def test_the_drafter_check_says_nothing_was_measured_while_sd_is_off():
    """With SD off the engines run no drafter: no verify pass, no accepted length to print (the
    log said "vLLM measured nan")."""
    from real.run.coordinator import log_check
    from real.run.pool import PoolRollout
    from real.run.records import DrafterCheck, WorkerRollout

    lines: list[str] = []
    off = PoolRollout(0.0, 1.0, {0: WorkerRollout(0, 0.0, 1.0, [], [], {})}, [])
    log_check(lines.append, DrafterCheck(2.5, 1.1), "none", off)
    on = PoolRollout(0.0, 1.0, {0: WorkerRollout(0, 0.0, 1.0, [], [], {}, drafts=10,
                                                 accepted=15)}, [])
    log_check(lines.append, DrafterCheck(2.5, 1.1), "eagle", on)
    assert "nan" not in lines[0] and lines[0].endswith("(none ran: no SD, nothing measured)")
    assert lines[1].endswith("(eagle ran, vLLM measured 2.50)")
