"""Agentic rollouts in the simulator: a trajectory leaves the running batch for its tool call and
rejoins it, tools may queue for their own slots, an engine with every trajectory out waits (or
spot-trains), and the policies run unchanged on the generation segments."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.simulator import simulate
from sim.trajectories import model_group
from workbench.contracts.agentic import AgenticModel
from workbench.contracts.policy import load_policy
from workbench.contracts.schema import ConfigError, to_mapping
from workbench.contracts.workload import load_workload

BASELINE = load_policy("baseline")


def test_a_trajectory_leaves_the_batch_for_its_tool_and_rejoins_it(agentic_workload,
                                                                   simple_profile):
    # x: two turns around a 1 s tool call; y: one long turn that decodes throughout
    wl = agentic_workload([[(50, [(10, 20, 1.0), (10, 0, 0.0)])], [(50, [(400, 0, 0.0)])]])
    run = simulate(wl, BASELINE, simple_profile(step_s=0.01, prefill_s=0.0), seed=0)
    t = run.turns.set_index(["group", "turn"])
    left, back = t.loc[(0, 0), "end_s"], t.loc[(0, 1), "arrive_s"]
    assert back - left == pytest.approx(1.0)  # out of the engine for exactly the tool's latency
    assert t.loc[(0, 1), "admit_s"] == pytest.approx(back)  # admitted at once: the segment is cut
    dec = run.timeline[run.timeline["state"].astype(str) == "decode"].sort_values("start_s")
    during = dec[(dec["start_s"] >= left - 1e-9) & (dec["end_s"] <= back + 1e-9)]
    assert set(during["batch"]) == {1}  # y alone while x is on its tool
    assert dec.iloc[0]["batch"] == 2 and 2 in set(dec[dec["start_s"] >= back - 1e-9]["batch"])
    # x's second turn took 10 steps at batch 2, not a second's worth of y's steps
    assert t.loc[(0, 1), "end_s"] - back == pytest.approx(10 * 2 * 0.01)


def test_an_engine_with_every_trajectory_out_waits_on_tools(agentic_workload, simple_profile):
    wl = agentic_workload([[(50, [(10, 20, 2.5), (10, 0, 0.0)])]])
    run = simulate(wl, BASELINE, simple_profile(), seed=0)
    waits = run.timeline[run.timeline["state"].astype(str) == "tool_wait"]
    assert len(waits) == 1
    assert float(waits["end_s"].iloc[0] - waits["start_s"].iloc[0]) == pytest.approx(2.5)


def test_tools_queue_for_their_slots(agentic_workload, simple_profile):
    group = [(50, [(10, 20, 1.0), (10, 0, 0.0)])] * 3  # three calls start together
    arrivals = {}
    for slots in (0, 1):
        run = simulate(agentic_workload([group], tool_slots=slots), BASELINE, simple_profile(),
                       seed=0)
        t = run.turns
        end0 = t[t["turn"] == 0]["end_s"].max()
        arrivals[slots] = sorted((t[t["turn"] == 1]["arrive_s"] - end0).round(9).tolist())
    assert arrivals[0] == pytest.approx([1.0, 1.0, 1.0])
    assert arrivals[1] == pytest.approx([1.0, 2.0, 3.0])


def test_slower_tools_lengthen_the_rollout_by_the_critical_path(agentic_workload,
                                                                simple_profile):
    wl = agentic_workload([[(50, [(10, 20, 1.0), (10, 20, 1.0), (10, 0, 0.0)])]])
    prof = simple_profile()
    times = [simulate(replace(wl, agentic=replace(wl.agentic, tool_latency_scale=s)), BASELINE,
                      prof, seed=0).steps[0].rollout_time_s for s in (1.0, 3.0)]
    assert times[1] - times[0] == pytest.approx(2 * 2.0)  # two calls, 2 s longer each


def test_the_idle_engine_spot_trains_while_its_trajectories_wait_on_tools(agentic_workload,
                                                                          simple_profile):
    wl = agentic_workload([[(50, [(10, 20, 30.0), (10, 0, 0.0)])]])
    tlt = load_policy("tlt")
    run = simulate(wl, tlt, simple_profile(), seed=0)
    states = set(run.timeline["state"].astype(str))
    assert "drafter_train" in states and "tool_wait" not in states
    assert run.steps[0].drafter_trained_tokens > 0
    off = simulate(wl, replace(tlt, spot_training=replace(tlt.spot_training, enabled=False)),
                   simple_profile(), seed=0)
    assert "tool_wait" in set(off.timeline["state"].astype(str))


@pytest.mark.parametrize("policy", ["static-sd", "tlt", "april", "async-1", "rollpacker",
                                    "async-4", "verl-fully-async"])
def test_every_rollout_mode_runs_on_a_drawn_agentic_workload(policy):
    wl = replace(load_workload("fastrl-example-7b-8gpu"), workers=2, prompts_per_step=8,
                 group_size=4, steps=2, agentic=AgenticModel(enabled=True))
    run = simulate(wl, load_policy(policy), load_workload_profile(wl), seed=0)
    assert len(run.steps) == 2
    assert run.turns is not None and (run.turns["end_s"] >= run.turns["arrive_s"]).all()
    if policy in ("static-sd", "tlt"):
        assert run.mean("sd_token_share") > 0  # SD ran on the generation segments


def load_workload_profile(wl):
    from workbench.contracts.profile import load_profile

    return load_profile(wl.profile)


def test_a_streaming_engine_takes_a_trajectory_back_after_its_tool(agentic_workload,
                                                                     simple_profile):
    """Fully asynchronous RL: the trajectory's second turn comes back to its engine after the
    tool's latency, the engine waits on the tool meanwhile, and the group reaches the trainer."""
    wl = agentic_workload([[(50, [(10, 20, 2.0), (10, 0, 0.0)])]], workers=2)
    run = simulate(replace(wl, steps=1), load_policy("async-4"), simple_profile(), seed=0)
    t = run.turns[run.turns["batch"] == 0].sort_values("turn")
    assert t["turn"].tolist() == [0, 1]
    assert float(t["arrive_s"].iloc[1] - t["end_s"].iloc[0]) == pytest.approx(2.0)
    assert t["cached_tokens"].iloc[1] == 60  # the prompt and the first turn, cached
    assert "tool_wait" in set(run.timeline["state"].astype(str))
    assert run.steps[0].groups_trained == 1


def test_dynamic_sampling_is_refused_for_an_agentic_workload_naming_the_field():
    wl = load_workload("polytrace-dapo-qwen2.5-32b")
    wl = replace(wl, agentic=AgenticModel(enabled=True))
    with pytest.raises(ConfigError, match="dynamic_sampling.enabled"):
        simulate(wl, BASELINE, load_workload_profile(wl), seed=0)


def test_a_single_turn_workload_file_has_no_agentic_section():
    wl = load_workload("cpu-tiny")
    assert "agentic" not in to_mapping(wl)
    assert "agentic" in to_mapping(replace(wl, agentic=AgenticModel(enabled=True)))


def test_the_model_draws_the_same_trajectories_for_a_seed_and_respects_the_cap():
    m = AgenticModel(enabled=True, turn_median_tokens=(400.0, 800.0, 800.0, 800.0, 800.0))
    a = model_group(m, 8, 1000, np.random.default_rng(3))
    b = model_group(m, 8, 1000, np.random.default_rng(3))
    assert [t.completion.tolist() for t in a.trajectories] == [
        t.completion.tolist() for t in b.trajectories]
    for t in a.trajectories:
        response = t.completion.sum() + t.tool_tokens[:-1].sum()
        assert response <= 1000 + 1e-9
        assert t.tool_s[-1] == 0 and t.tool_tokens[-1] == 0
