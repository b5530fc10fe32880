"""Properties of the RL-step simulator over small random workloads and the three policies."""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.costs import verify_step_s
from sim.lengths import StepLengths
from sim.rollout import shard
from sim.groups import group_lengths
from sim.simulator import simulate
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.workload import load_workload

POLICIES = {name: load_policy(name) for name in ("baseline", "static-sd", "tlt")}
PROFILES = {name: load_profile(name) for name in ("h100-qwen2.5-7b-tp4", "cpu-tiny")}
BASE = load_workload("cpu-tiny")

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw, policies=tuple(POLICIES)):
    wl = replace(
        BASE,
        workers=draw(st.integers(1, 6)),
        prompts_per_step=draw(st.integers(1, 12)),
        group_size=draw(st.integers(1, 6)),
        max_response_tokens=draw(st.integers(64, 4096)),
        max_batch=draw(st.integers(1, 64)),
        steps=draw(st.integers(1, 2)),
        prompt_tokens=draw(st.integers(1, 512)),
    )
    wl.check()
    policy = POLICIES[draw(st.sampled_from(policies))]
    profile = PROFILES[draw(st.sampled_from(sorted(PROFILES)))]
    seed = draw(st.integers(0, 10_000))
    return wl, policy, profile, seed



def step_lengths(workload, seed: int, step: int) -> StepLengths:
    """A synchronous step's responses, prompt-major: the groups the simulator draws, in order."""
    groups = [group_lengths(workload, seed, step, j) for j in range(workload.prompts_per_step)]
    return StepLengths(np.concatenate([g.lengths for g in groups]),
                       np.concatenate([g.correct for g in groups]),
                       np.repeat(np.arange(len(groups)), workload.group_size))

def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


@SETTINGS
@given(cases())
def test_each_workers_intervals_tile_the_simulated_time(case):
    wl, policy, profile, seed = case
    df = simulate(wl, policy, profile, seed).timeline
    assert (df["end_s"] > df["start_s"]).all()
    t_end = df["end_s"].max()
    assert set(df["worker"]) == set(range(wl.workers))
    for w, rows in df.groupby("worker"):
        rows = rows.sort_values("start_s")
        starts, ends = rows["start_s"].to_numpy(), rows["end_s"].to_numpy()
        assert starts[0] == 0.0, f"worker {w} starts at {starts[0]}"
        for i in range(1, len(starts)):
            assert _close(starts[i], ends[i - 1]), \
                f"worker {w}: gap/overlap at {ends[i - 1]} -> {starts[i]}"
        assert _close(ends[-1], t_end), f"worker {w} ends at {ends[-1]}, simulation at {t_end}"


@SETTINGS
@given(cases())
def test_tokens_generated_equal_the_response_lengths(case):
    wl, policy, profile, seed = case
    run = simulate(wl, policy, profile, seed)
    assert [m.rl_step for m in run.steps] == list(range(wl.steps))
    per_step = run.timeline.groupby("rl_step")["tokens"].sum()
    for step in range(wl.steps):
        expected = int(step_lengths(wl, seed, step).lengths.sum())
        assert per_step[step] == pytest.approx(expected, rel=1e-6)
        assert run.steps[step].tokens == pytest.approx(expected, rel=1e-6)
        assert run.steps[step].longest_response == int(step_lengths(wl, seed, step).lengths.max())


def _solo_decode_s(profile, prompt_tokens: int, length: int) -> float:
    """Decoding `length` tokens alone (batch 1, no SD), the context growing from the prompt."""
    c = profile.decode
    per_token = verify_step_s(c, 1, 0.0, 0)
    # sum over i = 0..length-1 of kv * (prompt + i)
    kv_s = c.kv_s_per_token * (length * prompt_tokens + length * (length - 1) / 2)
    return length * per_token + kv_s


def test_solo_decode_closed_form_matches_a_loop():
    prof = PROFILES["h100-qwen2.5-7b-tp4"]
    loop = sum(verify_step_s(prof.decode, 1, 100 + i, 0) for i in range(777))
    assert _solo_decode_s(prof, 100, 777) == pytest.approx(loop, rel=1e-12)


@SETTINGS
@given(cases(policies=("baseline",)))
def test_baseline_rollout_is_at_least_the_longest_responses_decode_time(case):
    wl, policy, profile, seed = case
    run = simulate(wl, policy, profile, seed)
    for m in run.steps:
        longest = int(step_lengths(wl, seed, m.rl_step).lengths.max())
        bound = _solo_decode_s(profile, wl.prompt_tokens, longest)
        assert m.rollout_time_s >= bound * (1 - 1e-9), (m.rollout_time_s, bound)
        assert m.step_time_s >= m.rollout_time_s


@SETTINGS
@given(cases())
def test_same_seed_gives_identical_results(case):
    wl, policy, profile, seed = case
    a = simulate(wl, policy, profile, seed)
    b = simulate(wl, policy, profile, seed)
    pd.testing.assert_frame_equal(a.timeline, b.timeline)
    assert [asdict(m) for m in a.steps] == [asdict(m) for m in b.steps]


def test_different_seed_gives_different_lengths_and_results():
    wl = replace(BASE, steps=2)
    for step in range(2):
        assert not np.array_equal(step_lengths(wl, 0, step).lengths,
                                  step_lengths(wl, 1, step).lengths)
    # Steps differ from each other too (a fresh draw per RL step).
    assert not np.array_equal(step_lengths(wl, 0, 0).lengths, step_lengths(wl, 0, 1).lengths)
    prof = PROFILES["cpu-tiny"]
    for name in POLICIES:
        a = simulate(wl, POLICIES[name], prof, seed=0)
        b = simulate(wl, POLICIES[name], prof, seed=1)
        assert [m.step_time_s for m in a.steps] != [m.step_time_s for m in b.steps]


def test_policies_see_the_same_lengths():
    """Common random numbers: lengths depend on (seed, step) only, not on the policy."""
    wl = replace(BASE, steps=2)
    prof = PROFILES["cpu-tiny"]
    runs = [simulate(wl, p, prof, seed=3) for p in POLICIES.values()]
    for step in range(2):
        assert len({r.steps[step].tokens for r in runs}) == 1
        assert len({r.steps[step].longest_response for r in runs}) == 1


@SETTINGS
@given(cases())
def test_bubble_fraction_is_a_share(case):
    wl, policy, profile, seed = case
    run = simulate(wl, policy, profile, seed)
    for m in run.steps:
        assert 0.0 <= m.bubble_fraction <= 1.0
        assert 0.0 <= m.drafter_train_fraction <= 1.0
        assert m.bubble_fraction + m.drafter_train_fraction <= 1.0 + 1e-9
        assert 0.0 <= m.sd_token_share <= 1.0
        assert m.mean_accept_len >= 1.0
        assert m.rollout_time_s > 0 and m.step_time_s >= m.rollout_time_s


@SETTINGS
@given(cases(policies=("baseline",)))
def test_baseline_with_one_worker_has_no_bubble(case):
    wl, policy, profile, seed = case
    run = simulate(replace(wl, workers=1), policy, profile, seed)
    assert all(m.bubble_fraction == 0.0 for m in run.steps)
    assert set(run.timeline["state"]) <= {"decode", "train", "sync"}


def test_baseline_never_speculates_and_tlt_trains_its_drafter():
    wl = replace(BASE, steps=2)
    prof = PROFILES["cpu-tiny"]
    base = simulate(wl, POLICIES["baseline"], prof, seed=0)
    assert (base.timeline["draft_len"] == 0).all()
    assert all(m.sd_token_share == 0.0 and m.mean_accept_len == 1.0 for m in base.steps)
    # Spot training needs idle time worth whole drafter steps: use the GPU workload, smaller.
    wl = replace(load_workload("fastrl-example-7b-8gpu"), prompts_per_step=16, steps=2)
    tlt = simulate(wl, POLICIES["tlt"], PROFILES["h100-qwen2.5-7b-tp4"], seed=0)
    assert (tlt.timeline["state"] == "drafter_train").any()
    assert tlt.steps[0].drafter_trained_tokens > 0
    assert tlt.steps[1].drafter_quality > tlt.steps[0].drafter_quality


def test_sd_is_off_above_the_threshold():
    wl = replace(load_workload("fastrl-example-7b-8gpu"), prompts_per_step=16, steps=1)
    prof = PROFILES["h100-qwen2.5-7b-tp4"]
    for name in ("static-sd", "tlt"):
        df = simulate(wl, POLICIES[name], prof, seed=0).timeline
        decode = df[df["state"].isin(["decode", "decode_sd"])]
        big = decode[decode["batch"] > POLICIES[name].sd_threshold]
        assert len(big) > 0 and (big["draft_len"] == 0).all() and (big["state"] == "decode").all()
        small = decode[decode["batch"] <= POLICIES[name].sd_threshold]
        assert (small["state"] == "decode_sd").any()


def test_shard_splits_contiguously_and_completely():
    for n in range(0, 40):
        for workers in range(1, 9):
            parts = shard(n, workers)
            assert len(parts) == workers
            assert [i for p in parts for i in p] == list(range(n))
            sizes = [len(p) for p in parts]
            assert max(sizes) - min(sizes) <= 1


def test_more_workers_finish_the_rollout_sooner():
    wl = replace(BASE, steps=1, prompts_per_step=16, group_size=4)
    prof = PROFILES["cpu-tiny"]
    t = [simulate(replace(wl, workers=w), POLICIES["baseline"], prof, seed=0)
         .steps[0].rollout_time_s for w in (1, 2, 4)]
    assert t[0] > t[1] > t[2]


def test_steps_are_reported_as_they_end_and_match_the_run(paper_7b, policies, gpu_profile):
    seen = []
    run = simulate(paper_7b, policies["tlt"], gpu_profile, seed=2, steps=3, on_step=seen.append)
    assert seen == run.steps and [m.rl_step for m in seen] == [0, 1, 2]


# ------------------------------------------------------------------------ FastRL's adaptive rules


def _paper_run(sd_warmup_steps: int, steps: int = 1, interval: int = 10):
    wl = replace(load_workload("tlt-eval-qwen2.5-7b"), workers=2, prompts_per_step=16, steps=steps)
    pol = load_policy("tlt")
    pol = replace(pol, sd_warmup_steps=sd_warmup_steps,
                  spot_training=replace(pol.spot_training, interval_steps=interval))
    return simulate(wl, pol, load_profile(wl.profile), seed=3, steps=steps), pol


def test_each_bucket_runs_its_strategy():
    run, pol = _paper_run(0)
    sd = run.timeline[run.timeline["state"] == "decode_sd"]
    assert len(sd) > 0
    for batch, strategy in zip(sd["batch"], sd["strategy"]):
        assert strategy == pol.strategy_of(pol.bucket_of(int(batch))).name
    above = run.timeline["batch"] > pol.sd_threshold
    assert (run.timeline.loc[above, "state"] != "decode_sd").all()


def test_sd_waits_for_the_warm_up_steps_after_a_batch_above_the_threshold():
    passes_before_sd = {}
    for warmup in (0, 10):
        run, pol = _paper_run(warmup)
        tl = run.timeline
        for w, rows in tl[tl["state"].isin(["decode", "decode_sd"])].groupby("worker"):
            rows = rows.sort_values("start_s")
            below = rows[rows["batch"] <= pol.sd_threshold]
            first_sd = below.index[below["state"] == "decode_sd"][0]
            plain = below.loc[:first_sd]
            plain = plain[plain["state"] == "decode"]
            passes_before_sd[(warmup, w)] = float((plain["passes"] / plain["batch"]).sum())
    for w in (0, 1):
        assert passes_before_sd[(0, w)] == 0.0  # SD at once
        assert passes_before_sd[(10, w)] == pytest.approx(10.0)  # ten decode steps without it first


def test_spot_training_runs_every_interval_steps_only():
    run, _ = _paper_run(10, steps=5, interval=2)
    trained = [m.rl_step for m in run.steps if m.drafter_trained_tokens > 0]
    assert trained and set(trained) <= {0, 2, 4}
    states = run.timeline.groupby("rl_step")["state"].apply(
        lambda s: "drafter_train" in set(s.astype(str)))
    assert not states.loc[[1, 3]].any()


def test_a_warm_started_drafter_starts_at_the_profiles_warm_quality():
    run, _ = _paper_run(10, steps=2)
    prof = load_profile("h100-qwen2.5-7b-tp4")
    assert run.steps[0].drafter_quality == pytest.approx(prof.acceptance.warm_start_quality)
    assert run.steps[1].drafter_quality > run.steps[0].drafter_quality  # spot-trained in step 0


def test_the_climb_bandit_starts_each_bucket_at_its_start_table_and_moves_from_there():
    """`climb` (tlt-vllm's bandit) in the simulator: each bucket's first SD segment runs the start
    table's draft length, later ones what the climb chose from the rewards."""
    wl = replace(BASE, workers=1, prompts_per_step=8, group_size=4, steps=1)
    pol = replace(load_policy("tlt-vllm"), sd_warmup_steps=0)
    assert pol.bandit.algorithm == "climb"
    start = (1, 1, 1, 1, 1, 0)
    run = simulate(wl, pol, PROFILES["cpu-tiny"], seed=0, start=start)
    decoding = run.timeline["state"].isin(["decode", "decode_sd"])
    tl = run.timeline[decoding & (run.timeline["batch"] <= pol.sd_threshold)]
    buckets = [pol.bucket_of(int(b)) for b in tl["batch"]]
    first = {}
    for b, k in zip(buckets, tl["draft_len"]):
        first.setdefault(b, int(k))
    assert first and all(k == start[b] for b, k in first.items())
    assert set(tl["draft_len"]) - {0, 1}  # the climb tried longer chains
    default = simulate(wl, pol, PROFILES["cpu-tiny"], seed=0).timeline
    assert not default["draft_len"].equals(run.timeline["draft_len"])
