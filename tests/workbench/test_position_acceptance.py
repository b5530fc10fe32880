"""Acceptance along a response (workbench/calibrate/captures/position_acceptance.py,
AcceptanceModel.*_position): fitted from SD steps placed at their mean position, kept only where the
data support it, and applied by the simulator at a batch's mean position."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from sim.acceptance import cumulative_acceptance
from sim.simulator import simulate
from workbench.calibrate.captures.position_acceptance import fit_position_gain
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import PositionMiss, load_profile
from workbench.contracts.trace import Trace
from workbench.contracts.workload import load_workload

ALPHA, SHAPE, PROMPT = 0.85, 0.7, 20


def sd_trace(miss_at, steps: int = 900, seed: int = 0) -> Trace:
    """EAGLE steps of 8 requests drafting 4 tokens at positions 0..600, each request's drafts
    accepted with alpha = 1 - (1 - ALPHA) * miss_at(position)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(steps):
        pos = rng.uniform(0, 600)
        a = 1 - (1 - ALPHA) * miss_at(pos)
        r = np.array(cumulative_acceptance(a, SHAPE, 4))
        # Each request accepts its first j drafts with P(j >= i) = r_i.
        u = rng.uniform(size=8)
        accepted = [int(np.sum(x < r)) for x in u]
        per_pos = [int(sum(j >= k for j in accepted)) for k in range(1, 5)]
        rows.append(
            dict(
                rl_step=0,
                worker=0,
                engine_step=i,
                start_s=0.01 * i,
                wall_s=0.01,
                batch_size=8,
                num_waiting=0,
                prefill_requests=0,
                prefill_tokens=0,
                decode_requests=8,
                scheduled_tokens=40,
                context_mean=PROMPT + pos,
                context_max=int(PROMPT + pos),
                draft_len=4,
                num_drafts=8,
                num_draft_tokens=32,
                num_accepted_tokens=sum(accepted),
                accepted_per_pos=per_pos,
                new_tokens=8 + sum(accepted),
            )
        )
    reqs = pd.DataFrame(
        [
            dict(
                rl_step=0,
                worker=0,
                request_id="r0",
                prompt_id=0,
                sample=0,
                prompt_tokens=PROMPT,
                response_tokens=600,
                finish_reason="stop",
                start_s=0.0,
                end_s=9.0,
                reward=1.0,
            )
        ]
    )
    meta = {"engine": {"speculative_config": {"method": "eagle"}}, "policy": {"name": "p"}}
    return Trace(meta, pd.DataFrame(rows), reqs, pd.DataFrame([dict(rl_step=0, rollout_s=9.0)]))


def test_a_drafter_that_misses_more_early_and_less_late_is_found():
    fit = fit_position_gain(
        [sd_trace(lambda p: 2.0 if p < 64 else 0.5 if p >= 256 else 1.0)], "eagle", ALPHA, SHAPE
    )
    first, last = fit.rows[0], fit.rows[-1]
    assert first.from_token == 0 and first.miss == pytest.approx(2.0, rel=0.25)
    assert last.from_token >= 181 and last.miss == pytest.approx(0.5, rel=0.35)


def test_a_flat_drafter_gets_no_rows_beyond_its_noise():
    fit = fit_position_gain([sd_trace(lambda p: 1.0, seed=3)], "eagle", ALPHA, SHAPE)
    assert [(r.from_token, r.miss) for r in fit.rows] == [(0, 1.0)]


def test_a_drafter_that_misses_late_slows_the_tail_and_a_flat_row_changes_nothing():
    wl = replace(load_workload("cpu-tiny"), steps=2)
    pol, prof = load_policy("static-sd"), load_profile("cpu-tiny")
    prof = replace(prof, acceptance=replace(prof.acceptance, eagle_position=(), ngram_position=()))
    flat = simulate(wl, pol, prof, seed=4)
    rows = (PositionMiss(0, 1.0),)
    same = simulate(
        wl, pol, replace(prof, acceptance=replace(prof.acceptance, eagle_position=rows)), seed=4
    )
    assert [m.rollout_time_s for m in same.steps] == [m.rollout_time_s for m in flat.steps]
    late = (PositionMiss(0, 1.0), PositionMiss(200, 3.0))
    slow = simulate(
        wl, pol, replace(prof, acceptance=replace(prof.acceptance, eagle_position=late)), seed=4
    )
    assert all(s.rollout_time_s > f.rollout_time_s for s, f in zip(slow.steps, flat.steps))
    assert all(s.mean_accept_len < f.mean_accept_len for s, f in zip(slow.steps, flat.steps))
