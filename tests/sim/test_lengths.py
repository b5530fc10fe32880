"""The response-length model reproduces the statistics it is parameterised by."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.lengths import sample_latent_log_lengths, sample_step
from workbench.contracts.workload import LengthModel, load_workload


def observed_group_correlation(m: LengthModel) -> float:
    """Intra-class correlation of log-lengths (uncensored) within a prompt's group.

    Between groups: the prompt effect and the prompt's accuracy (through the
    wrong-answer factor); within: sample noise and each answer's correctness.
    """
    sd_prompt = m.sigma * math.sqrt(m.group_correlation)
    sd_sample = m.sigma * math.sqrt(1.0 - m.group_correlation)
    c = m.accuracy_concentration
    a, b = m.mean_accuracy * c, (1.0 - m.mean_accuracy) * c
    w = math.log(m.wrong_factor)
    var_acc = a * b / ((a + b) ** 2 * (a + b + 1))
    mean_bern_var = m.mean_accuracy * (1 - m.mean_accuracy) - var_acc  # E[p(1-p)]
    between = sd_prompt**2 + w**2 * var_acc
    within = sd_sample**2 + w**2 * mean_bern_var
    return between / (between + within)


def icc(logs: np.ndarray, prompts: int, group: int) -> float:
    """One-way ANOVA intra-class correlation of a prompt-major (prompts x group) sample."""
    x = logs.reshape(prompts, group)
    means = x.mean(axis=1)
    msb = group * means.var(ddof=1)
    msw = ((x - means[:, None]) ** 2).sum() / (prompts * (group - 1))
    return (msb - msw) / (msb + (group - 1) * msw)


MODELS = [
    ("fastrl-example-7b-8gpu", None),
    ("cpu-tiny", None),
    ("fastrl-example-7b-8gpu", dict(clip_ratio=0.15, sigma=0.5, wrong_factor=1.0)),
    ("cpu-tiny", dict(clip_ratio=0.01, sigma=1.4, mean_accuracy=0.8, accuracy_concentration=0.5)),
]


def _model(name, changes):
    wl = load_workload(name)
    m = replace(wl.lengths, **changes) if changes else wl.lengths
    return m, wl.max_response_tokens


@pytest.mark.parametrize("name,changes", MODELS)
def test_clip_ratio_at_step_0_matches_the_model(name, changes):
    m, cap = _model(name, changes)
    # 80k responses: the clip share's sampling sd is ~0.001 (clustering included).
    sl = sample_step(m, cap, 10_000, 8, 0, np.random.default_rng(1234))
    assert sl.clip_ratio(cap) == pytest.approx(m.clip_ratio, abs=0.005)
    assert float(np.mean(sl.lengths == cap)) == pytest.approx(m.clip_ratio, abs=0.005)


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.5, 0.8])
def test_group_correlation_matches_observed_icc(rho):
    m, cap = _model("fastrl-example-7b-8gpu", None)
    m = replace(m, group_correlation=rho)
    logs, _ = sample_latent_log_lengths(m, cap, 5_000, 8, 0, np.random.default_rng(7))
    assert icc(logs, 5_000, 8) == pytest.approx(observed_group_correlation(m), abs=0.015)


def test_zero_group_correlation_gives_a_clearly_lower_icc():
    m, cap = _model("fastrl-example-7b-8gpu", None)
    low = icc(sample_latent_log_lengths(replace(m, group_correlation=0.0), cap, 5_000, 8, 0,
                                        np.random.default_rng(3))[0], 5_000, 8)
    high = icc(sample_latent_log_lengths(replace(m, group_correlation=0.8), cap, 5_000, 8, 0,
                                         np.random.default_rng(3))[0], 5_000, 8)
    assert low < 0.1
    assert high > 0.7
    assert high - low > 0.5


def test_positive_drift_makes_later_steps_longer():
    m, cap = _model("fastrl-example-7b-8gpu", None)
    m = replace(m, drift_per_step=0.05)
    early = sample_step(m, cap, 4_000, 8, 0, np.random.default_rng(5))
    late = sample_step(m, cap, 4_000, 8, 10, np.random.default_rng(5))
    # 10 steps x 0.05 in log space: medians ~exp(0.5) = 1.65x apart.
    assert np.median(late.lengths) > 1.4 * np.median(early.lengths)
    assert late.clip_ratio(cap) > early.clip_ratio(cap) + 0.03
    # Without drift the step index changes nothing.
    flat = replace(m, drift_per_step=0.0)
    a = sample_step(flat, cap, 500, 4, 0, np.random.default_rng(9))
    b = sample_step(flat, cap, 500, 4, 10, np.random.default_rng(9))
    np.testing.assert_array_equal(a.lengths, b.lengths)


def test_negative_drift_makes_later_steps_shorter():
    m, cap = _model("cpu-tiny", None)
    m = replace(m, drift_per_step=-0.05)
    early = sample_step(m, cap, 4_000, 8, 0, np.random.default_rng(5))
    late = sample_step(m, cap, 4_000, 8, 10, np.random.default_rng(5))
    assert np.median(late.lengths) < np.median(early.lengths) / 1.4


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(
    clip_ratio=st.floats(0.001, 0.45),
    sigma=st.floats(0.05, 3.0),
    rho=st.floats(0.0, 0.95),
    accuracy=st.floats(0.05, 0.95),
    wrong=st.floats(1.0, 4.0),
    drift=st.floats(-0.5, 0.5),
    cap=st.integers(16, 65_536),
    prompts=st.integers(1, 40),
    group=st.integers(1, 8),
    step=st.integers(0, 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_lengths_are_ints_within_one_and_the_cap(clip_ratio, sigma, rho, accuracy, wrong, drift,
                                                 cap, prompts, group, step, seed):
    m = LengthModel(clip_ratio=clip_ratio, sigma=sigma, group_correlation=rho,
                    mean_accuracy=accuracy, wrong_factor=wrong, drift_per_step=drift)
    m.check()
    sl = sample_step(m, cap, prompts, group, step, np.random.default_rng(seed))
    assert sl.lengths.shape == (prompts * group,)
    assert np.issubdtype(sl.lengths.dtype, np.integer)
    assert sl.lengths.min() >= 1
    assert sl.lengths.max() <= cap
    assert sl.correct.dtype == bool and sl.correct.shape == sl.lengths.shape
    # Prompt-major: a prompt's group is contiguous.
    np.testing.assert_array_equal(sl.prompt, np.repeat(np.arange(prompts), group))


def test_wrong_answers_run_longer():
    m, cap = _model("fastrl-example-7b-8gpu", None)
    logs, correct = sample_latent_log_lengths(m, cap, 4_000, 8, 0, np.random.default_rng(11))
    gap = logs[~correct].mean() - logs[correct].mean()
    assert gap == pytest.approx(np.log(m.wrong_factor), abs=0.05)
