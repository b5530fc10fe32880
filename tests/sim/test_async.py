"""Asynchronous RL in the simulator: bounded staleness, the trainer's own lane, overlap that pays,
and streaming (fully async) rollouts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.simulator import rollout_engines, simulate
from workbench.contracts.policy import load_policy
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError, FieldError
from workbench.contracts.workload import load_workload

STEPS = 6


@pytest.fixture(scope="module")
def workload():
    # 8 engines: 2 train, 6 roll out; small enough to run in a second.
    return replace(load_workload("tlt-eval-qwen2.5-7b"), workers=8, prompts_per_step=32,
                   steps=STEPS)


def _rollout(policy, **changes):
    return replace(policy, rollout=replace(policy.rollout, **changes))


def _policies():
    async1 = load_policy("async-1")
    return {
        "baseline": load_policy("baseline"),
        "async-1": async1,
        # Per-rollout async at k = 4 with weights pushed into running rollouts (AReaL without
        # streaming).
        "rollouts-4": replace(_rollout(async1, max_staleness=4, interrupt=True), name="rollouts-4"),
        "async-4": load_policy("async-4"),  # streaming
        # Streaming without interruption: stale engines drain, then all sync together.
        "stream-drain": replace(_rollout(load_policy("async-4"), interrupt=False),
                                name="stream-drain"),
        "stream-0": replace(_rollout(load_policy("async-4"), max_staleness=0), name="stream-0"),
    }


@pytest.fixture(scope="module")
def runs(workload):
    profile = load_profile(workload.profile)
    return {name: simulate(workload, policy, profile, seed=4)
            for name, policy in _policies().items()}


def _lanes(run):
    tl = run.timeline.sort_values(["worker", "start_s"])
    return {int(w): list(zip(g["start_s"], g["end_s"], g["state"].astype(str), g["rl_step"]))
            for w, g in tl.groupby("worker")}


@pytest.mark.parametrize("name,k", [("async-1", 1), ("rollouts-4", 4)])
def test_no_sample_is_older_than_the_staleness_bound(runs, name, k):
    lags = [m.max_policy_lag for m in runs[name].steps]
    assert all(0 <= lag <= k for lag in lags), lags
    assert lags[0] == 0 and max(lags) >= 1  # off-policy once the pipeline runs
    assert all(m.policy_lag <= m.max_policy_lag for m in runs[name].steps)
    assert all(m.max_policy_lag == 0 for m in runs["baseline"].steps)  # synchronous: on-policy


@pytest.mark.parametrize("name", ["baseline", "async-1", "rollouts-4", "async-4", "stream-drain"])
def test_no_worker_is_in_two_states_at_once(runs, name):
    for worker, rows in _lanes(runs[name]).items():
        for (s0, e0, *_), (s1, e1, *_) in zip(rows, rows[1:]):
            assert s1 >= e0 - 1e-9, (name, worker, (s0, e0), (s1, e1))


def test_the_trainer_has_its_own_lane_and_trains_each_step_after_its_rollout(runs, workload):
    run = runs["async-1"]
    engines = rollout_engines(workload, load_policy("async-1"))
    assert engines == 6
    tl = run.timeline
    train = tl[tl["state"] == "train"]
    assert set(train["worker"]) == {engines} and sorted(train["rl_step"]) == list(range(STEPS))
    for step, t in train.groupby("rl_step"):
        decoding = tl["state"].isin(["decode", "decode_sd"])
        pool = tl[(tl["rl_step"] == step) & (tl["worker"] < engines) & decoding]
        assert pool["end_s"].max() <= t["start_s"].min() + 1e-9
    # The rollout of step j waits for the weights of version j - 1 (the update of step j - 2).
    ends = train.set_index("rl_step")["end_s"]
    for step in range(2, STEPS):
        decode = tl[(tl["rl_step"] == step) & tl["state"].isin(["decode", "decode_sd"])]
        assert decode["start_s"].min() >= ends[step - 2] - 1e-9
    # Its step time is the pace of updates.
    step_times = [m.step_time_s for m in run.steps]
    assert step_times == pytest.approx([ends[0]] + [ends[j] - ends[j - 1] for j in range(1, STEPS)])


@pytest.mark.parametrize("name", ["rollouts-4", "async-4"])
def test_interruptible_rollouts_take_new_weights_mid_rollout(runs, name):
    """With `interrupt` an engine syncs between two decode segments (sequences in flight); without
    it, only after draining (an idle wait before the sync)."""
    def syncs_between_decodes(run):
        n = 0
        for rows in _lanes(run).values():
            for before, row, after in zip(rows, rows[1:], rows[2:]):
                between = before[2].startswith("decode") and after[2].startswith("decode")
                n += row[2] == "sync" and between
        return n

    assert syncs_between_decodes(runs[name]) > 0
    assert syncs_between_decodes(runs["stream-drain"]) == 0


def test_overlap_pays_when_training_is_heavy_and_the_split_balances_it(workload):
    """A third of the synchronous step is training: overlapping it with the next rollout pays when
    half the engines train, and loses when a quarter must (training there outlasts the rollout)."""
    profile = load_profile(workload.profile)
    # Heavy training, whatever the profile's source: 1.85 ms per token (8x the paper-fitted 7B
    # profile's).
    heavy = replace(profile, phases=replace(profile.phases, train_gpu_s_per_token=1.85e-3))
    sync = simulate(workload, load_policy("baseline"), heavy, seed=4)
    assert sync.mean("train_time_s") / sync.mean("step_time_s") > 0.3
    async1 = load_policy("async-1")
    half = replace(async1, rollout=replace(async1.rollout, train_share=0.5))
    assert simulate(workload, half, heavy, seed=4).mean("step_time_s") < sync.mean("step_time_s")
    assert simulate(workload, async1, heavy, seed=4).mean("step_time_s") > sync.mean("step_time_s")


def test_async_needs_an_engine_to_train_and_one_to_roll_out(workload):
    with pytest.raises(ConfigError) as exc:
        simulate(replace(workload, workers=1), load_policy("async-1"),
                 load_profile(workload.profile), steps=1)
    assert "workers" in str(exc.value) and "async" in str(exc.value)


def test_streaming_trains_a_full_step_of_groups_per_update(runs, workload):
    for name in ("async-4", "stream-drain", "stream-0"):
        assert len(runs[name].steps) == STEPS
        assert [m.groups_trained for m in runs[name].steps] == [workload.prompts_per_step] * STEPS


def test_streaming_at_staleness_0_is_on_policy_and_at_4_is_not(runs):
    assert all(m.max_policy_lag == 0 for m in runs["stream-0"].steps)
    assert max(m.max_policy_lag for m in runs["async-4"].steps) >= 1


def test_streaming_fills_the_tail_that_per_rollout_async_leaves_idle(runs):
    """The same staleness and interruption, with and without streaming: streaming engines take new
    prompts as slots free, so they idle less and finish more steps in the same time."""
    stream, rollouts = runs["async-4"], runs["rollouts-4"]
    assert stream.mean("bubble_fraction") < rollouts.mean("bubble_fraction")
    assert stream.mean("step_time_s") < rollouts.mean("step_time_s")


def test_streaming_without_interruption_syncs_every_engine_together(runs, workload):
    tl = runs["stream-drain"].timeline
    engines = rollout_engines(workload, load_policy("async-4"))
    syncs = tl[(tl["state"] == "sync") & (tl["worker"] < engines)]
    assert len(syncs) > 0
    for start, group in syncs.groupby("start_s"):
        assert sorted(group["worker"]) == list(range(engines)), start


def test_streaming_is_reproducible(workload):
    profile = load_profile(workload.profile)
    a = simulate(workload, load_policy("async-4"), profile, seed=9, steps=3)
    b = simulate(workload, load_policy("async-4"), profile, seed=9, steps=3)
    assert a.timeline.equals(b.timeline)
    assert [m.step_time_s for m in a.steps] == [m.step_time_s for m in b.steps]


@pytest.mark.parametrize("changes,field", [
    ({"stream": True}, "stream"),  # mode sync
    ({"mode": "async", "max_staleness": 0.5}, "max_staleness"),  # a fraction without stream
    ({"mode": "async", "minibatches": 4}, "minibatches"),  # minibatches without stream
])
def test_rollout_settings_that_contradict_each_other_are_refused(changes, field):
    with pytest.raises(FieldError) as exc:
        replace(load_policy("baseline").rollout, **changes).check()
    assert exc.value.field == field


def test_streaming_refuses_spot_training():
    tlt = load_policy("tlt")
    with pytest.raises(FieldError) as exc:
        replace(tlt, rollout=replace(load_policy("async-4").rollout)).check()
    assert exc.value.field == "spot_training.enabled"
