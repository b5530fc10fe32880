"""Cost, acceptance and drafter models: the shapes the simulator's conclusions rest on."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.acceptance import (
    NO_SD,
    accept_stats,
    cumulative_acceptance,
    eagle_alpha,
    stats_for,
    suffix_stats,
)
from sim.costs import draft_step_s, segment_s, verify_step_s
from sim.drafter import (
    DrafterState,
    active_kind,
    after_policy_update,
    after_training,
    initial_state,
    lr_efficiency,
)
from workbench.contracts.policy import DrafterConfig
from workbench.contracts.strategy import Strategy

# --------------------------------------------------------------------------- cost model


def test_verify_cost_grows_with_batch_context_and_draft_length(gpu_profile):
    c = gpu_profile.decode
    for k in (0, 2, 4, 8):
        costs = [verify_step_s(c, b, 1024, k) for b in (1, 2, 8, 32, 128, 512)]
        assert all(b > a for a, b in zip(costs, costs[1:])), costs
    for b in (1, 16, 256):
        costs = [verify_step_s(c, b, ctx, 4) for ctx in (128, 1024, 8192, 32768)]
        assert all(y > x for x, y in zip(costs, costs[1:])), costs
    for b in (1, 16, 256):
        costs = [verify_step_s(c, b, 1024, k) for k in range(0, 9)]
        assert all(y >= x for x, y in zip(costs, costs[1:])), costs
    # At large batch every extra drafted token costs strictly more.
    costs = [verify_step_s(c, 256, 1024, k) for k in range(0, 9)]
    assert all(y > x for x, y in zip(costs, costs[1:])), costs


def test_verifying_drafts_is_nearly_free_at_batch_1_but_not_at_large_batch(gpu_profile):
    c = gpu_profile.decode
    # Batch 1: memory-bound (reading the weights dominates), K tokens cost ~ 1 token.
    assert verify_step_s(c, 1, 1024, 4) / verify_step_s(c, 1, 1024, 0) < 1.05
    # Batch 256: compute-bound, 5 tokens per sequence cost clearly more than 1.
    assert verify_step_s(c, 256, 1024, 4) / verify_step_s(c, 256, 1024, 0) > 1.3


def test_draft_cost(gpu_profile):
    d = gpu_profile.drafter
    assert draft_step_s(d, "none", 8, 4) == 0.0
    assert draft_step_s(d, "ngram", 8, 0) == 0.0
    # An EAGLE engine with SD off still runs its drafter's first forward (its KV cache must see
    # every token): one drafter step, no less than the first of a chain.
    assert draft_step_s(d, "eagle", 8, 0) == draft_step_s(d, "eagle", 8, 1) > 0
    # EAGLE runs K sequential drafter forwards: cost grows with K and with batch.
    assert draft_step_s(d, "eagle", 8, 4) > draft_step_s(d, "eagle", 8, 2) > 0
    assert draft_step_s(d, "eagle", 64, 4) > draft_step_s(d, "eagle", 8, 4)
    assert draft_step_s(d, "ngram", 64, 4) > draft_step_s(d, "ngram", 8, 4) > 0


def _fresh_eagle_len(profile, k):
    return stats_for(profile.acceptance, "eagle", 1.0, k).mean


def _sd_over_plain(profile, kind, accept_len, batch, context, k=4):
    """Goodput with SD over goodput of a plain engine (no drafter): B * E[L] / (T_verify +
    T_draft), per pass."""
    c, d = profile.decode, profile.drafter
    plain = 1.0 / segment_s(c, d, "none", batch, context, 0)
    return (accept_len / segment_s(c, d, kind, batch, context, k)) / plain


def test_sd_beats_no_sd_at_batch_1(gpu_profile):
    # The aligned EAGLE drafter at K=4 (~3.7 tokens per verify) on a 7B TP4 engine, whose four draft
    # steps cost about a target step: a clear gain, well below the accepted length.
    assert _sd_over_plain(gpu_profile, "eagle", _fresh_eagle_len(gpu_profile, 4), 1, 1024) > 1.5
    ngram = stats_for(gpu_profile.acceptance, "ngram", 0.0, 4).mean
    assert _sd_over_plain(gpu_profile, "ngram", ngram, 1, 1024) > 1.5


def _largest_winning_batch(profile, kind, accept_len, context, limit=4096):
    """Largest batch in 1..limit where SD K=4 beats no SD; limit + 1 if it still wins at limit."""
    wins = [b for b in range(1, limit + 1)
            if _sd_over_plain(profile, kind, accept_len, b, context) > 1.0]
    if not wins:
        return 0
    return limit + 1 if wins[-1] == limit else wins[-1]


@pytest.mark.parametrize("kind,quality", [("ngram", 0.0), ("eagle", 0.8)])
def test_longer_context_moves_the_crossover_up(gpu_profile, kind, quality):
    """SD pays at small batch and, for these drafters, stops paying at some large batch; long
    contexts move that batch up (DESIGN: verification is nearly free while reading weights and KV
    dominates). The exact crossover is the profile's, not a law."""
    accept_len = stats_for(gpu_profile.acceptance, kind, quality, 4).mean
    short = _largest_winning_batch(gpu_profile, kind, accept_len, 1024)
    long = _largest_winning_batch(gpu_profile, kind, accept_len, 16384)
    assert 1 <= short <= 4096, "SD must pay at batch 1 and stop paying somewhere at 1k context"
    assert long > short


def test_sd_pays_most_at_small_batch(gpu_profile):
    """Even an aligned drafter, which the fitted H100 profile lets pay at any batch, gains most in
    the tail."""
    accept_len = stats_for(gpu_profile.acceptance, "eagle", 1.0, 4).mean
    gains = [_sd_over_plain(gpu_profile, "eagle", accept_len, b, 1024)
             for b in (1, 8, 32, 128, 512)]
    assert all(later < earlier for earlier, later in zip(gains, gains[1:])), gains


# --------------------------------------------------------------------------- acceptance


@pytest.mark.parametrize("alpha,shape",
                         [(0.8, 0.8), (0.45, 0.7), (0.05, 1.0), (0.95, 2.0), (0.6, 0.1)])
def test_cumulative_acceptance_decreases_with_position(alpha, shape):
    r = cumulative_acceptance(alpha, shape, 8)
    assert len(r) == 8
    assert r[0] == pytest.approx(alpha)
    assert all(0.0 < x < 1.0 for x in r)
    assert all(b < a for a, b in zip(r, r[1:])), r


def test_accept_stats_mean_and_variance_match_monte_carlo():
    rng = np.random.default_rng(2024)
    for alpha, shape, k in [(0.8, 0.8, 4), (0.45, 0.7, 6), (0.3, 1.0, 3), (0.9, 0.5, 8)]:
        r = cumulative_acceptance(alpha, shape, k)
        stats = accept_stats(r)
        assert stats.mean == pytest.approx(1.0 + sum(r))
        # Sample the number accepted: P(accepted >= i) = r_i (r is decreasing).
        u = rng.random(400_000)
        accepted = (np.asarray(r)[None, :] > u[:, None]).sum(axis=1)
        emitted = 1 + accepted
        assert stats.mean == pytest.approx(emitted.mean(), abs=0.01)
        assert stats.var == pytest.approx(emitted.var(), rel=0.02)
        assert 0 < stats.var < k**2


def test_accept_stats_edge_cases():
    assert accept_stats([]) == NO_SD
    certain = accept_stats([1.0, 1.0, 1.0])
    assert certain.mean == pytest.approx(4.0) and certain.var == pytest.approx(0.0, abs=1e-12)


def test_front_loaded_acceptance_beats_the_geometric_form():
    for alpha in (0.3, 0.6, 0.8):
        for k in (2, 4, 8):
            front = accept_stats(cumulative_acceptance(alpha, 0.7, k)).mean
            geometric = accept_stats(cumulative_acceptance(alpha, 1.0, k)).mean
            assert front > geometric
            # Geometric closed form: 1 + sum alpha^i.
            assert geometric == pytest.approx(1 + sum(alpha**i for i in range(1, k + 1)))


def test_eagle_alpha_interpolates_between_cold_and_fresh(gpu_profile):
    m = gpu_profile.acceptance
    assert eagle_alpha(m, 0.0) == pytest.approx(m.eagle_alpha_cold)
    assert eagle_alpha(m, 1.0) == pytest.approx(m.eagle_alpha_fresh)
    assert eagle_alpha(m, 0.5) == pytest.approx((m.eagle_alpha_cold + m.eagle_alpha_fresh) / 2)
    values = [eagle_alpha(m, q) for q in np.linspace(0, 1, 11)]
    assert all(b > a for a, b in zip(values, values[1:]))
    # Better quality, longer accepted runs.
    lens = [stats_for(m, "eagle", q, 4).mean for q in np.linspace(0, 1, 11)]
    assert all(b > a for a, b in zip(lens, lens[1:]))


def test_stats_for_no_sd_is_one_token_per_pass(gpu_profile):
    assert stats_for(gpu_profile.acceptance, "none", 1.0, 4) == NO_SD
    assert stats_for(gpu_profile.acceptance, "eagle", 1.0, 0) == NO_SD


# --------------------------------------------------------------------------- drafter


def test_policy_update_makes_the_drafter_stale(gpu_profile):
    s = DrafterState(0.9, (1000,))
    after = after_policy_update(s, gpu_profile)
    assert after.quality < s.quality
    assert after.quality == pytest.approx(0.9 * (1 - gpu_profile.acceptance.staleness_per_update))
    assert after.buffer_tokens == s.buffer_tokens
    q = s
    for _ in range(50):
        q = after_policy_update(q, gpu_profile)
    assert q.quality < after.quality


def test_training_raises_quality_toward_the_buffers_freshness(gpu_profile, policies):
    # At the profile's best learning rate (the learning curve's efficiency is 1 there).
    tlt = replace(policies["tlt-cold"], spot_training=replace(policies["tlt-cold"].spot_training,
                                                         lr=gpu_profile.learning.lr_best))
    decay = 1 - gpu_profile.acceptance.staleness_per_update
    new, old = 20_000_000, 10_000_000
    state = DrafterState(0.2, (old,))
    target = (new + old * decay) / (new + old)
    after = after_training(state, tlt, gpu_profile, trained_tokens=1e12, new_tokens=new)
    assert after.buffer_tokens == (new, old)
    assert state.quality < after.quality <= target + 1e-12
    assert target - after.quality < 0.05 * (target - state.quality)
    # A single fresh step in the buffer: the reachable quality is 1.
    only_new = after_training(DrafterState(0.2, ()), tlt, gpu_profile, 1e12, new)
    assert only_new.quality > 0.95
    # More training, more quality (until saturation).
    small = after_training(state, tlt, gpu_profile, trained_tokens=1e6, new_tokens=new)
    assert state.quality < small.quality < after.quality


def test_buffer_keeps_only_the_configured_number_of_steps(gpu_profile, policies):
    tlt = policies["tlt-cold"]  # buffer: 2
    s = initial_state(tlt, gpu_profile)
    for tokens in (100, 200, 300):
        s = after_training(s, tlt, gpu_profile, 0.0, tokens)
    assert s.buffer_tokens == (300, 200)


def test_training_disabled_leaves_quality_unchanged(gpu_profile, policies):
    cold = policies["tlt-cold"]
    off = replace(cold, spot_training=replace(cold.spot_training, enabled=False))
    s = DrafterState(0.3, (5_000_000,))
    after = after_training(s, off, gpu_profile, trained_tokens=1e12, new_tokens=5_000_000)
    assert after.quality == s.quality
    # Enabled but nothing trained: also unchanged.
    after = after_training(s, policies["tlt-cold"], gpu_profile, trained_tokens=0.0,
                           new_tokens=5_000_000)
    assert after.quality == s.quality


def test_learning_rate_far_from_best_helps_less(gpu_profile, policies):
    tlt = policies["tlt-cold"]
    best = gpu_profile.learning.lr_best
    s = DrafterState(0.1, ())
    gains = {}
    for lr in (best, best * 10, best / 10, best * 100):
        pol = replace(tlt, spot_training=replace(tlt.spot_training, lr=lr))
        trained = after_training(s, pol, gpu_profile, trained_tokens=3e6, new_tokens=50_000_000)
        gains[lr] = trained.quality - s.quality
    assert gains[best] > gains[best * 10] > gains[best * 100] > 0
    assert gains[best] > gains[best / 10]
    assert lr_efficiency(best, best, 1.0) == pytest.approx(1.0)


def test_active_kind_falls_back_to_ngram_while_cold(gpu_profile, policies):
    tlt = policies["tlt-cold"]
    assert tlt.drafter.ngram_fallback
    assert active_kind(tlt, gpu_profile, initial_state(tlt, gpu_profile)) == "ngram"
    assert active_kind(tlt, gpu_profile, DrafterState(0.0)) == "ngram"
    assert active_kind(tlt, gpu_profile, DrafterState(1.0)) == "eagle"
    kinds = [active_kind(tlt, gpu_profile, DrafterState(q)) for q in np.linspace(0, 1, 21)]
    switch = kinds.index("eagle")
    assert all(k == "ngram" for k in kinds[:switch]) and all(k == "eagle" for k in kinds[switch:])
    # Without the fallback the learned drafter is used even when cold.
    no_fallback = replace(tlt, drafter=DrafterConfig(kind="eagle"))
    assert active_kind(no_fallback, gpu_profile, DrafterState(0.0)) == "eagle"
    assert active_kind(policies["baseline"], gpu_profile, DrafterState(0.0)) == "none"


def test_switch_margin_delays_the_switch(gpu_profile, policies):
    tlt = policies["tlt-cold"]
    wide = replace(tlt, drafter=replace(tlt.drafter, switch_margin=0.5))
    qs = np.linspace(0, 1, 101)
    first = lambda pol: next(q for q in qs
                             if active_kind(pol, gpu_profile, DrafterState(q)) == "eagle")
    assert first(wide) > first(tlt)


def test_warm_start(policies, gpu_profile):
    warm = gpu_profile.acceptance.warm_start_quality
    assert initial_state(policies["static-sd"], gpu_profile).quality == warm
    assert initial_state(policies["tlt-cold"], gpu_profile).quality == 0.0
    # An offline-trained drafter starts at the profile's warm-start quality, below an aligned one.
    base_aligned = replace(gpu_profile,
                           acceptance=replace(gpu_profile.acceptance, warm_start_quality=0.4))
    assert initial_state(policies["static-sd"], base_aligned).quality == 0.4



# --------------------------------------------------------------------------- trees


def _tree_model(gpu_profile, gain=0.8):
    return replace(gpu_profile.acceptance, tree_width_gain=gain)


def test_tree_acceptance_is_bounded_grows_with_tokens_and_saturates(gpu_profile):
    acc = _tree_model(gpu_profile)
    lens = [stats_for(acc, "eagle", 1.0, Strategy(8, 4, t)).mean for t in (9, 16, 32, 48, 64, 96)]
    assert all(1.0 < v <= 9.0 for v in lens), lens  # at most depth + 1 tokens per pass
    # More candidates per level, more accepted.
    assert all(b > a for a, b in zip(lens, lens[1:])), lens
    gains = [b - a for a, b in zip(lens, lens[1:])]
    per_token = [g / dt for g, dt in zip(gains, (7, 16, 16, 16, 32))]
    assert all(b < a for a, b in zip(per_token, per_token[1:])), per_token  # diminishing returns
    # Deeper trees accept more with the same width; a 9-token top-4 tree of depth 8 is the chain
    # of 8.
    deep = stats_for(acc, "eagle", 1.0, Strategy(8, 4, 48)).mean
    assert deep > stats_for(acc, "eagle", 1.0, Strategy(4, 4, 24)).mean
    chain = stats_for(acc, "eagle", 1.0, 8).mean
    assert stats_for(acc, "eagle", 1.0, Strategy(8, 4, 9)).mean == pytest.approx(chain)
    # Without a width gain a tree is no better than its deepest chain.
    flat = _tree_model(gpu_profile, 0.0)
    flat_chain = stats_for(flat, "eagle", 1.0, 8).mean
    assert stats_for(flat, "eagle", 1.0, Strategy(8, 4, 64)).mean == pytest.approx(flat_chain)


def test_tree_costs_grow_with_tokens_steps_and_topk(gpu_profile):
    c, d = gpu_profile.decode, gpu_profile.drafter
    verify = [verify_step_s(c, 16, 1024, Strategy(8, 4, t)) for t in (9, 16, 48, 64)]
    assert all(b > a for a, b in zip(verify, verify[1:])), verify
    chain_s = verify_step_s(c, 16, 1024, 8)
    assert verify_step_s(c, 16, 1024, Strategy(8, 4, 9)) == pytest.approx(chain_s)
    top4 = draft_step_s(d, "eagle", 16, Strategy(8, 4, 48))
    assert draft_step_s(d, "eagle", 16, Strategy(8, 8, 48)) > top4
    assert draft_step_s(d, "eagle", 16, Strategy(12, 4, 48)) > top4
    # Overlap 1 is a roofline (the larger of weight reading and compute); 0 adds them.
    roof, added = replace(c, overlap=1.0), replace(c, overlap=0.0)
    for b in (1, 32, 512):
        assert verify_step_s(added, b, 1024, 4) >= verify_step_s(roof, b, 1024, 4)
    gap = verify_step_s(added, 1, 0, 4) - verify_step_s(roof, 1, 0, 4)
    assert gap == pytest.approx(min(c.weights_s, c.compute_s_per_token * 5))


# ----------------------------------------------------- drafts from history and siblings


def test_suffix_acceptance_grows_with_repetition(gpu_profile):
    acc = gpu_profile.acceptance
    k = Strategy.chain(8)
    none = suffix_stats(acc, k, history=False, siblings=0.0).mean
    siblings = [suffix_stats(acc, k, False, s).mean for s in (0.0, 0.3, 0.7, 1.0)]
    assert none == pytest.approx(1.0)  # nothing to draft from: every pass is the target's own token
    assert all(b > a for a, b in zip(siblings, siblings[1:]))
    assert suffix_stats(acc, k, True, 0.0).mean > none
    both = suffix_stats(acc, k, True, 1.0).mean
    assert both > max(suffix_stats(acc, k, True, 0.0).mean, siblings[-1])
    more = replace(acc, suffix_history_match=0.9)
    assert suffix_stats(more, k, True, 0.0).mean > suffix_stats(acc, k, True, 0.0).mean
    assert suffix_stats(acc, k, True, 1.0).mean <= 9.0


def test_suffix_drafts_pay_after_the_first_epoch():
    from sim.simulator import simulate
    from workbench.contracts.policy import load_policy
    from workbench.contracts.profile import load_profile
    from workbench.contracts.workload import load_workload

    wl = replace(load_workload("peer-spec-rl-7b-8gpu"), prompts_per_step=32, epoch_steps=2)
    run = simulate(wl, load_policy("history-sd"), load_profile(wl.profile), seed=1, steps=4)
    before = [m.mean_accept_len for m in run.steps[:2]]
    after = [m.mean_accept_len for m in run.steps[2:]]
    assert min(after) > max(before) > 1.0  # siblings only, then the prompts' earlier answers too
