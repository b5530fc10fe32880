"""A mixture-of-experts target's cost: the experts a pass touches (sim/costs.py)."""

from dataclasses import replace

import pytest

from sim.costs import expert_read_s, experts_touched, prefill_s, verify_step_s
from workbench.contracts.profile import DecodeCost, ExpertRouting
from workbench.contracts.strategy import Strategy

E, K = 128, 8
ROUTING = ExpertRouting(count=E, per_token=K, weights_s=0.016)
MOE = DecodeCost(overhead_s=0.001, per_seq_s=0.0, weights_s=0.001, compute_s_per_token=1e-6,
                 kv_s_per_token=1e-9, prefill_s_per_token=1e-5, overlap=1.0, experts=ROUTING)


def test_one_token_reads_its_top_k_experts():
    assert experts_touched(1, K, E) == pytest.approx(K)
    assert experts_touched(0, K, E) == 0.0


def test_a_large_batch_reads_every_expert():
    assert experts_touched(512, K, E) == pytest.approx(E, rel=1e-6)
    assert experts_touched(4096, 2, 8) == pytest.approx(8, rel=1e-9)


def test_the_count_grows_with_tokens_and_never_passes_the_expert_count():
    counts = [experts_touched(n, K, E) for n in (1, 2, 4, 8, 16, 32, 64, 128)]
    assert counts == sorted(counts) and counts[-1] <= E
    # uniform routing: E (1 - (1 - k/E)^n), e.g. 4 tokens of top-8 in 128 experts
    assert experts_touched(4, K, E) == pytest.approx(E * (1 - (1 - K / E) ** 4))


def test_verifying_at_batch_1_reads_several_times_a_decode_steps_experts():
    decode = expert_read_s(ROUTING, 1)
    verify = expert_read_s(ROUTING, 1 * Strategy.chain(3).verify_tokens)
    assert verify / decode == pytest.approx(experts_touched(4, K, E) / K)
    assert verify / decode > 3.0
    # ... and at a large batch about the same
    assert expert_read_s(ROUTING, 256 * 4) / expert_read_s(ROUTING, 256) == pytest.approx(1.0,
                                                                                          abs=1e-3)


def test_the_verify_pass_prices_the_expert_weights_it_reads():
    one = verify_step_s(MOE, 1, 2048, 0)
    chain = verify_step_s(MOE, 1, 2048, Strategy.chain(3))
    dense = replace(MOE, weights_s=MOE.weights_s + ROUTING.weights_s * K / E, experts=None)
    # A dense engine of the same active size pays almost nothing to verify 4 tokens; the MoE
    # engine reads ~3.7x the experts.
    assert verify_step_s(dense, 1, 2048, Strategy.chain(3)) / verify_step_s(dense, 1, 2048, 0) \
        < 1.01
    assert chain / one > 1.5


def test_a_dense_cost_is_unchanged_and_prefill_reads_the_experts_it_touches():
    dense = replace(MOE, experts=None)
    assert expert_read_s(None, 1000) == 0.0
    assert prefill_s(dense, 1000) == pytest.approx(1000 * 1e-5)
    assert prefill_s(MOE, 1000) == pytest.approx(1000 * 1e-5 + ROUTING.weights_s)
