"""Replayed and empirical lengths, and DAPO's dynamic sampling, in the simulator."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from sim.lengths import LengthModel, for_cap
from sim.entities import Group, Seq
from sim.rollout import shard_seqs
from sim.groups import group_lengths
from sim.simulator import simulate
from workbench.contracts.length_data import (
    COLUMNS,
    from_frame,
    read_observed,
    write_observed,
)
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.workload import DynamicSampling, load_workload

BASE = load_workload("cpu-tiny")
PROFILE = load_profile("cpu-tiny")
BASELINE = load_policy("baseline")


def observed_table(path, batches=4, groups=6, size=4, seed=7):
    """Long-tailed lengths, two ranks (numbered 0 and 4, as PolyTrace numbers them), own prompt
    lengths, every other group mixed-reward."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in range(batches):
        for g in range(groups):
            rank, prompt = (0 if g < groups // 2 else 4), int(rng.integers(10, 90))
            for x in np.minimum(np.ceil(rng.lognormal(4.0, 1.0, size)), 1024).astype(int):
                rows.append((b, g, rank, prompt, int(x), -1, int(g % 2 == 0)))
    obs = from_frame(pd.DataFrame(rows, columns=list(COLUMNS)))
    write_observed(path, obs)
    return obs


@pytest.fixture
def replay(tmp_path):
    obs = observed_table(tmp_path / "obs.parquet")
    wl = replace(BASE, workers=2, prompts_per_step=6, group_size=4, max_response_tokens=1024,
                 steps=3, lengths=LengthModel(kind="replay", data=str(tmp_path / "obs.parquet")))
    wl.check()
    return wl, obs


def test_seed_zero_replays_each_observed_step_exactly(replay):
    wl, obs = replay
    for b in range(obs.batches):
        drawn = np.concatenate([group_lengths(wl, 0, b, j).lengths for j in range(6)])
        # The same lengths, order and so every quantile.
        assert np.array_equal(drawn, obs.length[obs.batch == b])
    run = simulate(wl, BASELINE, PROFILE, seed=0)
    for m in run.steps:
        x = obs.length[obs.batch == m.rl_step]
        assert m.longest_response == x.max()
        assert m.clip_ratio == pytest.approx(np.mean(x >= 1024), abs=1e-12)
        assert m.tokens == pytest.approx(x.sum(), rel=1e-6)


def test_other_seeds_and_steps_resample_whole_groups_of_the_same_batch(replay):
    wl, obs = replay
    by_batch = {b: [obs.group_at(i) for i in ids] for b, ids in enumerate(obs.batch_groups)}
    for seed, step in ((1, 0), (2, 1), (0, 4)):
        for j in range(8):  # past the observed groups too
            d = group_lengths(wl, seed, step, j)
            source = by_batch[step % obs.batches]
            assert any(np.array_equal(d.lengths, g.lengths) and d.prompt_tokens == g.prompt_tokens
                       for g in source)
            slot = source[j % len(source)]
            assert d.rank == (0 if slot.rank == 0 else 1)  # the slot's rank: per-rank sizes kept


def test_empirical_draws_observed_groups_from_any_batch(replay, tmp_path):
    wl, obs = replay
    wl = replace(wl, lengths=replace(wl.lengths, kind="empirical"))
    groups = [obs.group_at(i).lengths for i in range(obs.groups)]
    draws = [group_lengths(wl, 3, 0, j).lengths for j in range(40)]
    assert all(any(np.array_equal(d, g) for g in groups) for d in draws)
    assert group_lengths(wl, 0, 0, 0).rank is None  # pooled: no step, so no rank split to keep


def test_ranks_in_the_file_decide_which_engine_decodes_a_group(replay):
    wl, obs = replay
    run = simulate(wl, BASELINE, PROFILE, seed=0, steps=1)
    decoding = run.timeline["state"].isin(["decode", "decode_sd"])
    dec = run.timeline[(run.timeline["rl_step"] == 0) & decoding]
    tokens = dec.groupby("worker")["tokens"].sum()
    x = obs.frame()
    for w, rank in enumerate((0, 4)):
        expected = x[(x["batch"] == 0) & (x["rank"] == rank)]["length"].sum()
        assert tokens[w] == pytest.approx(expected, rel=1e-6)


def test_without_ranks_or_with_other_worker_counts_shards_are_contiguous():
    groups = [Group((0, i), np.array([5, 5]), np.zeros(2), rank=i % 2) for i in range(4)]
    seqs = [Seq(g, m) for g in range(4) for m in range(2)]
    assert shard_seqs(seqs, groups, 2) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert shard_seqs(seqs, groups, 4) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_each_group_brings_its_own_prompt_length(replay, tmp_path):
    wl, obs = replay
    flat = obs.frame().assign(prompt_tokens=-1)  # the same table without prompt lengths
    write_observed(tmp_path / "flat.parquet", from_frame(flat))
    wl = replace(wl, prompt_tokens=1)
    own = simulate(wl, BASELINE, PROFILE, seed=0, steps=1).steps[0]
    flat_wl = replace(wl, lengths=replace(wl.lengths, data=str(tmp_path / "flat.parquet")))
    without = simulate(flat_wl, BASELINE, PROFILE, seed=0, steps=1).steps[0]
    assert group_lengths(wl, 0, 0, 0).prompt_tokens == obs.group_at(0).prompt_tokens
    # 10-90 prompt tokens a response, not the workload's 1.
    assert own.train_time_s > without.train_time_s


def test_filtering_keeps_only_mixed_groups_and_the_rollout_pays_for_all(replay):
    wl, obs = replay
    wl = replace(wl, prompts_per_step=4, dynamic_sampling=DynamicSampling(True, 1.5))
    run = simulate(wl, BASELINE, PROFILE, seed=0, steps=2)
    records = run.filtering
    assert records and all(r.prompt_count == 6 for r in records)
    generated = 0
    for r in records:
        groups = [obs.group_at(i) for i in obs.batch_groups[r.workload_step]]
        assert r.kept_prompt_indices == [i for i, g in enumerate(groups) if g.mixed == 1]
        assert all(groups[i].mixed == 1 for i in r.used_prompt_indices)
        generated += sum(int(g.lengths.sum()) for g in groups)
    per_step = [sum(len(r.used_prompt_indices) for r in records if r.trainer_step == s + 1)
                for s in range(2)]
    assert per_step == [4, 4]  # 3 mixed groups a batch: two rounds fill each update
    assert [m.groups_trained for m in run.steps] == [4, 4]
    assert [m.groups_generated for m in run.steps] == [12, 12]
    assert sum(m.tokens for m in run.steps) == pytest.approx(generated, rel=1e-6)


def test_filtering_on_the_lognormal_model_keeps_mixed_correctness(tmp_path):
    wl = replace(BASE, prompts_per_step=4,
                 dynamic_sampling=DynamicSampling(True, 2.0, max_rounds=20),
                 lengths=LengthModel(clip_ratio=0.05, sigma=0.8, mean_accuracy=0.5,
                                     accuracy_concentration=0.5))
    run = simulate(wl, BASELINE, PROFILE, seed=3, steps=2)
    for r in run.filtering:
        for i in range(r.prompt_count):
            d = group_lengths(wl, 3, r.trainer_step - 1, i, batch=r.workload_step)
            mixed = bool(d.correct.any() and not d.correct.all())
            assert (i in r.kept_prompt_indices) == mixed
    assert all(m.groups_trained == 4 for m in run.steps)
    run.save(tmp_path / "out")
    written = (tmp_path / "out" / "dapo_filter_indices.jsonl").read_text()
    assert written.count("\n") == len(run.filtering)


def test_partial_rollouts_with_filtering_train_on_mixed_groups_only(replay):
    wl, _ = replay
    wl = replace(wl, prompts_per_step=2, dynamic_sampling=DynamicSampling(True, 2.0))
    run = simulate(wl, load_policy("april"), PROFILE, seed=0, steps=2)
    assert run.filtering and all(m.groups_trained <= 2 for m in run.steps)
    with pytest.raises(ConfigError, match="streaming"):
        simulate(wl, load_policy("verl-fully-async"), PROFILE, seed=0, steps=1)


def test_the_shipped_dapo_workload_replays_what_dapo_kept():
    wl = load_workload("polytrace-dapo-qwen2.5-32b")
    run = simulate(wl, BASELINE, load_profile(wl.profile), seed=0, steps=2)
    first = run.filtering[:2]
    assert [len(r.kept_prompt_indices) for r in first] == [27, 33]  # as dapo_filter_indices.jsonl
    assert first[1].used_prompt_indices == [1, 2, 7, 8, 10]
    obs = read_observed(wl.lengths.data)
    assert run.steps[0].groups_generated == 192 and run.steps[0].groups_trained == 32
    # Both batches paid for.
    assert run.steps[0].tokens == pytest.approx(obs.length[obs.batch <= 1].sum(), rel=1e-6)


def test_for_cap_scales_a_median_anchored_model():
    m = LengthModel(clip_ratio=0.0, median_tokens=400.0)
    assert for_cap(m, 20480, 32768).median_tokens == pytest.approx(640.0)
    anchored = LengthModel(clip_ratio=0.05)
    assert for_cap(anchored, 1024, 4096) == anchored
