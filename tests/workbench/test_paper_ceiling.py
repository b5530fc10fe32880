"""Table A's TLT rows at the paper's own SD speedups: the ceiling its batch sizes allow."""

import pytest

from workbench.calibrate.published.microbenchmarks import load_published
from workbench.paper.ceiling import best_table_c, ceiling


def test_the_ceiling_prices_each_bucket_at_table_cs_best_and_nothing_above_32():
    pub = load_published()
    assert best_table_c(pub, 1) == pytest.approx(3.62)  # TV 64
    assert best_table_c(pub, 5) == best_table_c(pub, 4) == pytest.approx(3.13)  # TV 48 at 4
    assert best_table_c(pub, 33) == 1.0
    # All decoding at batch 1: the rollout runs at Table C's batch-1 speedup.
    one = ceiling("m", 2.0, 0.8, {"1": 1.0, ">64": 0.0}, pub)
    assert one.rollout_ceiling == pytest.approx(3.62)
    assert one.step_ceiling == pytest.approx(1 / (0.2 + 0.8 / 3.62)) and one.reachable
    # Half above batch 64: SD cannot touch it, the ceiling falls below a 2x step.
    half = ceiling("m", 2.0, 0.8, {"1": 0.5, ">64": 0.5}, pub)
    assert half.rollout_ceiling == pytest.approx(1 / (0.5 / 3.62 + 0.5))
    assert not half.reachable
    # The rollout speedup a published figure needs at a given rollout share.
    assert one.needed_rollout == pytest.approx(0.8 / (1 / 2.0 - 0.2))
    assert ceiling("m", 6.0, 0.8, {"1": 1.0}, pub).needed_rollout == float("inf")
    # The most decoding above batch 32 that still allows the figure, the rest at batch 1's best.
    off = one.max_off_share
    assert 0.0 < off < 1.0
    at = ceiling("m", 2.0, 0.8, {"1": 1.0 - off, ">64": off}, pub)
    assert at.step_ceiling == pytest.approx(2.0, rel=1e-6)
